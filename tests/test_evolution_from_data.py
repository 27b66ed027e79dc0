"""Schema evolution from the data (issue 27, plan step 6): fields a table lacks become columns, in the
same Delta commit as the rows that bring them.

Every answer is read back by an engine other than streampart's (delta-rs, polars, DuckDB over the
log's files, plain Parquet over a rolled partition's directory). Crash tests SIGKILL a real CLI
process at the evolving commit's named point and write again under the same key; concurrency tests
race writer processes bringing fields on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from ingest.chunks import ChunkWriter
from ingest.errors import MalformedChunkError
from ingest.formats import Format, parse
from metastore.catalog import Catalog
from metastore.delta.layout import partition_dir
from metastore.delta.log import SCHEMA_KEY, commit_actions, commit_info
from metastore.delta.metadata import schema_at
from metastore.errors import SchemaConflictError
from metastore.integrity import check_table
from metastore.models import LateDataPolicy, Mode, SchemaChangeState, Table, TableKind, parse_schema
from scheduler.config import RollConfig
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import all_ids, duplicates, jsonl, worker_call

TS = "2026-11-21T10:15:00Z"


def evolving(catalog: Catalog, evolution: str = "add-columns", **kw: Any) -> Table:
    table = make_table(catalog, **kw)
    return catalog.schemas.set_evolution(table, evolution)


def rows(ids: range | list[int], **extra: object) -> bytes:
    return jsonl([{"id": i, "ts": TS, "msg": f"m{i}", **extra} for i in ids])


def log_rows(table: Table, version: int | None = None) -> list[dict[str, Any]]:
    """The table's rows as delta-rs reads them, by id (the partition column left out)."""
    dt = DeltaTable(table.location, version=version)
    data = dt.to_pyarrow_table().drop_columns([table.partition_column])
    return sorted(data.to_pylist(), key=lambda r: r["id"])


def schema_versions(table: Table) -> list[int]:
    newest = int(DeltaTable(table.location).version())
    return [v for v in range(newest + 1) if SCHEMA_KEY in (commit_info(table, v) or {})]


def names(columns: Any) -> list[str]:
    return [c.name for c in columns]


# -- inference ---------------------------------------------------------------------------------
# (the values of a new field in one chunk) → the column it becomes (None: none), and the ids whose
# record is a bad record because its value cannot be held by that type
INFERENCE = [
    pytest.param([1, 2], "long", [], id="integers-bigint"),
    pytest.param([1, 2.5], "double", [], id="integer-then-fraction-double"),
    pytest.param([1, 2**70], "double", [], id="past-64-bits-double"),
    pytest.param([1, "x"], "string", [], id="number-and-text-string"),
    pytest.param([True, False], "boolean", [], id="booleans"),
    pytest.param(["a", True], "string", [1], id="boolean-among-text-is-bad"),
    pytest.param(["2026-11-21T10:15:00Z"], "string", [], id="time-like-text-stays-text"),
    pytest.param([{"a": 1}, [1]], None, [], id="nested-only-refused"),
    pytest.param([None, None], None, [], id="nulls-only-refused"),
    pytest.param(["a", {"a": 1}], "string", [1], id="nested-among-text-is-bad"),
]


@pytest.mark.parametrize(("values", "kind", "bad"), INFERENCE)
def test_a_new_fields_type_is_inferred_from_the_chunks_values(
    catalog: Catalog, values: list[Any], kind: str | None, bad: list[int]
) -> None:
    table = evolving(catalog, dead_letter=True)
    content = jsonl([{"id": i, "ts": TS, "extra": v} for i, v in enumerate(values)])
    result = ChunkWriter(catalog, table).write(content, Format.JSONL)
    columns = schema_at(Path(table.location))
    if kind is None:
        assert "extra" not in names(columns) and result.ignored_fields == {"extra": len(values)}
        assert "extra" in result.refused_fields and schema_versions(table) == []
        return
    assert columns[-1].name == "extra" and columns[-1].type == kind
    assert result.new_columns == {"extra": columns[-1].sql_type}
    assert result.dead_letter_rows == len(bad)
    assert [r["id"] for r in log_rows(table)] == [i for i in range(len(values)) if i not in bad]


