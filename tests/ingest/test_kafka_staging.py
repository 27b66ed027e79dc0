"""The ingest job's task side (ingest.kafka.staging): the Arrow path and the row-wise path agree,
and what Spark's Python workers unpickle imports nothing heavy. Real pyarrow, no Spark job."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.kafka.staging import _arrow_json, stage_records, stage_spec, stage_task
from metastore.catalog import Catalog
from tests.fixtures import make_table
from tests.helpers import SCRIPT_END

SCHEMA = "id BIGINT, ts TIMESTAMP, msg STRING, n INT, x DOUBLE, ok BOOLEAN"


def batch(values: Sequence[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "value": pa.array(values, pa.binary()),
            "topic": pa.array(["t"] * n, pa.string()),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
        }
    )


def staged(catalog: Catalog, chunk: str, values: list[bytes | None], arrow: bool) -> tuple[list, list]:
    table = catalog.table("ns.events")
    spec = stage_spec(catalog.warehouse, table, chunk, "json", 64, None)
    assert spec.arrow_json
    if not arrow:
        spec = type(spec)(**{**spec.__dict__, "arrow_json": False})
    out = stage_records(spec, 3, iter([batch(values)])).to_pylist()
    files = [r for r in out if r["path"] is not None]
    bad = [(r["position"], r["reason"]) for r in out if r["path"] is None and r["reason"] is not None]
    rows = [r for f in files for r in pq.read_table(Path(table.location) / f["path"]).to_pylist()]
    ignored = [json.loads(r["ignored"]) for r in out if r["ignored"] is not None]
    assert ignored == [{"extra": 1}]  # GOOD's one unknown field, counted on either path
    return rows, bad


GOOD = [
    {"id": 1, "ts": "2026-11-21T10:15:00Z", "msg": "a", "n": 7, "x": 1.5, "ok": True},
    {"id": 2, "ts": "2026-11-21T10:15:00.123456+02:00", "x": 3, "extra": {"nested": [1]}},
    {"id": 3, "ts": "2026-11-21 10:15:00", "msg": "é ☃", "n": -(2**31), "x": -0.0, "ok": False},
    {"id": 4, "ts": "2026-11-21", "msg": None, "n": None},
]
# Each of these sends its whole batch row by row (and some are bad records): the rows that land
# and the dead letters must be the same as if every batch went row by row.
ODD = [
    b'{"id": 5, "ts": 1763720100, "msg": "epoch seconds"}',  # a number for a timestamp
    b'{"id": "6", "ts": "2026-11-21T10:15:00Z"}',  # an integer as text
    b'{"id": 7.0, "ts": "2026-11-21T10:15:00Z"}',  # a float that is an integer
    b'{"id": 8, "ts": "2026-11-21T10:15:00Z", "msg": 12}',  # a number for a string
    b'{"id": 9, "ts": "2026-11-21T10:15:00Z", "n": 2147483648}',  # out of range for INT
    b'{"id": 10, "ts": "2026-11-21T10:15:00Z", "msg": "' + b"x" * 100 + b'"}',  # over the size limit
    b'{"id": 11}',  # the time column missing
    b'{"id": 12, "ts": "2026-11-21T10:15:00Z",\n "msg": "a line break between tokens"}',
    b'  {"id": 13, "ts": "2026-11-21T10:15:00Z"}',  # leading blanks
    b'{"id": 14, "ts": "2026-11-21T10:15:00Z"} {"id": 15}',  # two objects in one record
    b"",
    b"[1, 2]",
    b"not json",
    b'{"id": 16, "ts": "2026-11-21T10:15:00Z", "msg": "\\ud800"}',  # a lone surrogate
    b'{"id": 17, "ts": "2026-11-21T10:15:00Z", "msg": "\xff"}',  # invalid UTF-8
    b'{"id": 18, "id": 19, "ts": "2026-11-21T10:15:00Z"}',  # a key twice
    None,  # a tombstone
]


@pytest.mark.parametrize(
    "odd", [[], *([o] for o in ODD)], ids=["all-good", *(f"odd-{i}" for i in range(len(ODD)))]
)
def test_the_arrow_path_gives_what_the_row_wise_path_gives(sqlite_catalog, odd) -> None:
    make_table(sqlite_catalog, dead_letter=True, schema=SCHEMA)
    values = [json.dumps(r).encode() for r in GOOD] + odd
    fast = staged(sqlite_catalog, "c1", values, arrow=True)
    slow = staged(sqlite_catalog, "c2", values, arrow=False)
    assert fast == slow
    assert len(fast[0]) + len(fast[1]) == len(values)  # one row or one dead letter per record


def test_an_all_good_batch_is_one_parquet_file_of_every_record(sqlite_catalog) -> None:
    table = make_table(sqlite_catalog, dead_letter=True, schema=SCHEMA)
    spec = stage_spec(sqlite_catalog.warehouse, table, "c3", "json", 1 << 20, None)
    values = [json.dumps({**GOOD[0], "id": i}).encode() for i in range(2500)]
    out = stage_records(spec, 0, iter([batch(values[:1000]), batch(values[1000:])])).to_pylist()
    assert [(r["rows"], r["reason"]) for r in out] == [(2500, None)]
    assert pq.read_table(Path(table.location) / out[0]["path"]).column("id").to_pylist() == list(range(2500))


@pytest.mark.process
def test_what_the_workers_unpickle_imports_no_metastore_nor_pydantic(sqlite_catalog, tmp_path) -> None:
    """Spark's Python workers unpickle the task function of every batch: with PYTHONDONTWRITEBYTECODE
    each fresh worker compiles what it imports, so it must not pull in the metastore's stack."""
    from pyspark import cloudpickle

    table = make_table(sqlite_catalog, dead_letter=True, schema=SCHEMA)
    spec = stage_spec(sqlite_catalog.warehouse, table, "c4", "json", 1 << 20, None)
    (tmp_path / "task.pickle").write_bytes(cloudpickle.dumps(stage_task(spec)))
    heavy = (
        "pydantic",
        "sqlalchemy",
        "metastore",
        "deltalake",
        "pandas",
        "orjson",
        "ingest.formats",
        "ingest.records",
    )
    code = (
        "import pickle, sys\n"
        f"fn = pickle.loads(open({str(tmp_path / 'task.pickle')!r}, 'rb').read())\n"
        f"print(sorted({{m for m in sys.modules for h in {heavy!r} if m == h or m.startswith(h + '.')}}))\n"
        + SCRIPT_END
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.process
def test_a_fresh_worker_reads_a_csv_field_over_the_csv_modules_limit(sqlite_catalog, tmp_path) -> None:
    """A Spark Python worker imports only what its task calls: a CSV record whose field is over the
    csv module's 128 KiB default lands there too (CI once saw a reused worker that never parsed JSON
    send it to the dead letters), and one CSV record per Kafka record."""
    from pyspark import cloudpickle

    table = make_table(sqlite_catalog, dead_letter=True, schema="id BIGINT, ts TIMESTAMP, msg STRING")
    spec = stage_spec(sqlite_catalog.warehouse, table, "c6", "csv", 1 << 20, None)
    values = [b"1,2026-11-21T10:15:00Z," + b"x" * 200_000, b"2,2026-11-21T10:15:00Z,a\n3,2026-11-21,b"]
    (tmp_path / "task.pickle").write_bytes(cloudpickle.dumps((stage_records, spec, batch(values))))
    code = (
        "import json, pickle, sys\n"
        f"fn, spec, batch = pickle.loads(open({str(tmp_path / 'task.pickle')!r}, 'rb').read())\n"
        "out = fn(spec, 0, iter([batch])).to_pylist()\n"
        "print(json.dumps([(r['rows'], r['position'], r['reason']) for r in out]))\n" + SCRIPT_END
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert sorted(json.loads(done.stdout), key=str) == [
        [1, None, None],
        [None, 1, "2 CSV records in one Kafka record (a line break outside quotes)"],
    ]


def test_on_an_evolving_table_only_a_field_that_may_become_a_column_leaves_the_arrow_path(
    sqlite_catalog,
) -> None:
    """Issue 27: unknown fields that are nested or null in the batch, or whose names can never be
    columns, are counted on the Arrow path; a scalar one sends the batch row by row, which infers
    its type and reports the staged file's columns."""
    table = sqlite_catalog.schemas.set_evolution(
        make_table(sqlite_catalog, dead_letter=True, schema=SCHEMA), "add-columns"
    )
    base = {"id": 1, "ts": "2026-11-21T10:15:00Z"}
    quiet = [json.dumps({**base, "nested": {"a": 1}, "none": None, "Id": 5}).encode()]
    spec = stage_spec(
        sqlite_catalog.warehouse, table, "c5", "json", 1 << 20, None, ignorable=frozenset({"Id"})
    )
    ignored: dict[str, int] = {}
    assert spec.evolving and _arrow_json(spec, batch(quiet).column("value"), ignored) is not None
    assert ignored == {"nested": 1, "Id": 1}  # (a null is not counted: Arrow cannot tell it from absent)
    brings = [json.dumps({**base, "coupon": "X"}).encode()]
    assert _arrow_json(spec, batch(brings).column("value"), {}) is None
    out = stage_records(spec, 0, iter([batch(brings)])).to_pylist()
    [staged] = [r for r in out if r["path"] is not None]
    assert [c["name"] for c in json.loads(staged["columns"])][-1] == "coupon"
