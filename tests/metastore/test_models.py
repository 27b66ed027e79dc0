"""The nouns' small rules that every caller relies on, written once in metastore.models."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from metastore.models import TableKind, TableName, TableSpec, companion_name, parse_schema


def test_the_partition_column_defaults_to_the_time_column_and_period() -> None:
    spec = TableSpec(
        name=TableName.parse("ns.t"), columns=parse_schema("ts TIMESTAMP"), time_column="ts",
        roll_every=timedelta(hours=1),
    )  # fmt: skip
    assert spec.partition_column == "ts_period"
    named = spec.model_copy(update={"partition_column": "hour"})
    assert named.partition_column == "hour"


def test_companions_are_named_after_their_main_table() -> None:
    name = TableName.parse("ns.t")
    assert str(companion_name(name, TableKind.DEAD_LETTER)) == "ns.t__dead_letter"
    assert str(companion_name(name, TableKind.LATE)) == "ns.t__late"


def test_a_period_ends_one_interval_after_it_starts() -> None:
    from metastore.models import Table

    table = Table(
        name=TableName.parse("ns.t"), columns=parse_schema("ts TIMESTAMP"), time_column="ts",
        roll_every=timedelta(hours=1), id=1, location="/x", created_at=datetime.now(UTC),
    )  # fmt: skip
    assert table.period_end(datetime(2026, 1, 1, 10, 30, tzinfo=UTC)) == datetime(2026, 1, 1, 11, tzinfo=UTC)
    assert table.period_end(datetime.max.replace(tzinfo=UTC)) == datetime.max.replace(tzinfo=UTC)
