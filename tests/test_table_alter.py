"""ALTER of a table's columns (issue 27, plan step 4): ``streampart table alter --add-column/--widen-column``
through the real CLI, read back by delta-rs, polars and DuckDB; refusals that change nothing; SIGKILL at
each step of the protocol; a chunk writer committing while an ALTER runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.delta.files import live_files
from metastore.delta.log import SCHEMA_KEY, commit_info
from metastore.delta.metadata import schema_at
from metastore.errors import SchemaConflictError, UserInputError
from metastore.integrity import check_table
from metastore.models import LateDataPolicy, Mode, Table, TableKind, parse_schema
from tests.fixtures import make_table
from tests.helpers import ROOT, all_ids, duplicates, jsonl

pytestmark = pytest.mark.process  # the CLI runs in processes of its own

SCHEMA = "id BIGINT, ts TIMESTAMP, msg STRING, qty INT"


def cli(catalog: Catalog, *args: str, crashpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    """``streampart …`` in a process of its own, on ``catalog``'s warehouse and metastore."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    env["PYTHONPATH"] = str(ROOT)
    if crashpoint:
        env["STREAMPART_CRASHPOINT"] = crashpoint
    argv = [sys.executable, "-m", "streampart.cli", "--warehouse", str(catalog.warehouse.root),
            "--metastore", catalog.store.url, *args]  # fmt: skip
    return subprocess.run(argv, cwd=ROOT, env=env, text=True, capture_output=True, timeout=120)


def rows(ids: range, **extra: object) -> bytes:
    return jsonl([{"id": i, "ts": "2026-11-21T10:15:00Z", "msg": f"m{i}", "qty": i, **extra} for i in ids])


def schema_versions(table: Table) -> list[int]:
    newest = int(DeltaTable(table.location).version())
    return [v for v in range(newest + 1) if SCHEMA_KEY in (commit_info(table, v) or {})]