def test_field_names_no_reader_can_hold_stay_ignored_with_the_reason(catalog: Catalog) -> None:
    table = evolving(catalog)
    content = jsonl([{"id": 1, "ts": TS, "Msg": "case", "ts_period": "p", "bad-name": 1, "ok": 1}])
    result = ChunkWriter(catalog, table).write(content, Format.JSONL)
    assert result.new_columns == {"ok": "BIGINT"}
    assert set(result.refused_fields) == {"Msg", "ts_period", "bad-name"}
    assert "only in case" in result.refused_fields["Msg"]
    assert "partition column" in result.refused_fields["ts_period"]
    assert result.ignored_fields == {"Msg": 1, "ts_period": 1, "bad-name": 1}
    assert names(schema_at(Path(table.location))) == ["id", "ts", "msg", "ok"]


def test_with_evolution_none_fields_are_ignored_and_the_schema_stays(catalog: Catalog) -> None:
    table = make_table(catalog)
    result = ChunkWriter(catalog, table).write(rows([1], coupon="X"), Format.JSONL)
    assert result.ignored_fields == {"coupon": 1} and result.new_columns == {}
    assert names(schema_at(Path(table.location))) == ["id", "ts", "msg"] and schema_versions(table) == []


# -- the commit ----------------------------------------------------------------------------------
def test_new_columns_land_in_the_same_delta_version_as_their_rows_and_every_reader_sees_them(
    catalog: Catalog,
) -> None:
    table = evolving(catalog)
    w = ChunkWriter(catalog, table)
    first = w.write(rows([1, 2]), Format.JSONL)
    second = w.write(rows([3], coupon="X", qty=7), Format.JSONL)
    third = w.write(rows([4], coupon="Y", qty=8), Format.JSONL)  # the writer knows them now
    assert second.new_columns == {"coupon": "STRING", "qty": "BIGINT"} and third.new_columns == {}
    # the metaData and the rows that need it: one version, no version before it with the column
    actions = commit_actions(table, second.version or 0) or []
    assert any("metaData" in a for a in actions) and any("add" in a for a in actions)
    assert names(schema_at(Path(table.location), first.version)) == ["id", "ts", "msg"]
    assert schema_versions(table) == [second.version]
    expected = [(1, None, None), (2, None, None), (3, "X", 7), (4, "Y", 8)]
    assert [(r["id"], r["coupon"], r["qty"]) for r in log_rows(table)] == expected
    files = [str(Path(table.location) / f) for f in DeltaTable(table.location).file_uris()]
    polars_rows = pl.read_delta(table.location).sort("id").select("id", "coupon", "qty").rows()
    assert polars_rows == expected
    duck = duckdb.execute(
        f"SELECT id, coupon, qty FROM read_parquet({files!r}, union_by_name=true) ORDER BY id"
    ).fetchall()
    assert duck == expected
    stored = catalog.table("ns.events")
    assert stored.columns == schema_at(Path(table.location))
    [change] = catalog.store.schema_changes(table.id)
    assert change.state is SchemaChangeState.DONE and change.version == second.version
    assert (
        change.source == f"chunk:{second.chunk}" and change.description == "add coupon STRING, add qty BIGINT"
    )
    assert check_table(catalog, stored) == []


def test_a_rolled_partition_holds_the_new_columns_for_plain_parquet_readers(catalog: Catalog) -> None:
    table = evolving(catalog)
    w = ChunkWriter(catalog, table)
    w.write(rows([1]), Format.JSONL)
    w.write(rows([2], coupon="X"), Format.JSONL)
    Roller(catalog, RollConfig()).roll_table(catalog.table("ns.events"), force=True)
    [standard] = [p for p in catalog.store.list_partitions(table.id) if p.state.value == "standard"]
    directory = Path(table.location) / partition_dir(table, standard.value)
    found = sorted(pq.read_table(str(directory)).select(["id", "coupon"]).to_pylist(), key=lambda r: r["id"])
    assert found == [{"id": 1, "coupon": None}, {"id": 2, "coupon": "X"}]


