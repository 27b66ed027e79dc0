"""The catalog: creating tables, and a creation that a crash cut in half (alone and federated, see
``tests.fixtures.routed_catalog``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from metastore.errors import AlreadyExistsError
from tests.fixtures import make_table, routed_catalog  # noqa: F401


def test_reading_a_table_never_creates_anything(catalog) -> None:
    # Issue 9: Catalog.table() created a missing Delta table as a side effect of a lookup.
    table = make_table(catalog, "ns.half")
    shutil.rmtree(Path(table.location) / "_delta_log")  # as if the creator died before the log
    assert catalog.table("ns.half").id == table.id
    assert not (Path(table.location) / "_delta_log").exists()


def test_creating_again_finishes_a_creation_that_died_half_way(catalog) -> None:
    table = make_table(catalog, "ns.half", dead_letter=True)
    shutil.rmtree(Path(table.location) / "_delta_log")
    again = make_table(catalog, "ns.half", dead_letter=True)
    assert (Path(again.location) / "_delta_log").is_dir()
    assert catalog.warehouse.load(again).version() == 0
    with pytest.raises(AlreadyExistsError):
        make_table(catalog, "ns.half")
    assert [str(t.name) for t in catalog.list_tables().merged()] == ["ns.half", "ns.half__dead_letter"]


def test_a_table_whose_log_was_lost_after_commits_is_never_dropped_by_a_create(catalog) -> None:
    from ingest.chunks import ChunkWriter
    from ingest.formats import Format
    from metastore.errors import TableIntegrityError
    from tests.helpers import records

    table = make_table(catalog, "ns.lost")
    ChunkWriter(catalog, table).write(records(range(3)), Format.JSONL)
    shutil.rmtree(Path(table.location) / "_delta_log")  # a lost log (a missing mount, a bad disk)
    with pytest.raises(TableIntegrityError, match="restore the table's directory"):
        make_table(catalog, "ns.lost")
    assert catalog.table("ns.lost").id == table.id  # its records stay


def test_names_match_in_any_case_as_in_spark(catalog) -> None:
    """Issue 25: `SHOP.Orders` was "does not exist" where Spark and Hive match names in any case."""
    from metastore.errors import NotFoundError, UserInputError

    made = make_table(catalog, "ns.Events")
    for written in ("ns.Events", "NS.events", "Ns.EVENTS"):
        assert catalog.table(written).uid == made.uid
        assert catalog.resolve(written).table.uid == made.uid
    assert catalog.resolve("EVENTS", namespace="NS").table.uid == made.uid
    with pytest.raises(NotFoundError, match=r"ns\.nope does not exist"):
        catalog.table("ns.nope")
    make_table(catalog, "ns.events")  # another table, whose name differs only by case
    assert catalog.table("ns.events").uid != made.uid  # an exact name is that table
    with pytest.raises(UserInputError, match="differ only by case"):
        catalog.resolve("NS.EVENTS")
