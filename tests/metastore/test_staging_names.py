"""Staged file names: written by one function, read back by one (the chunk a file belongs to)."""

from __future__ import annotations

import pytest

from metastore.delta.layout import STAGING_DIR, chunk_of_staged, staging_path

CHUNK = (
    "3b06802e-9f95-4701-8453-5879174330c4"  # fixed: test ids must be the same in every process (pytest-xdist)
)


@pytest.mark.parametrize(
    "name",
    [
        f"{CHUNK}-ab12cd34-0.parquet",  # a writer's file
        f"{CHUNK}-00003-1.parquet",  # a Spark task's file
        f"{CHUNK}-2-0-0.parquet",  # an HTTP upload's batch
        f".{CHUNK}-upload-ab12cd34.tmp",  # an upload being spooled
        f".{CHUNK}-0-0.parquet.0123abcd.tmp",  # a file being written
    ],
)
def test_every_staged_name_leads_back_to_its_chunk(name: str) -> None:
    assert chunk_of_staged(name) == CHUNK


def test_the_warehouse_names_staged_files_after_their_chunk(tmp_path) -> None:
    from metastore.catalog import Catalog

    catalog = Catalog.open(tmp_path / "wh")
    try:
        path = staging_path(f"{CHUNK}-ab12cd34", 0)
    finally:
        catalog.close()
    assert path.startswith(STAGING_DIR + "/") and chunk_of_staged(path.rsplit("/", 1)[1]) == CHUNK