def test_csv_header_names_become_string_columns(catalog: Catalog) -> None:
    table = evolving(catalog)
    content = b"id,ts,msg,coupon\n1,2026-11-21T10:15:00Z,a,X\n2,2026-11-21T10:15:00Z,b,\n"
    result = ChunkWriter(catalog, table).write(content, Format.CSV)
    assert result.new_columns == {"coupon": "STRING"}
    assert [(r["id"], r["coupon"]) for r in log_rows(table)] == [(1, "X"), (2, "")]


def test_without_evolution_an_unknown_csv_header_still_fails_the_chunk(catalog: Catalog) -> None:
    table = make_table(catalog)
    with pytest.raises(MalformedChunkError, match="unknown column"):
        ChunkWriter(catalog, table).write(b"id,ts,coupon\n1,2026-11-21T10:15:00Z,X\n", Format.CSV)


def test_arrow_and_parquet_fields_bring_their_own_types(catalog: Catalog) -> None:
    table = evolving(catalog)
    data = pa.table(
        {
            "id": pa.array([1], pa.int64()),
            "ts": pa.array([1_795_256_100_000], pa.timestamp("ms")),
            "small": pa.array([7], pa.int32()),
            "unsigned": pa.array([2**32 - 1], pa.uint32()),
            "when": pa.array([1_795_256_100_000], pa.timestamp("ms")),
            "tag": pa.array(["a"]).dictionary_encode(),
            "price": pa.array([1], pa.decimal128(7, 2)),
            "nested": pa.array([{"a": 1}]),
        }
    )
    ChunkWriter(catalog, table).write_table(data)
    types = {c.name: c.type for c in schema_at(Path(table.location))}
    assert {k: types.get(k) for k in ("small", "unsigned", "when", "tag", "price", "nested")} == {
        "small": "integer",
        "unsigned": "long",
        "when": "timestamp",
        "tag": "string",
        "price": "decimal(7,2)",
        "nested": None,
    }
    sink = pa.BufferOutputStream()
    pq.write_table(data.drop_columns(["nested"]).append_column("more", pa.array([1.5])), sink)
    ChunkWriter(catalog, catalog.table("ns.events")).write(sink.getvalue().to_pybytes(), Format.PARQUET)
    assert schema_at(Path(table.location))[-1].name == "more"
    assert [r["unsigned"] for r in log_rows(table)] == [2**32 - 1, 2**32 - 1]


# -- caps ------------------------------------------------------------------------------------------
def test_a_chunk_over_the_cap_fails_naming_it_and_commits_nothing(catalog: Catalog) -> None:
    table = make_table(catalog)
    table = catalog.schemas.set_evolution(table, "add-columns", max_new_columns=3)
    fields = {f"f{i}": i for i in range(5)}
    with pytest.raises(MalformedChunkError, match="over its cap of 3 new columns"):
        ChunkWriter(catalog, table).write(rows([1], **fields), Format.JSONL)
    assert log_rows(table) == [] and names(schema_at(Path(table.location))) == ["id", "ts", "msg"]


def test_the_tables_cap_counts_every_column_its_data_added_but_not_alters(catalog: Catalog) -> None:
    table = make_table(catalog)
    table = catalog.schemas.set_evolution(table, "add-columns", max_new_columns=3)
    catalog.schemas.alter(table, add=parse_schema("byhand STRING"))
    w = ChunkWriter(catalog, catalog.table("ns.events"))
    w.write(rows([1], a=1, b=2), Format.JSONL)
    w.write(rows([2], c=3), Format.JSONL)
    with pytest.raises(MalformedChunkError, match="which has 3 added by its data already"):
        w.write(rows([3], d=4), Format.JSONL)
    assert [r["id"] for r in log_rows(table)] == [1, 2]
    assert names(schema_at(Path(table.location)))[3:] == ["byhand", "a", "b", "c"]


