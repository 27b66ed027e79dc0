"""How partition values are written: for the log, as directories, for a person (metastore/delta/layout.py)."""

from __future__ import annotations

import urllib.parse
from datetime import UTC, datetime
from pathlib import Path

import pytest

from metastore.delta.layout import (
    legacy_dir,
    naming_text,
    parse_partition_value,
    partition_dir,
    partition_label,
    partition_value_text,
    placement_text,
    readable_dir,
    staged_dir,
)
from metastore.models import Mode
from tests.fixtures import make_table

HOUR = datetime(2026, 11, 23, 13, tzinfo=UTC)
FORCED = datetime(2026, 11, 23, 13, 17, 39, tzinfo=UTC)
INSTANT = datetime(2026, 11, 23, 13, 17, 39, 868691, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "directory", "label"),
    [
        (HOUR, "ts_period=2026-11-23 13%3A00%3A00", "2026-11-23 13:00"),
        (FORCED, "ts_period=2026-11-23 13%3A17%3A39", "2026-11-23 13:17:39"),
        (INSTANT, "ts_period=2026-11-23 13%3A17%3A39.868691", "2026-11-23 13:17:39.868691"),
        (datetime(1, 1, 1, tzinfo=UTC), "ts_period=0001-01-01 00%3A00%3A00", "0001-01-01 00:00"),
    ],
)
def test_directory_names_and_labels_read_as_the_value(value: datetime, directory: str, label: str) -> None:
    assert readable_dir("ts_period", value) == directory
    assert partition_label(value) == label
    # the directory holds the value (what polars and Spark parse from a path), and the log's text too
    assert parse_partition_value(urllib.parse.unquote(directory.split("=", 1)[1])) == value
    assert parse_partition_value(partition_value_text(value)) == value
    assert partition_value_text(HOUR) == "2026-11-23 13:00:00.000000"  # the log's format is unchanged


def test_a_partition_keeps_the_directory_it_was_rolled_into(sqlite_catalog) -> None:
    table = make_table(sqlite_catalog)
    assert partition_dir(table, HOUR) == "ts_period=2026-11-23 13%3A00%3A00"
    assert staged_dir(table, HOUR) == "_staging/ts_period=2026-11-23 13%3A00%3A00"
    old = legacy_dir("ts_period", HOUR)
    assert old == "ts_period=2026-11-23%2013%3A00%3A00.000000"
    (Path(table.location) / old).mkdir()
    assert partition_dir(table, HOUR) == old
    assert partition_dir(table, FORCED) == "ts_period=2026-11-23 13%3A17%3A39"


def test_describe_says_what_each_mode_does(sqlite_catalog) -> None:
    arrival = make_table(sqlite_catalog, "ns.a")
    event = make_table(sqlite_catalog, "ns.e", mode=Mode.EVENT_TIME)
    assert placement_text(arrival) == (
        "arrival time of each chunk: a chunk's rows go to the partition that is open when it commits "
        "(ts is not used to place rows)"
    )
    assert placement_text(event).startswith("event time from ts: each row goes to the partition")
    assert "forced roll" in naming_text(arrival) and "forced roll" not in naming_text(event)
    info = sqlite_catalog.describe(sqlite_catalog.resolve("ns.a"))
    assert info["partitioned_by"] == placement_text(arrival)
    [p] = info["partitions"]
    assert p["name"] == partition_label(sqlite_catalog.store.streaming_partition(arrival.id).value)
    assert p["location"].endswith(
        staged_dir(arrival, sqlite_catalog.store.streaming_partition(arrival.id).value)
    )
