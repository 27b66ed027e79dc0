"""Access types, table-driven (issue 12): each of Waggle Dance's four × {read, write, create a
namespace}, through the catalog, on SQLite and PostgreSQL primaries; and ``federation alter``, which
switches a metastore from one access type to another while its namespaces stay where they are.

The federated metastore ``m`` (a SQLite file) holds ``sales_eu`` (matching its whitelist
``sales_*``) and ``hr`` (not matching it), each with a table, made while ``m`` was
read-write-create; then the test alters ``m`` to the access type under test.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ingest.chunks import ChunkWriter
from metastore.catalog import Catalog
from metastore.errors import FederationAccessError, NotFoundError, UserInputError
from metastore.federation import AccessType
from metastore.models import TableName
from tests.fixtures import make_table

WHITELIST = ("sales_*",)

# (operation, namespace) → the access types that allow it; the others refuse, naming this rule.
CASES: list[tuple[str, str, set[AccessType], str]] = [
    # every access type reads every namespace of its metastore
    ("read", "sales_eu", set(AccessType), ""),
    ("read", "hr", set(AccessType), ""),
    # writes: everything but read-only writes its whitelist; only read-write-create writes the rest
    ("write", "sales_eu",
     {AccessType.READ_WRITE_WHITELIST, AccessType.READ_WRITE_CREATE_WHITELIST, AccessType.READ_WRITE_CREATE},
     "namespace sales_eu is on metastore m, which is read-only: no writes"),
    ("write", "hr", {AccessType.READ_WRITE_CREATE},
     "namespace hr is on metastore m (.*) but not in its whitelist \\(sales_\\*\\): no writes"
     "|which is read-only: no writes"),
    # creating: only the create types, and the whitelisted one only inside its whitelist
    ("create", "sales_new", {AccessType.READ_WRITE_CREATE_WHITELIST, AccessType.READ_WRITE_CREATE},
     "metastore m is read-(only|write-whitelist): no namespace is created there"),
    ("create", "ops", {AccessType.READ_WRITE_CREATE},
     "no namespace is created there|creates only namespaces of its whitelist \\(sales_\\*\\), not ops"),
    # routing a namespace m does not have there: the same rule (it could never be made there)
    ("route", "sales_web", {AccessType.READ_WRITE_CREATE_WHITELIST, AccessType.READ_WRITE_CREATE},
     "metastore m is read-(only|write-whitelist): no namespace is created there"),
    ("route", "web", {AccessType.READ_WRITE_CREATE},
     "no namespace is created there|creates only namespaces of its whitelist \\(sales_\\*\\), not web"),
]  # fmt: skip


@pytest.fixture
def federation(catalog: Catalog, tmp_path: Path) -> Iterator[Catalog]:
    catalog.federation.add("m", f"sqlite:///{tmp_path / 'm.sqlite'}", "read-write-create")
    for ns in ("sales_eu", "hr"):
        catalog.namespaces.create(ns, metastore="m")
        make_table(catalog, f"{ns}.t")
    yield catalog


def _batch() -> pa.Table:
    now = datetime.now(UTC)
    return pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "ts": pa.array([now, now], pa.timestamp("us", tz="UTC")),
            "msg": pa.array(["a", "b"]),
        }
    )


def _do(catalog: Catalog, op: str, namespace: str) -> None:
    if op == "read":
        table = catalog.table(f"{namespace}.t")
        assert catalog.describe(table)["table"] == f"{namespace}.t"
    elif op == "write":
        ChunkWriter(catalog, catalog.table(f"{namespace}.t")).write_table(_batch(), key=f"k-{namespace}")
    elif op == "route":
        catalog.federation.route(namespace, "m")
    else:
        catalog.namespaces.create(namespace, metastore="m")


def _state(catalog: Catalog) -> tuple[object, ...]:
    """What a refused operation must leave as it was: m's namespaces and chunks, the routes."""
    store = catalog.on("m").store
    chunks = {ns: len(store.list_chunks(store.get_table(f"{ns}.t").id)) for ns in ("sales_eu", "hr")}
    return [n.name for n in store.list_namespaces()], chunks, catalog.primary.routes()


