"""Every guide's examples run as written, each guide on a fresh warehouse of its own, in order, in one
shell, as a user would paste them (tests/walkthrough.py says how)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg import drop_scratch_schema, scratch_schema_url
from tests.walkthrough import PLACEHOLDERS, ROOT, commands, problems, section, walk

# Each guide with the time its walk may take (seconds; a 2-core machine at load 4–8, most of it
# Spark starting for each query).
GUIDES = {
    "docs/guides/namespaces-and-links.md": 300,
    "docs/guides/keyed-tables.md": 300,
    "docs/guides/lifecycle.md": 300,
    "docs/guides/files.md": 300,
    "docs/guides/roll-daemon.md": 300,
    "docs/guides/spark-cluster.md": 420,
    "docs/guides/object-storage.md": 420,
    "docs/guides/other-engines.md": 300,
    "docs/guides/clusters.md": 420,
    "docs/guides/federation.md": 300,
    "docs/guides/deployment.md": 60,  # every command needs a Docker engine: only its convention is checked
}
# Guides whose examples are being made to run on a warehouse of their own (they were written to
# follow the README's tour); each moves to GUIDES when it does.
CONVERTING = {
    "docs/guides/http.md",
    "docs/guides/kafka.md",
    "docs/guides/schema-changes.md",
    "docs/guides/sql.md",
}


def _runnable(name: str) -> bool:
    return "```bash" in (ROOT / name).read_text(encoding="utf-8")


def test_every_guide_with_commands_is_walked() -> None:
    guides = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "guides").glob("*.md"))
    assert [g for g in guides if _runnable(g) and g not in GUIDES and g not in CONVERTING] == []


@pytest.mark.parametrize("guide", sorted(GUIDES))
def test_the_convention_is_kept(guide: str) -> None:
    """Every command is runnable or says why not, and says its exit status when it fails."""
    assert problems(commands([section(guide)], {})) == []


def test_every_placeholder_is_still_used() -> None:
    text = "\n".join(section(name)[2] for name in [*GUIDES, *CONVERTING, "README.md"])
    assert [p for p in PLACEHOLDERS if p not in text] == []


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


@pytest.mark.spark  # their queries start Spark in their own processes
@pytest.mark.process
@pytest.mark.timeout(max(GUIDES.values()) + 60)
@pytest.mark.parametrize("guide", sorted(GUIDES))
def test_the_guide_runs_as_written(guide: str, tmp_path: Path, metastores: dict[str, str]) -> None:
    walk([section(guide)], tmp_path, metastores, GUIDES[guide])
