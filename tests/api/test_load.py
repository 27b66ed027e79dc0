"""A short version of the load benchmark (bench/http_load.py) in the test-suite.

8 producers commit through a real server for 10 s while a real roll daemon rolls the table
every 3 s; every acknowledged chunk must be present exactly once, whole, in one partition.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.http_load import load


@pytest.mark.process
def test_concurrent_producers_while_rolls_run_land_every_acknowledged_chunk_once(tmp_path: Path) -> None:
    result = load(tmp_path / "warehouse", None, producers=8, seconds=10, roll_every="3s", log_dir=tmp_path)
    summary = result.summary()
    print(summary)
    assert result.verified, summary
    assert result.commits >= 8, summary
    assert result.standard_partitions >= 1, summary  # rolls happened under the writes