@pytest.mark.parametrize("access", list(AccessType), ids=[a.value for a in AccessType])
def test_each_access_type_reads_writes_and_creates_as_its_rule_says(
    federation: Catalog, access: AccessType
) -> None:
    catalog = federation
    catalog.federation.alter("m", access=access, writable=WHITELIST if access.whitelisted else None)
    for op, namespace, allowed, refusal in CASES:
        if access in allowed:
            _do(catalog, op, namespace)
            continue
        before = _state(catalog)
        with pytest.raises(FederationAccessError, match=refusal):
            _do(catalog, op, namespace)
        assert _state(catalog) == before, (op, namespace)
    if access is AccessType.READ_WRITE_CREATE:  # what was allowed landed in m
        assert {n.name for n in catalog.on("m").store.list_namespaces()} == {
            "sales_eu",
            "hr",
            "sales_new",
            "ops",
        }


def test_alter_changes_access_whitelist_and_prefix_and_bumps_the_route_version(
    federation: Catalog, tmp_path: Path
) -> None:
    catalog = federation
    version = catalog.primary.route_version()
    m = catalog.federation.alter("m", access="read-write-create-whitelist", writable=["sales_*", "ops"])
    assert (m.access, m.writable, m.prefix) == (
        AccessType.READ_WRITE_CREATE_WHITELIST,
        ("sales_*", "ops"),
        None,
    )
    m = catalog.federation.alter("m", access="read-write-whitelist")  # the whitelist stays
    assert (m.access, m.writable) == (AccessType.READ_WRITE_WHITELIST, ("sales_*", "ops"))
    m = catalog.federation.alter("m", access="read-only")  # it has no whitelist now
    assert (m.access, m.writable) == (AccessType.READ_ONLY, ())
    m = catalog.federation.alter("m", prefix="eu_")
    assert m.prefix == "eu_" and catalog.router.metastore_of("eu_x") == "m"
    assert catalog.primary.route_version() == version + 4
    make_table(catalog, "euro.t")  # on the primary: no prefix may claim it
    catalog.federation.alter("m", access="read-write-create")
    make_table(catalog, "eu_north.t")  # placed in m by its prefix
    assert catalog.table("eu_north.t").metastore == "m"

    before = (catalog.federation.list(), catalog.primary.route_version())
    bad: list[tuple[dict[str, Any], type[Exception], str]] = [  # alter_metastore's keyword arguments
        ({}, UserInputError, "nothing to alter for metastore m: give --access, --writable, --prefix or"),
        ({"access": "all"}, UserInputError, "access 'all' is not one of read-only"),
        ({"access": "read-write-whitelist"}, UserInputError, "give at least one --writable PATTERN"),
        ({"writable": ["x_*"]}, UserInputError, "has no whitelist, so --writable does not apply"),
        ({"prefix": "9x"}, UserInputError, "prefix '9x' cannot start a namespace name"),
        # eu_north keeps it, euro would move: refused in the store's transaction, as at add
        ({"prefix": "eu"}, UserInputError, "prefix eu collides with namespaces of the primary: euro"),
        ({"prefix": "x_", "no_prefix": True}, UserInputError, "give one of them"),
        # the old prefix placed eu_north there; without it, it would vanish from view
        ({"no_prefix": True}, UserInputError, "eu_north there; without a prefix they would route"),
        ({"prefix": "emea_"}, UserInputError, "federation route eu_north --to m"),
    ]  # fmt: skip
    for kwargs, error, says in bad:
        with pytest.raises(error, match=says.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
            catalog.federation.alter("m", **kwargs)
        assert (catalog.federation.list(), catalog.primary.route_version()) == before, kwargs
    with pytest.raises(NotFoundError, match="metastore nope does not exist"):
        catalog.federation.alter("nope", access="read-only")
    with pytest.raises(UserInputError, match="has no access type, whitelist or prefix to alter"):
        catalog.federation.alter("primary", access="read-only")

    catalog.federation.route("eu_north", "m")  # pinned: now the prefix may go
    catalog.federation.add("m2", f"sqlite:///{tmp_path / 'm2.sqlite'}", "read-only", prefix="zz_")
    with pytest.raises(UserInputError, match="prefix zz overlaps the prefix zz_ of metastore m2"):
        catalog.federation.alter("m", prefix="zz")
    assert catalog.federation.alter("m", no_prefix=True).prefix is None
    assert catalog.table("eu_north.t").metastore == "m"
    assert catalog.table(TableName.parse("euro.t")).metastore == "primary"
