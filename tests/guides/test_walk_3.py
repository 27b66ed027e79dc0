"""The guides of group 3 (tests/guides/guides.py) run as written."""

from tests.guides.guides import metastores, walk_group

__all__ = ["metastores"]  # the walks' fixture

test_the_guide_runs_as_written = walk_group(2)
