"""Every guide's examples run as written, each guide on a fresh warehouse of its own, in order, in one
shell, as a user would paste them (tests/walkthrough.py says how).

The walks are split over a few test files (``test_walk_*.py``, one :data:`GROUPS` entry each), so
that the suite's workers, which take a file at a time, walk them side by side.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.pg import drop_scratch_schema, scratch_schema_url
from tests.walkthrough import ROOT, section, walk

# Each guide with the time its walk may take (seconds; a 2-core machine at load 4–8: most of it is
# Spark starting for a query, 25–90 s each), in groups of about equal time.
GROUPS: tuple[dict[str, int], ...] = (
    {
        "docs/guides/clusters.md": 420,  # 150 s
        "docs/guides/namespaces-and-links.md": 300,  # 95 s
        "docs/guides/files.md": 300,  # 55 s
        "docs/guides/sql.md": 420,  # 80 s (220 s at load 7–8)
    },
    {
        "docs/guides/object-storage.md": 420,  # 130 s
        "docs/guides/keyed-tables.md": 300,  # 70 s
        "docs/guides/federation.md": 300,  # 50 s
        "docs/guides/kafka.md": 300,  # 55 s
        "docs/guides/http.md": 300,  # 15 s
        "docs/guides/clustering.md": 300,  # 30 s
        "docs/guides/deployment.md": 60,  # each command needs a Docker engine: only the convention is checked
    },
    {
        "docs/guides/spark-cluster.md": 420,  # 115 s
        "docs/guides/lifecycle.md": 300,  # 40 s
        "docs/guides/roll-daemon.md": 300,  # 35 s
        "docs/guides/other-engines.md": 300,  # 30 s
        "docs/guides/schema-changes.md": 300,  # 75 s
    },
)
GUIDES = {guide: seconds for group in GROUPS for guide, seconds in group.items()}


@pytest.fixture
def metastores() -> Iterator[dict[str, str]]:
    """Two scratch schemas: {m1}, {m2}, {secret1}, {secret2} of the placeholders."""
    urls = [scratch_schema_url("sp_guide") for _ in range(2)]
    values = {}
    for k, url in enumerate(urls, 1):
        found = re.match(r"([^:]+://[^:@/]+)(?::([^@]*))?@(.*)", url)
        assert found, f"STREAMPART_TEST_PG names no user: {url}"
        prefix, password, rest = found.groups()
        values[f"m{k}"] = f"{prefix}:${{M{k}_PASSWORD}}@{rest}"
        values[f"secret{k}"] = password or f"m{k}-secret"
    try:
        yield values
    finally:
        for url in urls:
            drop_scratch_schema(url)


def walk_group(n: int) -> Callable[..., None]:
    """The test that walks the guides of ``GROUPS[n]``, one at a time."""
    group = GROUPS[n]

    @pytest.mark.spark  # their queries start Spark in their own processes
    @pytest.mark.process
    @pytest.mark.timeout(max(group.values()) + 60)
    @pytest.mark.parametrize("guide", sorted(group))
    def test_the_guide_runs_as_written(guide: str, tmp_path: Path, metastores: dict[str, str]) -> None:
        walk([section(guide)], tmp_path, metastores, group[guide])

    return test_the_guide_runs_as_written


def runnable(name: str) -> bool:
    return "```bash" in (ROOT / name).read_text(encoding="utf-8")
