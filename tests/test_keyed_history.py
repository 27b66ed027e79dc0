"""Keyed tables with history (``--history``, SCD type 2): every version of a key is a row, valid from
its sequence value until the next version's (a delete's too), the current one until null.

The truth is computed here in plain Python from the change log the test wrote: per key, the distinct
versions by sequence value (of two with the same value, the later committed), in sequence order,
each valid until the next; deletes end a version and are no row. streampart's answers — ``table
read`` without Spark, SQL through Spark, and after the rolls delta-rs as a plain reader — are
compared with it at every step.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.errors import UserInputError
from metastore.models import Keys, Mode, keys_from_options
from metastore.snapshots import pin
from scheduler.roll import Roller
from streampart.snapshots import read_batches
from tests.fixtures import make_table
from tests.test_keyed import SCHEMA, T0, change_log, jsonl

KEYS = Keys(columns=("id",), sequence_by="lsn", op_column="op", history=True)

Row = tuple[int, int, str, int, int | None]  # id, v, op, valid_from, valid_to


class History:
    """Every version of each key, in the test's commit order."""

    def __init__(self) -> None:
        self.versions: dict[int, dict[int, dict[str, Any]]] = {}  # key → lsn → its latest version

    def apply(self, records: list[dict[str, Any]]) -> None:
        for r in records:
            self.versions.setdefault(r["id"], {})[r["lsn"]] = r

    def rows(self) -> set[Row]:
        out = set()
        for key, by_lsn in self.versions.items():
            order = sorted(by_lsn)
            for i, lsn in enumerate(order):
                r = by_lsn[lsn]
                if r["op"] != "d":
                    out.add((key, r["v"], r["op"], lsn, order[i + 1] if i + 1 < len(order) else None))
        return out


def rows_of(found: list[dict[str, Any]]) -> set[Row]:
    out = {(r["id"], r["v"], r["op"], r["valid_from"], r["valid_to"]) for r in found}
    assert len(out) == len(found), "a version shown twice"
    return out


def read_now(catalog: Any, table: Any) -> set[Row]:
    return rows_of([row for b in read_batches(pin(catalog, table)) for row in b.to_pylist()])