# -- writers that parsed before a change --------------------------------------------------------
def test_a_writer_that_read_the_table_before_another_added_the_field_parses_again(catalog: Catalog) -> None:
    table = evolving(catalog)
    stale = ChunkWriter(catalog, table)  # reads the table now: no coupon
    ChunkWriter(catalog, table).write(rows([1], coupon="X"), Format.JSONL)  # coupon STRING
    result = stale.write(rows([2], coupon=5), Format.JSONL)  # 5 is parsed as coupon STRING: "5"
    assert [(r["id"], r["coupon"]) for r in log_rows(table)] == [(1, "X"), (2, "5")]
    assert result.new_columns == {} and len(schema_versions(table)) == 1


def test_a_chunk_staged_as_another_type_than_a_column_added_since_fails_alone_and_lands_when_written_again(
    catalog: Catalog,
) -> None:
    table = evolving(catalog)
    stale = ChunkWriter(catalog, table)
    content = rows([2], coupon=5)
    chunk = stale.reserve("k")
    staged = stale.stage_parsed(chunk, parse(content, Format.JSONL, stale.validator()))  # coupon BIGINT
    ChunkWriter(catalog, table).write(rows([1], coupon="X"), Format.JSONL)  # coupon STRING first
    with pytest.raises(SchemaConflictError, match="coupon"):
        stale.commit(staged.id)
    assert [r["id"] for r in log_rows(table)] == [1]
    assert catalog.store.get_chunk(staged.id).state.value == "reserved"  # released: nothing committed
    result = stale.write(content, Format.JSONL, key="k")  # the same key, parsed as the table is now
    assert result.chunk == staged.id
    assert [(r["id"], r["coupon"]) for r in log_rows(table)] == [(1, "X"), (2, "5")]


def test_late_rows_bring_their_columns_to_the_late_table(catalog: Catalog) -> None:
    table = evolving(catalog, mode=Mode.EVENT_TIME, late_data=LateDataPolicy.DIVERT, max_future="1000d")
    w = ChunkWriter(catalog, table)
    w.write(rows([1]), Format.JSONL)
    Roller(catalog, RollConfig()).roll_table(catalog.table("ns.events"), force=True)
    result = w.write(rows([2], coupon="late"), Format.JSONL)
    assert result.late_rows == 1
    late = catalog.store.get_table(table.companion(TableKind.LATE))
    assert names(schema_at(Path(late.location)))[-1] == "coupon"
    assert [(r["id"], r["coupon"]) for r in log_rows(late)] == [(2, "late")]
    assert catalog.store.get_table_by_id(late.id).columns == schema_at(Path(late.location))


# -- crashes and concurrency ----------------------------------------------------------------------
def run_worker(
    catalog: Catalog, table: Table, *args: str, crashpoint: str | None = None
) -> tuple[int, list[Any], str]:
    proc = subprocess.run(
        **worker_call(catalog, table, *args, crashpoint=crashpoint), capture_output=True, timeout=120
    )
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


@pytest.mark.process
@pytest.mark.parametrize("point", ["chunk-before-delta-commit", "chunk-evolving-after-delta-commit"])
def test_a_writer_killed_in_its_evolving_commit_lands_once_with_its_columns_when_retried(
    catalog: Catalog, point: str
) -> None:
    table = evolving(catalog)
    args = ("writer", "--count", "1", "--fields", "coupon", "--commit-timeout", "0.3")
    code, acks, err = run_worker(catalog, table, *args, crashpoint=point)
    assert code == -signal.SIGKILL and acks == [], err
    landed = point == "chunk-evolving-after-delta-commit"
    # landed: the log has the rows and their column, the metastore neither yet; else nothing at all
    assert ("coupon" in names(schema_at(Path(table.location)))) is landed
    assert len(all_ids(table)) == (10 if landed else 0)
    assert names(catalog.table("ns.events").columns) == ["id", "ts", "msg"]
    # the retry runs where the takeover deadline (2 × commit timeout) has passed: no sleeping
    code, acks, err = run_worker(catalog, table, *args, "--clock-offset", "0.7")
    assert code == 0, err
    ids = all_ids(table)
    assert sorted(ids) == list(range(10)) and duplicates(ids) == []
    assert [r["coupon"] for r in log_rows(table)] == list(range(10))
    stored = catalog.table("ns.events")
    assert stored.columns == schema_at(Path(table.location)) and names(stored.columns)[-1] == "coupon"
    done = [c for c in catalog.store.schema_changes(table.id) if c.state is SchemaChangeState.DONE]
    assert len(done) == 1 and len(schema_versions(table)) == 1
    assert check_table(catalog, stored) == []


