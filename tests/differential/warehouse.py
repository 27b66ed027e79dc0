"""The differential harness's warehouse: a federation of three metastores whose first tables
share a row id, tables of many column types and mixed-case names, several Delta versions, a
rolled and a streaming partition, and links (one across metastores).

Every row is written through streampart's own chunk protocol (:class:`ingest.chunks.ChunkWriter`);
the oracle (:mod:`tests.differential.oracle`) reads them back with delta-rs only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.links import LinkSpec
from metastore.models import TableName
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.pg import scratch_schema_url

ORDERS = (
    "id BIGINT, ts TIMESTAMP, customer_id BIGINT, amount DOUBLE, price DECIMAL(10,2), qty BIGINT, "
    "status STRING, paid BOOLEAN, note STRING"
)
CUSTOMERS = (
    "id BIGINT, ts TIMESTAMP, Name STRING, Region STRING, CreditLimit DECIMAL(10,2), vip BOOLEAN, "
    "SignupScore DOUBLE"
)
ITEMS = (
    "id BIGINT, ts TIMESTAMP, order_id BIGINT, sku STRING, tags STRING, weight DOUBLE, "
    "unit_price DECIMAL(10,2)"
)


def _order(
    i: int,
    day: int,
    hour: int,
    customer: int | None,
    amount: float | None,
    price: str | None,
    qty: int | None,
    status: str | None,
    paid: bool | None,
    note: str | None,
) -> dict[str, Any]:
    return {
        "id": i,
        "ts": f"2026-11-{day:02d}T{hour:02d}:{(i * 7) % 60:02d}:{(i * 13) % 60:02d}Z",
        "customer_id": customer,
        "amount": amount,
        "price": price,
        "qty": qty,
        "status": status,
        "paid": paid,
        "note": note,
    }


# shop.orders: three chunks (versions 1, 2, 3), a roll, then a chunk in the new streaming partition
SHOP_CHUNKS = [
    [
        _order(1, 1, 9, 1, 10.5, "10.50", 1, "new", True, "first"),
        _order(2, 1, 17, 2, 99.99, "99.99", 3, "shipped", True, None),
        _order(3, 2, 8, 1, 0.1, "0.10", 10, "new", False, "tiny"),
        _order(4, 3, 12, 3, 250.0, "250.00", 2, "cancelled", None, "Big One"),
    ],
    [
        _order(5, 4, 23, 2, 1e-3, "0.01", 7, "shipped", True, "o'brien"),
        _order(6, 5, 0, None, 42.0, "42.00", None, "new", False, None),
        _order(7, 5, 13, 4, -5.25, "-5.25", 1, "refund", True, "negative"),
    ],
    [
        _order(8, 6, 6, 5, 1234.5678, "1234.57", 4, "shipped", True, "Mixed Case"),
        _order(9, 7, 19, 1, None, None, 5, None, None, ""),
        _order(10, 8, 21, 6, 3.14159, "3.14", 6, "new", True, "pi"),
    ],
]
SHOP_STREAMING = [
    _order(11, 9, 10, 2, 77.7, "77.70", 8, "new", False, "late one"),
    _order(12, 10, 11, 3, 12.0, "12.00", 1, "shipped", True, "last"),
]
SALES = [
    _order(101, 2, 10, 1, 20.0, "20.00", 2, "new", True, "sales a"),
    _order(102, 3, 11, 2, 30.5, "30.50", 1, "shipped", False, None),
    _order(103, 4, 12, 2, 40.25, "40.25", 3, "new", True, "sales c"),
    _order(104, 5, 13, 7, None, "1.00", 4, "refund", None, "sales d"),
]
SALES_EU = [
    _order(201, 6, 14, 1, 55.5, "55.50", 1, "new", True, "eu a"),
    _order(202, 7, 15, 3, 66.0, "66.00", 2, "shipped", False, "eu b"),
]
CUSTOMER_ROWS = [
    {"id": 1, "ts": "2026-10-01T00:00:00Z", "Name": "Ada", "Region": "EU", "CreditLimit": "1000.00",
     "vip": True, "SignupScore": 0.75},
    {"id": 2, "ts": "2026-10-02T00:00:00Z", "Name": "Bob", "Region": "US", "CreditLimit": "250.50",
     "vip": False, "SignupScore": 0.5},
    {"id": 3, "ts": "2026-10-03T00:00:00Z", "Name": "Chloé", "Region": "EU", "CreditLimit": "99.99",
     "vip": False, "SignupScore": None},
    {"id": 4, "ts": "2026-10-04T00:00:00Z", "Name": "dan", "Region": None, "CreditLimit": None,
     "vip": None, "SignupScore": 1.25},
    {"id": 5, "ts": "2026-10-05T00:00:00Z", "Name": "Eve", "Region": "APAC", "CreditLimit": "5000.00",
     "vip": True, "SignupScore": 0.1},
    {"id": 8, "ts": "2026-10-06T00:00:00Z", "Name": None, "Region": "US", "CreditLimit": "0.00",
     "vip": False, "SignupScore": 0.0},
]  # fmt: skip
ITEM_ROWS = [
    {"id": n, "ts": f"2026-11-{1 + n % 9:02d}T0{n % 10}:00:00Z", "order_id": order, "sku": sku,
     "tags": tags, "weight": weight, "unit_price": price}
    for n, (order, sku, tags, weight, price) in enumerate(
        [
            (1, "A-1", "red,big", 1.5, "5.25"),
            (1, "B-2", "blue", 0.25, "5.25"),
            (2, "A-1", "red", 1.5, "33.33"),
            (2, "C-3", None, 2.0, "33.33"),
            (2, "D-4", "green,small,sale", 0.1, "33.33"),
            (3, "B-2", "blue,sale", 0.25, "0.01"),
            (4, "E-5", "", 10.0, "125.00"),
            (5, "A-1", "red,big", None, None),
            (7, "F-6", "sale", 3.3, "-5.25"),
            (8, "C-3", "green", 2.0, "308.64"),
            (8, "C-3", "green", 2.0, "308.64"),
            (10, "G-7", "blue,small", 0.5, "0.52"),
            (11, "A-1", "red", 1.5, "9.71"),
            (12, "H-8", "big", 4.0, "12.00"),
            (99, "Z-9", "orphan", 0.0, "0.00"),
        ],
        start=1,
    )
]  # fmt: skip


@dataclass
class Warehouse:
    """What the harness reads: the catalog, and each table's (or link's) Delta location and versions."""

    catalog: Catalog
    root: Path
    made_schemas: list[str] = field(default_factory=list)  # PostgreSQL scratch schemas to drop
    # catalog name → (source table name, source location) for every table and link
    sources: dict[str, tuple[str, str]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # "local@source_ns" in namespace → link name


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return ("\n".join(json.dumps(r) for r in rows) + "\n").encode()


def build(root: Path) -> Warehouse:
    """Make the warehouse under ``root``: the primary is SQLite (in the warehouse, where a
    ``streampart sql-server`` process finds it), m1 a PostgreSQL scratch schema, m2 a SQLite file."""
    catalog = Catalog.open(root / "warehouse")
    wh = Warehouse(catalog, root / "warehouse")
    m1 = scratch_schema_url("sp_diff")
    wh.made_schemas.append(m1)
    catalog.federation.add("m1", m1, "read-write-create")
    catalog.federation.add("m2", f"sqlite:///{root / 'm2.sqlite'}", "read-write-create")
    catalog.federation.set_route("sales", "m1")
    catalog.federation.set_route("sales_eu", "m2")
    # each the first table of its metastore: the same row id in all three
    shop = make_table(catalog, "shop.orders", schema=ORDERS)
    sales = make_table(catalog, "sales.orders", schema=ORDERS)
    eu = make_table(catalog, "sales_eu.orders", schema=ORDERS)
    assert shop.id == sales.id == eu.id, (shop.id, sales.id, eu.id)
    customers = make_table(catalog, "shop.customers", schema=CUSTOMERS)
    items = make_table(catalog, "shop.items", schema=ITEMS)
    empty = make_table(catalog, "shop.empty", schema=ORDERS)
    writer = ChunkWriter(catalog, shop)
    for chunk in SHOP_CHUNKS:  # versions 1, 2, 3
        writer.write(_jsonl(chunk), Format.JSONL)
    Roller(catalog).roll_table(shop, force=True)  # one standard partition …
    writer.write(_jsonl(SHOP_STREAMING), Format.JSONL)  # … and a streaming one
    ChunkWriter(catalog, sales).write(_jsonl(SALES), Format.JSONL)
    ChunkWriter(catalog, eu).write(_jsonl(SALES_EU), Format.JSONL)
    ChunkWriter(catalog, customers).write(_jsonl(CUSTOMER_ROWS[:4]), Format.JSONL)
    ChunkWriter(catalog, customers).write(_jsonl(CUSTOMER_ROWS[4:]), Format.JSONL)
    ChunkWriter(catalog, items).write(_jsonl(ITEM_ROWS), Format.JSONL)
    for table in (shop, sales, eu, customers, items, empty):
        t = catalog.table(str(table.name))
        wh.sources[str(t.name)] = (str(t.name), t.location)
    # links: by their local name, and as T@B inside their namespace; one across metastores (m1 → primary)
    for name, source in (
        ("mirror.orders", "shop.orders"),
        ("mirror.clients", "shop.customers"),
        ("sales.shop_items", "shop.items"),
    ):
        catalog.links.create(
            LinkSpec(name=TableName.parse(name), source=TableName.parse(source), include_streaming=True)
        )
        wh.sources[name] = wh.sources[source]
        ns = name.split(".")[0]
        wh.links[f"{ns}:{source.split('.')[1]}@{source.split('.')[0]}"] = name
    return wh
