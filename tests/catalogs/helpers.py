"""What the catalog tests share: a server with tables of every kind, and answers in one comparable form.

Answers are compared as sorted lists of rows, timestamps as microseconds since the epoch (Spark,
pyarrow, pandas and polars each carry time zones their own way; the instant is what must agree).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.links import LinkSpec
from metastore.models import Column, Keys, TableName
from scheduler.roll import Roller
from tests.api.fixtures import Server
from tests.fixtures import make_table

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def rows_of(data: pa.Table, columns: list[str] | None = None) -> list[tuple[Any, ...]]:
    """``data``'s rows (its ``columns``, default all but hidden ones) sorted, timestamps as micros."""
    names = columns or [n for n in data.column_names if not n.startswith("__")]
    out = []
    for row in data.select(names).to_pylist():
        out.append(tuple(_plain(row[n]) for n in names))
    return sorted(out, key=repr)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        v = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return round(v.timestamp() * 1_000_000)
    if hasattr(value, "to_pydatetime"):  # a pandas Timestamp
        return _plain(value.to_pydatetime())
    if isinstance(value, float) and value != value:
        return None  # NaN: pandas' null
    if isinstance(value, Decimal):
        return str(value.normalize())
    return value


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def orders(ids: range, note: str = "n") -> bytes:
    return jsonl(
        [
            {"id": i, "ts": T0.isoformat(), "amount": f"{i}.25", "note": f"{note}{i}", "qty": i % 7}
            for i in ids
        ]
    )


@dataclass
class Shop:
    """The tables of every kind the catalog tests load (see :func:`shop`)."""

    server: Server
    reader: str  # read:sales
    other: str  # read:other only


def build_shop(srv: Server) -> None:
    """In ``sales``: ``orders`` (a rolled partition and an open one), ``evolved`` (a column added and
    one widened after rows were written), ``accounts`` (keyed: rolled, then open upserts and a
    delete), ``remote`` (a link to ``other.src``, standard partitions only); in ``other``: ``src``."""
    cat = srv.catalog
    o = make_table(
        cat, "sales.orders", schema="id BIGINT, ts TIMESTAMP, amount DECIMAL(10,2), note STRING, qty INT"
    )
    w = ChunkWriter(cat, o)
    w.write(orders(range(0, 10)), Format.JSONL, key="o1")
    w.write(orders(range(10, 20)), Format.JSONL, key="o2")
    Roller(cat).roll_table(o, force=True)
    w.write(orders(range(20, 25)), Format.JSONL, key="o3")

    e = make_table(cat, "sales.evolved", schema="id BIGINT, ts TIMESTAMP, small INT")
    ChunkWriter(cat, e).write(
        jsonl([{"id": i, "ts": T0.isoformat(), "small": i} for i in range(5)]), Format.JSONL, key="e1"
    )
    cat.schemas.alter(e, add=[Column(name="extra", type="string")], widen=[Column(name="small", type="long")])
    e = cat.table("sales.evolved")
    ChunkWriter(cat, e).write(
        jsonl([{"id": i, "ts": T0.isoformat(), "small": 2**40 + i, "extra": f"x{i}"} for i in range(5, 8)]),
        Format.JSONL,
        key="e2",
    )

    k = make_table(
        cat,
        "sales.accounts",
        schema="id BIGINT, ts TIMESTAMP, balance BIGINT, op STRING",
        max_future="3650d",
        keys=Keys(columns=("id",), op_column="op"),
    )
    kw = ChunkWriter(cat, k)
    kw.write(
        jsonl([{"id": i, "ts": T0.isoformat(), "balance": i * 100, "op": "c"} for i in range(6)]),
        Format.JSONL,
        key="k1",
    )
    kw.write(jsonl([{"id": 2, "ts": T0.isoformat(), "balance": 999, "op": "u"}]), Format.JSONL, key="k2")
    Roller(cat).roll_table(k, force=True)
    kw.write(jsonl([{"id": 3, "ts": T0.isoformat(), "balance": 5, "op": "u"}]), Format.JSONL, key="k3")
    kw.write(jsonl([{"id": 4, "ts": T0.isoformat(), "balance": 0, "op": "d"}]), Format.JSONL, key="k4")

    s = make_table(cat, "other.src")
    sw = ChunkWriter(cat, s)
    sw.write(
        jsonl([{"id": i, "ts": T0.isoformat(), "msg": f"m{i}"} for i in range(4)]), Format.JSONL, key="s1"
    )
    Roller(cat).roll_table(s, force=True)
    sw.write(jsonl([{"id": 99, "ts": T0.isoformat(), "msg": "open"}]), Format.JSONL, key="s2")
    cat.links.create(LinkSpec(name=TableName.parse("sales.remote"), source=TableName.parse("other.src")))


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    """A server over the tables of :func:`build_shop`, remembering token lookups for a minute (the
    catalogs must not: a revocation counts at once there)."""
    tmp: Path = tmp_path_factory.mktemp("catalogs")
    srv = Server(tmp / "warehouse", f"sqlite:///{tmp / 'warehouse' / '_metastore.sqlite'}", tmp)
    build_shop(srv)
    srv.admin = srv.token("admin", "admin:*")
    reader = srv.token("reader", "read:sales")
    other = srv.token("outsider", "read:other")
    srv.start(STREAMPART_SERVER__AUTH_CACHE_TTL="60s")
    yield Shop(srv, reader, other)
    srv.close()