def test_add_and_widen_by_cli_then_every_reader_and_new_chunks(catalog: Catalog) -> None:
    table = make_table(catalog, schema=SCHEMA)
    ChunkWriter(catalog, table).write(rows(range(3)), Format.JSONL)
    done = cli(catalog, "table", "alter", "ns.events", "--add-column", "coupon STRING",
               "--widen-column", "qty BIGINT", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["schema_change"]["change"] == "widen qty INT to BIGINT, add coupon STRING"
    assert [c["name"] for c in said["columns"]] == ["id", "ts", "msg", "qty", "coupon"]
    table = catalog.table("ns.events")
    assert table.columns == schema_at(Path(table.location))
    assert [(c.name, c.type) for c in table.columns][-2:] == [("qty", "long"), ("coupon", "string")]
    # a writer that reads the table now writes the new field
    ChunkWriter(catalog, table).write(rows(range(3, 5), coupon="SAVE", qty=2**40), Format.JSONL)

    got = DeltaTable(table.location).to_pyarrow_table().sort_by("id").to_pylist()
    assert [r["coupon"] for r in got] == [None, None, None, "SAVE", "SAVE"]
    assert [r["qty"] for r in got] == [0, 1, 2, 2**40, 2**40]
    frame = pl.read_delta(table.location).sort("id")
    assert frame["coupon"].to_list() == [None, None, None, "SAVE", "SAVE"]
    assert frame["qty"].to_list() == [0, 1, 2, 2**40, 2**40]
    files = [str(Path(table.location) / f.path) for f in live_files(DeltaTable(table.location))]
    duck = (
        duckdb.connect()
        .execute(f"SELECT id, qty, coupon FROM read_parquet({files!r}, union_by_name=true) ORDER BY id")
        .fetchall()
    )
    assert duck == [(0, 0, None), (1, 1, None), (2, 2, None), (3, 2**40, "SAVE"), (4, 2**40, "SAVE")]

    described = json.loads(cli(catalog, "table", "describe", "ns.events", "--json").stdout)
    assert [(c["version"], c["change"], c["source"]) for c in described["schema_changes"]] == [
        (2, "widen qty INT to BIGINT, add coupon STRING", "alter")
    ]
    assert described["schema_evolution"] == "none" and described["max_new_columns"] == 100
    history = json.loads(cli(catalog, "table", "history", "ns.events", "--json").stdout)
    marked = [v["version"] for v in history["versions"] if v["schema_change"]]
    assert marked == [2] and "schema changed" in cli(catalog, "table", "history", "ns.events").stdout
    assert [v["operation"] for v in history["versions"] if v["version"] == 2] == ["CHANGE COLUMN"]
    # the commitInfo says what Delta writes for the change, naming its columns
    info = commit_info(table, 2) or {}
    params = info["operationParameters"]
    assert info["operation"] == "CHANGE COLUMN"
    assert [c["column"]["name"] for c in json.loads(params["columns"])] == ["qty"]
    assert [c["column"] for c in json.loads(params["added"])] == [
        {"name": "coupon", "type": "string", "nullable": True, "metadata": {}}
    ]
    assert check_table(catalog, table) == []


def test_the_late_companion_changes_with_its_table(catalog: Catalog) -> None:
    make_table(catalog, schema=SCHEMA, mode=Mode.EVENT_TIME, lateness="1h", late_data=LateDataPolicy.DIVERT)
    altered = catalog.schemas.alter("ns.events", add=parse_schema("coupon STRING"))
    late = catalog.companion(altered.table, TableKind.LATE)
    assert altered.late is not None and late.columns == altered.table.columns
    assert schema_at(Path(late.location)) == late.columns
    info = commit_info(altered.table, altered.change.version or 0) or {}
    assert info["operation"] == "ADD COLUMNS"
    assert [c["column"]["name"] for c in json.loads(info["operationParameters"]["columns"])] == ["coupon"]
    with pytest.raises(UserInputError, match="companion"):
        catalog.schemas.alter(late, add=parse_schema("other STRING"))


# Each unsafe change: what the error names. Nothing changes: not the log, not the metastore.
REFUSALS = [
    (["--widen-column", "qty SMALLINT"], "SMALLINT is narrower than INT"),
    (["--widen-column", "msg INT"], "STRING to INT changes the kind of the column"),
    (["--add-column", "ts_period STRING"], "is the partition column's name"),
    (["--widen-column", "ts_period TIMESTAMP"], "is the partition column"),
    (["--add-column", "MSG STRING"], "differs from the existing column 'msg' only in case"),
    (["--add-column", "coupon STRING NOT NULL"], "cannot be NOT NULL"),
    (["--widen-column", "nope BIGINT"], "there is no column 'nope' to widen"),
    (["--add-column", "coupon"], "--add-column 'coupon'"),
    # several problems at once: all named
    (["--add-column", "msg STRING", "--widen-column", "qty TINYINT"], "exists already; column 'qty'"),
]


@pytest.mark.parametrize(("args", "error"), REFUSALS)
def test_an_unsafe_change_is_one_error_and_changes_nothing(
    catalog: Catalog, args: list[str], error: str
) -> None:
    table = make_table(catalog, schema=SCHEMA)
    version = int(DeltaTable(table.location).version())
    done = cli(catalog, "table", "alter", "ns.events", *args)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and error in lines[0], done.stderr
    assert int(DeltaTable(table.location).version()) == version
    assert catalog.table("ns.events").columns == table.columns
    assert catalog.home(table).store.schema_changes(table.id) == []


def test_schema_evolution_settings_by_cli(catalog: Catalog) -> None:
    done = cli(catalog, "table", "create", "ns.t", "--schema", SCHEMA, "--time-column", "ts",
               "--roll-every", "1h", "--schema-evolution", "add-columns",
               "--max-new-columns", "7")  # fmt: skip
    assert done.returncode == 0, done.stderr
    t = catalog.table("ns.t")
    assert (t.schema_evolution.value, t.max_new_columns) == ("add-columns", 7)
    done = cli(
        catalog, "table", "alter", "ns.t", "--schema-evolution", "add-and-widen", "--max-new-columns", "9"
    )
    assert done.returncode == 0, done.stderr
    t = catalog.table("ns.t")
    assert (t.schema_evolution.value, t.max_new_columns) == ("add-and-widen", 9)
    bad = cli(catalog, "table", "alter", "ns.t", "--schema-evolution", "sometimes")
    assert bad.returncode == 1 and bad.stderr.startswith("error: --schema-evolution must be one of")


# Where an ALTER dies (SIGKILL), and how the next look at the table recovers it.
CRASHES = [
    # recorded pending, nothing in the log: discarded once stale, then the ALTER runs again
    "schema-before-log",
    # in the log, the metastore not told: `streampart check` finds the commit by its key and finishes it
    "schema-after-log",
]


@pytest.mark.parametrize("point", CRASHES)
def test_an_alter_killed_at_each_step_recovers_to_one_schema_version(catalog: Catalog, point: str) -> None:
    table = make_table(catalog, schema=SCHEMA)
    ChunkWriter(catalog, table).write(rows(range(3)), Format.JSONL)
    killed = cli(catalog, "table", "alter", "ns.events", "--add-column", "coupon STRING", crashpoint=point)
    assert killed.returncode == -signal.SIGKILL
    assert catalog.table("ns.events").columns == table.columns  # the metastore is never ahead
    store = catalog.home(table).store
    assert len(store.pending_schema_changes(table.id)) == 1
    ChunkWriter(catalog, catalog.table("ns.events")).write(rows(range(3, 6)), Format.JSONL)
    if point == "schema-before-log":
        assert schema_versions(table) == []
        again = cli(catalog, "table", "alter", "ns.events", "--add-column", "coupon STRING")
        assert again.returncode == 1 and "in progress" in again.stderr  # it may still be running
        assert len(catalog.schemas.recover(table, stale_after=timedelta(0))) == 1
        again = cli(catalog, "table", "alter", "ns.events", "--add-column", "coupon STRING")
        assert again.returncode == 0, again.stderr
    else:
        checked = cli(catalog, "check", "--json")
        assert "schema_finished" in checked.stdout, checked.stdout
    assert store.pending_schema_changes(table.id) == []
    assert len(schema_versions(table)) == 1
    table = catalog.table("ns.events")
    assert table.columns == schema_at(Path(table.location))
    assert table.columns[-1].name == "coupon"
    ChunkWriter(catalog, table).write(rows(range(6, 8), coupon="c"), Format.JSONL)
    ids = all_ids(table)
    assert sorted(ids) == list(range(8)) and duplicates(ids) == []
    assert check_table(catalog, table) == []


def test_a_writer_committing_while_an_alter_runs_loses_nothing(catalog: Catalog) -> None:
    table = make_table(catalog, schema=SCHEMA)
    acked: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def write() -> None:
        w = ChunkWriter(catalog, table)  # planned on the old columns throughout
        n = 0
        try:
            while not stop.is_set() or n < 10:
                w.write(rows(range(n * 5, n * 5 + 5)), Format.JSONL)
                acked.extend(range(n * 5, n * 5 + 5))
                n += 1
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for i in range(5):
            catalog.schemas.alter("ns.events", add=parse_schema(f"extra{i} STRING"))
    finally:
        stop.set()
        writer.join()
    assert errors == []
    table = catalog.table("ns.events")
    assert [c.name for c in table.columns][-5:] == [f"extra{i}" for i in range(5)]
    assert table.columns == schema_at(Path(table.location))
    assert len(schema_versions(table)) == 5
    ids = all_ids(table)
    assert sorted(ids) == sorted(acked) and duplicates(ids) == []


def test_an_alter_run_again_under_its_key_lands_once(catalog: Catalog) -> None:
    table = make_table(catalog, schema=SCHEMA)
    first = catalog.schemas.alter("ns.events", add=parse_schema("coupon STRING"), key="k1")
    again = catalog.schemas.alter("ns.events", add=parse_schema("coupon STRING"), key="k1")
    assert again.change == first.change and len(schema_versions(table)) == 1
    with pytest.raises(UserInputError, match="exists already"):  # a new key is a new change
        catalog.schemas.alter("ns.events", add=parse_schema("coupon STRING"), key="k2")


def test_a_table_with_delta_features_adds_through_delta_rs_and_refuses_widening(catalog: Catalog) -> None:
    from deltalake import TableFeatures

    table = make_table(catalog, schema=SCHEMA)
    DeltaTable(table.location).alter.add_feature(
        [TableFeatures.ChangeDataFeed], allow_protocol_versions_increase=True
    )
    version = int(DeltaTable(table.location).version())
    with pytest.raises(UserInputError, match="cannot widen a column's type"):
        catalog.schemas.alter("ns.events", widen=parse_schema("qty BIGINT"))
    assert int(DeltaTable(table.location).version()) == version
    assert catalog.home(table).store.schema_changes(table.id) == []
    altered = catalog.schemas.alter("ns.events", add=parse_schema("coupon STRING"))
    assert altered.change.version == version + 1 == schema_versions(table)[0]
    assert altered.table.columns == schema_at(Path(table.location))
    ChunkWriter(catalog, altered.table).write(rows(range(2), coupon="c"), Format.JSONL)
    assert sorted(all_ids(altered.table)) == [0, 1]


def test_a_landed_change_that_another_one_overtook_does_not_block_the_table(catalog: Catalog) -> None:
    # Two ALTERs add the same column, both recorded before either committed (each one's recovery ran
    # before the other recorded); "fast" commits and finishes between "slow"'s commit and its finish.
    from metastore.delta.metadata import current_metadata, metadata_action

    table = make_table(catalog, schema=SCHEMA)
    store, wh = catalog.home(table).store, catalog.warehouse
    after = (*table.columns, *parse_schema("coupon STRING"))
    for key in ("slow", "fast"):
        store.record_schema_change(table.id, key, table.columns, after, "alter")
    for key in ("fast", "slow"):
        action = metadata_action(current_metadata(Path(table.location)), after, table.partition_column)
        version = wh.commit_schema(table, int(DeltaTable(table.location).version()), action, [], [], key)
        if key == "fast":
            store.finish_schema_change(table.id, key, version)
    with pytest.raises(SchemaConflictError):  # "slow" cannot finish: the columns moved
        store.finish_schema_change(table.id, "slow", version)
    assert [c.key for c in catalog.schemas.recover(table)] == ["slow"]
    assert store.pending_schema_changes(table.id) == []
    catalog.schemas.alter(table, add=parse_schema("other STRING"))  # not blocked
    assert catalog.table("ns.events").columns == schema_at(Path(table.location))
