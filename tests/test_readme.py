"""The README's tour runs as written, on a fresh warehouse (tests/walkthrough.py says how)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.walkthrough import commands, problems, section, walk

TOUR = ("README.md", "A five-minute tour")
# The whole tour: about a minute on a 2-core machine at load 4 (its one Spark query is most of it).
TIMEOUT_S = 420


def test_the_convention_is_kept() -> None:
    """Every command is runnable or says why not, and says its exit status when it fails."""
    cmds = commands([section(*TOUR)], {})
    assert len(cmds) >= 15, "the tour's bash blocks were not found"
    assert problems(cmds) == []


@pytest.mark.spark  # its query starts Spark in its own process
@pytest.mark.timeout(TIMEOUT_S + 60)
def test_the_readme_runs_as_written(tmp_path: Path) -> None:
    walk([section(*TOUR)], tmp_path, {}, TIMEOUT_S)