@pytest.mark.process
def test_writer_and_roller_processes_bringing_fields_at_once_add_each_column_once_and_lose_no_row(
    catalog: Catalog, tmp_path: Path
) -> None:
    table = evolving(catalog)
    fields = ["shared,a", "shared,b", "shared", ""]  # two new fields each; the old producer none
    procs = [
        subprocess.Popen(
            **worker_call(
                catalog, table, "writer", "--writer", str(k), "--count", "6", "--rows", "3", "--fields", f
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for k, f in enumerate(fields)
    ]
    roller = subprocess.Popen(
        **worker_call(catalog, table, "roller", "--count", "6", "--interval", "0.5", "--force"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # rolls (seals: metaData commits too) racing the evolving commits
    acked: list[int] = []
    out, err = roller.communicate(timeout=300)
    assert roller.returncode == 0, err
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        acked += [
            n
            for line in out.splitlines()
            for m in [json.loads(line)]
            for n in range(m["first"], m["first"] + m["rows"])
        ]
    ids = all_ids(table)
    assert sorted(ids) == sorted(acked) and duplicates(ids) == [] and len(acked) == 4 * 6 * 3
    columns = schema_at(Path(table.location))
    assert sorted(names(columns)[3:]) == ["a", "b", "shared"]
    stored = catalog.table("ns.events")
    assert stored.columns == columns
    changes = catalog.store.schema_changes(table.id)
    added = [op["column"] for c in changes for op in c.change]
    assert sorted(added) == ["a", "b", "shared"]  # each once, whoever won
    assert all(c.state is SchemaChangeState.DONE for c in changes)
    by_id = {r["id"]: r for r in log_rows(table)}
    for k, f in enumerate(fields):
        for n in (n for n in acked if n // 1_000_000 == k):
            expected = {name: (n if name in f.split(",") else None) for name in ("shared", "a", "b")}
            assert {name: by_id[n][name] for name in expected} == expected
    assert check_table(catalog, stored) == []


# -- widening from data (add-and-widen) -----------------------------------------------------------
# (the column, a value that does not fit it) → the type it widens to under add-and-widen (None: a
# bad record, as under add-columns always)
WIDENINGS = [
    pytest.param("qty INT", 3_000_000_000, "long", id="int-past-its-range-bigint"),
    pytest.param("qty TINYINT", 300, "short", id="tinyint-smallint"),
    pytest.param("qty SMALLINT", -40_000, "integer", id="smallint-int"),
    pytest.param("qty INT", "3000000000", "long", id="integer-text-bigint"),
    pytest.param("qty DECIMAL(5,2)", 12345.678, "decimal(7,2)", id="decimal-precision-up"),
    pytest.param("qty INT", 1.5, None, id="fraction-never-widens-an-integer"),
    pytest.param("qty BIGINT", 2**70, None, id="past-bigint-is-bad"),
    pytest.param("qty INT", "abc", None, id="text-is-bad"),
]


@pytest.mark.parametrize(("column", "value", "wider"), WIDENINGS)
@pytest.mark.parametrize("evolution", ["add-columns", "add-and-widen"])
def test_a_value_that_does_not_fit_widens_its_column_only_under_add_and_widen(
    catalog: Catalog, column: str, value: Any, wider: str | None, evolution: str
) -> None:
    table = evolving(catalog, evolution, schema=f"id BIGINT, ts TIMESTAMP, {column}", dead_letter=True)
    w = ChunkWriter(catalog, table)
    w.write(jsonl([{"id": 1, "ts": TS, "qty": 1}]), Format.JSONL)  # a file in the old type
    result = w.write(jsonl([{"id": 2, "ts": TS, "qty": value}]), Format.JSONL)
    widened = wider if evolution == "add-and-widen" else None
    qty = schema_at(Path(table.location))[-1]
    assert qty.type == (widened or table.columns[-1].type)
    assert result.dead_letter_rows == (0 if widened else 1)
    found = {r["id"]: r["qty"] for r in log_rows(table)}
    expected_ids = [1, 2] if widened else [1]
    assert sorted(found) == expected_ids
    if widened:  # the old file's value and the new one, exact, by every reader
        files = [str(Path(table.location) / f) for f in DeltaTable(table.location).file_uris()]
        query = f"SELECT id, qty FROM read_parquet({files!r}, union_by_name=true) ORDER BY id"
        polars = pl.read_delta(table.location).sort("id").select("id", "qty").rows()
        assert duckdb.execute(query).fetchall() == polars == sorted(found.items())
        assert str(found[2]).replace(".678", ".68") == str(value).replace(".678", ".68")
        assert catalog.table("ns.events").columns == schema_at(Path(table.location))


def test_parquet_declaring_a_wider_integer_widens_the_column_under_add_and_widen(catalog: Catalog) -> None:
    table = evolving(catalog, "add-and-widen", schema="id BIGINT, ts TIMESTAMP, qty INT")
    data = pa.table(
        {"id": [1], "ts": pa.array([1_795_256_100_000], pa.timestamp("ms")), "qty": pa.array([5], pa.int64())}
    )
    ChunkWriter(catalog, table).write_table(data)
    assert schema_at(Path(table.location))[-1].type == "long"
    other = evolving(catalog, "add-columns", name="ns.other", schema="id BIGINT, ts TIMESTAMP, qty INT")
    ChunkWriter(catalog, other).write_table(data)  # the values fit: cast, the column stays
    assert schema_at(Path(other.location))[-1].type == "integer"


@pytest.mark.process
def test_two_producers_adding_one_field_as_two_types_end_with_one_and_lose_no_row(catalog: Catalog) -> None:
    """One process sends ``coupon`` as numbers, the other as text, at once: whichever type lands first
    stays; the other's rows are parsed again as it (numbers become text) or are dead letters (text
    cannot be a number), never a broken table or a lost row."""
    table = evolving(catalog, "add-and-widen", dead_letter=True)
    extra = [[], ["--text-fields"]]
    procs = [
        subprocess.Popen(
            **worker_call(
                catalog,
                table,
                "writer",
                "--writer",
                str(k),
                "--count",
                "6",
                "--rows",
                "3",
                "--fields",
                "coupon",
                *extra[k],
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for k in range(2)
    ]
    sent: list[int] = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        for line in out.splitlines():
            ack = json.loads(line)
            sent += range(ack["first"], ack["first"] + 3)
    coupon = schema_at(Path(table.location))[-1]
    assert coupon.name == "coupon" and coupon.type in ("long", "string")
    by_id = {r["id"]: r["coupon"] for r in log_rows(table)}
    dlq = catalog.store.get_table(table.companion(TableKind.DEAD_LETTER))
    dead = [json.loads(r["raw"])["id"] for r in DeltaTable(dlq.location).to_pyarrow_table().to_pylist()]
    assert sorted([*by_id, *dead]) == sorted(sent) and not set(by_id) & set(dead)
    for n, value in by_id.items():  # the number producer's ids are below 1,000,000
        assert value == (n if coupon.type == "long" else (str(n) if n < 1_000_000 else f"v{n}"))
    assert dead == [] if coupon.type == "string" else all(n >= 1_000_000 for n in dead)
    stored = catalog.table("ns.events")
    assert stored.columns == schema_at(Path(table.location)) and check_table(catalog, stored) == []


def test_an_upload_parsed_in_batches_keeps_the_type_its_first_batch_gave_a_new_field(
    catalog: Catalog, tmp_path: Path
) -> None:
    """JSON lines uploads are parsed a few lines at a time: a field's type comes from the batch that
    first brings it, and a later batch's value that type cannot hold is a bad record naming it."""
    from ingest.api.uploads import stage_upload

    table = evolving(catalog, dead_letter=True)
    w = ChunkWriter(catalog, table)
    spool = tmp_path / "upload.jsonl"
    spool.write_bytes(
        rows([1, 2]) + rows([3], coupon=5) + rows([4], coupon=6, tier="a") + rows([5], coupon="x")
    )
    chunk = w.reserve("up")
    staged = stage_upload(w, chunk, spool, Format.JSONL, 2, "test")
    assert staged.new_columns == {"coupon": "BIGINT", "tier": "STRING"}
    result = w.commit(staged.chunk.id)
    assert result.dead_letter_rows == 1  # coupon "x": not a BIGINT
    found = [(r["id"], r["coupon"], r["tier"]) for r in log_rows(table)]
    assert found == [(1, None, None), (2, None, None), (3, 5, None), (4, 6, "a")]


def test_a_chunk_bringing_no_new_field_runs_no_extra_statement_on_an_evolving_table(catalog: Catalog) -> None:
    """It costs nothing when nothing changes: the same chunk runs the same metastore statements on a
    table whose schema evolves as on one whose does not (counted as tests/api/test_lookups.py does)."""
    import sqlalchemy as sa
    from sqlalchemy.engine import Engine

    plain = ChunkWriter(catalog, make_table(catalog, "ns.plain"))
    evolving_writer = ChunkWriter(catalog, evolving(catalog, name="ns.evolving"))
    ran: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        # the commit lease is renewed on time, not per chunk: a slow machine renews it in any write
        if "sp_leases" not in statement:
            ran.append(statement.split()[0])

    def statements(writer: ChunkWriter, first: int) -> list[str]:
        ran.clear()
        sa.event.listen(Engine, "before_cursor_execute", count)
        try:
            writer.write(rows([first, first + 1]), Format.JSONL)
        finally:
            sa.event.remove(Engine, "before_cursor_execute", count)
        return list(ran)

    for writer in (plain, evolving_writer):  # the first commit of each loads its log
        writer.write(rows([0]), Format.JSONL)
    assert statements(evolving_writer, 10) == statements(plain, 10)
    brought = statements(evolving_writer, 20)  # (another chunk without a new field: the same again)
    assert brought == statements(plain, 20)


def test_a_log_changed_behind_the_metastores_back_fails_only_the_chunks_that_bring_columns(
    catalog: Catalog,
) -> None:
    """Another engine added a column to the log (the metastore never learns it: ``check`` names it):
    a chunk that brings a new field cannot record its change and fails, naming the conflict, with
    nothing of it committed; plain chunks keep landing. (In one group with plain chunks, only the
    members bringing columns fail: ``schema_change_of``.)"""
    from deltalake import Field
    from deltalake.schema import PrimitiveType

    table = evolving(catalog)
    DeltaTable(table.location).alter.add_columns([Field("foreign", PrimitiveType("string"), nullable=True)])
    results: dict[str, Any] = {}

    def write(name: str, content: bytes) -> None:
        try:
            results[name] = ChunkWriter(catalog, table).write(content, Format.JSONL)
        except SchemaConflictError as exc:
            results[name] = exc

    write("plain", rows([1]))
    write("brings", rows([2], coupon="X"))
    assert not isinstance(results["plain"], Exception)
    assert isinstance(results["brings"], SchemaConflictError)
    assert [r["id"] for r in log_rows(table)] == [1]
    assert any(p.kind == "schema_mismatch" for p in check_table(catalog, catalog.table("ns.events")))