@pytest.mark.parametrize("mode", [Mode.ARRIVAL, Mode.EVENT_TIME], ids=["arrival", "event-time"])
def test_every_version_is_a_row_valid_until_the_next_at_every_step_and_plainly_after_the_rolls(
    catalog, mode: Mode
) -> None:
    import deltalake

    table = make_table(catalog, "ns.hist", mode=mode, schema=SCHEMA, max_future="3650d", keys=KEYS)
    assert [c.name for c in table.columns][-2:] == ["valid_from", "valid_to"]
    writer = ChunkWriter(catalog, table)
    truth = History()
    rng = random.Random(5 if mode is Mode.ARRIVAL else 6)
    floor = latest = 0  # event time: minutes after T0 where partitions are still open (a roll seals them all)
    for step, chunk in enumerate(change_log(rng, 40, 8)):
        if mode is Mode.EVENT_TIME:  # time moves on, a partition an hour: two or three open at once
            for r in chunk:
                minute = max(floor, 20 * step + rng.randrange(40))
                latest = max(latest, minute)
                r["ts"] = (T0 + timedelta(minutes=minute)).isoformat()
        writer.write(jsonl(chunk), Format.JSONL)
        for r in chunk:  # a chunk keeps its last record of each version
            truth.apply([r])
        assert read_now(catalog, table) == truth.rows(), f"after chunk {step}"
        if rng.random() < 0.25:
            Roller(catalog).roll_table(table, force=True)
            assert read_now(catalog, table) == truth.rows(), f"after the roll at chunk {step}"
            floor = (latest // 60 + 1) * 60
    Roller(catalog).roll_table(table, force=True)
    assert read_now(catalog, table) == truth.rows()
    dt = deltalake.DeltaTable(table.location)  # every partition rolled: a plain reader sees the history
    assert rows_of(dt.to_pyarrow_table().to_pylist()) == truth.rows()
    current = {r[0]: r[1] for r in truth.rows() if r[4] is None}
    plain = dt.to_pyarrow_table().to_pylist()
    assert {r["id"]: r["v"] for r in plain if r["valid_to"] is None} == current


@pytest.mark.spark
def test_sql_reads_every_version_merged_with_the_open_partition(catalog, spark) -> None:
    from streampart.query import run_sql

    table = make_table(catalog, "ns.hist", schema=SCHEMA, max_future="3650d", keys=KEYS)
    writer = ChunkWriter(catalog, table)
    truth = History()
    rng = random.Random(8)

    def sql() -> set[Row]:
        found = run_sql(spark, catalog, "SELECT id, v, op, valid_from, valid_to FROM ns.hist").collect()
        return rows_of([r.asDict() for r in found])

    log = change_log(rng, 16, 6)
    for chunk in log[:8]:
        writer.write(jsonl(chunk), Format.JSONL)
        truth.apply(chunk)
    assert sql() == truth.rows()
    Roller(catalog).roll_table(table, force=True)
    assert sql() == truth.rows()  # resolved rows only
    for chunk in log[8:]:
        writer.write(jsonl(chunk), Format.JSONL)
        truth.apply(chunk)
    assert sql() == truth.rows()  # resolved rows recomputed with the open versions of their keys


def test_history_needs_a_sequence_and_refuses_what_it_cannot_do(catalog) -> None:
    from ingest.deletes.deleter import Deleter

    with pytest.raises(UserInputError, match="--history needs --sequence-by"):
        make_table(catalog, "ns.a", schema=SCHEMA, keys=Keys(columns=("id",), history=True))
    with pytest.raises(UserInputError, match="has valid_from already"):
        make_table(catalog, "ns.b", schema=SCHEMA + ", valid_from BIGINT", keys=KEYS)
    table = make_table(catalog, "ns.c", schema=SCHEMA, max_future="3650d", keys=KEYS)
    ChunkWriter(catalog, table).write(jsonl([{"id": 1, "ts": T0.isoformat(), "v": 1, "op": "c", "lsn": 1}]),
                                      Format.JSONL)  # fmt: skip
    with pytest.raises(UserInputError, match="keeps every version"):
        Deleter(catalog).delete(table, "v = 1")
    plain = make_table(catalog, "ns.d", schema=SCHEMA)
    with pytest.raises(UserInputError, match="give it when making the table"):
        catalog.keys.declare(plain, KEYS)
    # as CREATE TABLE … TBLPROPERTIES give it
    assert keys_from_options("id", "lsn", "op", history="TRUE", flag="TBLPROPERTIES '{}'") == KEYS
    with pytest.raises(UserInputError, match="TBLPROPERTIES 'history' is true or false, not 'yes'"):
        keys_from_options("id", "lsn", "op", history="yes", flag="TBLPROPERTIES '{}'")


@pytest.mark.process
@pytest.mark.parametrize(
    "point", ["roll-after-seal", "roll-after-compact", "roll-after-sweep", "roll-before-finish"]
)
def test_a_history_roll_killed_at_each_step_then_resumed_reads_every_version_exactly(
    catalog, point: str
) -> None:
    """A roller process SIGKILLed at ``point`` of the roll of a partition whose keys have versions in a
    standard partition (its sweep rewrites their valid_to): right after, while writers carry on, and
    once the roll is resumed, every version reads as the truth; then delta-rs shows it."""
    import signal
    import subprocess

    import deltalake

    from metastore.models import PartitionState
    from tests.helpers import worker_call
    from tests.test_keyed_crash import take_over

    table = make_table(
        catalog, f"ns.h{point.replace('-', '_')}", schema=SCHEMA, max_future="3650d", keys=KEYS
    )
    writer = ChunkWriter(catalog, table)
    truth = History()
    rng = random.Random(point)
    log = change_log(rng, 18, 6)

    def write(chunk: list[dict[str, Any]]) -> None:
        writer.write(jsonl(chunk), Format.JSONL)
        truth.apply(chunk)

    for chunk in log[:6]:
        write(chunk)
    Roller(catalog).roll_table(table, force=True)  # S: a standard partition with versions of the keys
    for chunk in log[6:12]:
        write(chunk)
    rolled = catalog.store.streaming_partition(table.id).value
    proc = subprocess.run(
        **worker_call(
            catalog, table, "roller", "--count", "1", "--interval", "0", "--force", crashpoint=point
        ),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert catalog.store.get_partition(table.id, rolled).state is PartitionState.ROLLING
    assert read_now(catalog, table) == truth.rows()  # right after the kill
    for chunk in log[12:]:  # writers carry on: into the partition opened as the roll began
        write(chunk)
    assert read_now(catalog, table) == truth.rows()
    resumed, dead = take_over(catalog, table)
    assert [(r.roll, r.resumed) for r in resumed.roll_table(table, force=True)][:1] == [(dead.id, True)]
    assert catalog.store.get_partition(table.id, rolled).state is PartitionState.STANDARD
    assert read_now(catalog, table) == truth.rows()
    Roller(catalog).roll_table(table, force=True)
    assert rows_of(deltalake.DeltaTable(table.location).to_pyarrow_table().to_pylist()) == truth.rows()


def test_expired_versions_leave_the_history_and_still_end_the_versions_before_them(catalog) -> None:
    """Retention removes the standard partitions' versions; those in the open partition stay, and a
    version arriving late that is older than an expired one still ends at it (it is no current row)."""
    from datetime import UTC, datetime

    from scheduler.expiry import Expirer

    table = make_table(catalog, "ns.hist", schema=SCHEMA, max_future="3650d", keys=KEYS)
    writer = ChunkWriter(catalog, table)
    truth = History()
    old = [{"id": k, "ts": T0.isoformat(), "v": k, "op": "c", "lsn": 10} for k in range(4)]
    writer.write(jsonl(old), Format.JSONL)
    truth.apply(old)
    Roller(catalog).roll_table(table, force=True)  # a standard partition: the one to expire
    new = [{"id": k, "ts": T0.isoformat(), "v": 100 + k, "op": "u", "lsn": 20} for k in (0, 1)]
    writer.write(jsonl(new), Format.JSONL)  # in the open partition: they stay
    truth.apply(new)
    assert read_now(catalog, table) == truth.rows()
    table = catalog.store.set_retain(table.id, timedelta(hours=1))
    Expirer(catalog).expire_table(table, now=datetime.now(UTC) + timedelta(days=3))
    kept = {r for r in truth.rows() if r[3] == 20}
    assert read_now(catalog, table) == kept
    late = {"id": 3, "ts": T0.isoformat(), "v": 7, "op": "u", "lsn": 5}  # older than key 3's expired one
    writer.write(jsonl([late]), Format.JSONL)
    assert read_now(catalog, table) == kept | {(3, 7, "u", 5, 10)}  # valid until the expired version
    Roller(catalog).roll_table(table, force=True)
    assert read_now(catalog, table) == kept | {(3, 7, "u", 5, 10)}
