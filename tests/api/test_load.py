"""A short version of the load benchmark (bench/http_load.py) in the test-suite.

8 producers commit through a real server for 8 s while a real roll daemon rolls the table
every 3 s; every acknowledged chunk must be present exactly once, whole, in one partition. Once
with the three requests of the protocol, once with the upload committing (``?commit=true``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.http_load import load


@pytest.mark.process
@pytest.mark.parametrize("one_request", [False, True], ids=["three-requests", "upload-commits"])
def test_concurrent_producers_while_rolls_run_land_every_acknowledged_chunk_once(
    tmp_path: Path, one_request: bool
) -> None:
    result = load(
        tmp_path / "warehouse", None, producers=8, seconds=8, roll_every="3s", log_dir=tmp_path,
        one_request=one_request,
    )  # fmt: skip
    summary = result.summary()
    print(summary)
    assert result.verified, summary
    assert result.commits >= 8, summary
    assert result.standard_partitions >= 1, summary  # rolls happened under the writes
