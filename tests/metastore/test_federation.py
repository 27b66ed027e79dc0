"""The federation registry (issue 12, part 1): on SQLite and PostgreSQL primaries, each with a second
real database as the federated metastore (a second SQLite file, a scratch PostgreSQL schema).

The registry and the route table live in the primary; a federated metastore is reached, migrated and
checked for namespaces that clash with the primary's before it is recorded. Bad input — an unknown
metastore, an unreachable URL, a clear-text password, an unknown secret, a duplicate name, a prefix
that collides with namespaces, a whitelist without patterns, removing a metastore in use — is one
clear error that changes nothing (the registry, the routes and their version are as before).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from metastore.catalog import Catalog
from metastore.errors import AlreadyExistsError, FederationAccessError, NotFoundError, UserInputError
from metastore.federation import (
    PRIMARY,
    AccessType,
    FederatedMetastore,
    check_url,
    may_create,
    may_read,
    may_write,
    resolve_url,
    secret_names,
)
from metastore.store import Metastore
from tests.fixtures import make_table
from tests.helpers import downgraded
from tests.pg import drop_scratch_schema, scratch_schema_url

R, W, C = AccessType.READ_ONLY, AccessType.READ_WRITE_WHITELIST, AccessType.READ_WRITE_CREATE_WHITELIST
RWC = AccessType.READ_WRITE_CREATE


# -- the access rule, table-driven -------------------------------------------------------------
def _m(access: AccessType) -> FederatedMetastore:
    writable = ("sales_*", "ops") if access.whitelisted else ()
    return FederatedMetastore(name="m1", url="sqlite:///x", access=access, writable=writable)


# (access type, namespace, may read, may write, may create); "sales_eu" and "ops" are in the
# whitelist ("sales_*", "ops"), "hr" is not; access types without a whitelist ignore it.
ACCESS = [
    (R, "sales_eu", True, False, False),  # read-only: never writes, never creates
    (R, "hr", True, False, False),
    (W, "sales_eu", True, True, False),  # whitelist writes, creates nothing
    (W, "ops", True, True, False),
    (W, "hr", True, False, False),  # outside the whitelist: read only
    (C, "sales_eu", True, True, True),  # whitelist writes and creates
    (C, "hr", True, False, False),
    (RWC, "sales_eu", True, True, True),  # everything, everywhere
    (RWC, "hr", True, True, True),
]


@pytest.mark.parametrize("access, ns, read, write, create", ACCESS, ids=[f"{a}-{n}" for a, n, *_ in ACCESS])
def test_the_access_rule(access: AccessType, ns: str, read: bool, write: bool, create: bool) -> None:
    m = _m(access)
    assert (may_read(m, ns).allowed, may_write(m, ns).allowed, may_create(m, ns).allowed) == (
        read,
        write,
        create,
    )
    for verdict in (may_read(m, ns), may_write(m, ns), may_create(m, ns)):
        assert "m1" in verdict.rule  # every message names the metastore and the rule
        if not verdict.allowed:
            with pytest.raises(FederationAccessError, match="m1"):
                verdict.check()


def test_access_messages_name_the_rule() -> None:
    assert may_write(_m(R), "hr").rule == "namespace hr is on metastore m1, which is read-only: no writes"
    assert may_write(_m(W), "hr").rule == (
        "namespace hr is on metastore m1 (read-write-whitelist) but not in its whitelist (sales_*, ops): "
        "no writes"
    )
    assert may_create(_m(C), "hr").rule == (
        "metastore m1 (read-write-create-whitelist) creates only namespaces of its whitelist "
        "(sales_*, ops), not hr"
    )
    assert may_create(_m(W), "ops").rule == (
        "metastore m1 is read-write-whitelist: no namespace is created there"
    )


# -- secrets -----------------------------------------------------------------------------------
def test_secrets_resolve_from_the_config_then_the_environment() -> None:
    url = "postgresql://u:${PG_PW}@db:5432/${DB}"
    assert secret_names(url) == ["PG_PW", "DB"]
    env = {"STREAMPART_SECRET_DB": "meta", "STREAMPART_SECRET_PG_PW": "from-env"}
    assert resolve_url(url, {"PG_PW": "s3cret"}, env) == "postgresql://u:s3cret@db:5432/meta"
    with pytest.raises(UserInputError, match=r"secret DB is unknown: .*STREAMPART_SECRET_DB"):
        resolve_url(url, {"PG_PW": "s3cret"}, {})
    assert check_url(url) == url  # a password that is a secret is fine


@pytest.mark.parametrize(
    "url",
    ["postgresql://u:hunter2@db/x", "postgresql://u:pre${PW}@db/x", "postgresql://u@db/x?password=hunter2"],
)
def test_a_clear_text_password_is_refused(url: str) -> None:
    with pytest.raises(UserInputError, match=r"in clear text.*name a secret instead") as err:
        check_url(url)
    assert "hunter2" not in str(err.value)


# -- the registry ------------------------------------------------------------------------------
@pytest.fixture
def other_url(metastore_url: str, tmp_path: Path) -> Iterator[str]:
    """A second real database of the primary's kind: the federated metastore."""
    if metastore_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'other.sqlite'}"
        return
    url = scratch_schema_url("sp_fed")
    yield url
    drop_scratch_schema(url)


def _state(catalog: Catalog) -> tuple[list[str], dict[str, str], int]:
    store = catalog.store
    return [m.name for m in store.list_metastores()], store.routes(), store.route_version()


def test_metastores_are_registered_listed_and_removed(catalog: Catalog, other_url: str) -> None:
    v0 = catalog.store.route_version()
    m1 = catalog.federation.add("m1", other_url, "read-write-create-whitelist", ["sales_*"], prefix="sales_")
    assert (m1.url, m1.access, m1.writable, m1.prefix) == (other_url, C, ("sales_*",), "sales_")
    assert [m.name for m in catalog.federation.list()] == [PRIMARY, "m1"]
    assert catalog.federation.get(PRIMARY).access is RWC
    assert catalog.federation.health(m1) is None
    assert catalog.federation.health(catalog.federation.get(PRIMARY)) is None
    new = Metastore(other_url, migrate=False)  # the federated database was migrated to head
    try:
        assert new.route_version() == 0 and new.list_namespaces() == []
    finally:
        new.close()
    assert catalog.store.route_version() == v0 + 1
    catalog.store.set_route("sales_eu", "m1")
    assert catalog.store.routes() == {"sales_eu": "m1"} and catalog.store.route_version() == v0 + 2
    with pytest.raises(UserInputError, match="metastore m1 is in use: namespaces sales_eu are routed there"):
        catalog.federation.remove("m1")
    catalog.store.set_route("sales_eu", PRIMARY)
    catalog.federation.remove("m1")
    assert catalog.store.route_version() == v0 + 4
    with pytest.raises(NotFoundError, match=r"metastore m1 does not exist \(streampart federation list"):
        catalog.federation.get("m1")


def test_a_prefix_claims_namespaces_and_keeps_its_metastore_in_use(catalog: Catalog, other_url: str) -> None:
    catalog.federation.add("m1", other_url, "read-write-create", prefix="fin_")
    catalog.namespaces.create("fin_ledger")  # placed in m1 by the prefix
    assert catalog.store.find_namespace("fin_ledger") is None
    assert catalog.on("m1").store.find_namespace("fin_ledger") is not None
    with pytest.raises(UserInputError, match="namespaces fin_ledger have its prefix fin_"):
        catalog.federation.remove("m1")
    catalog.namespaces.drop("fin_ledger")
    catalog.federation.remove("m1")


def test_namespace_create_on_a_metastore_records_its_route(catalog: Catalog, other_url: str) -> None:
    catalog.federation.add("m1", other_url, "read-write-create-whitelist", ["sales_*"])
    ns = catalog.namespaces.create("sales_eu", metastore="m1", description="EU sales")
    assert ns.description == "EU sales" and catalog.store.routes() == {"sales_eu": "m1"}
    before = _state(catalog)
    with pytest.raises(FederationAccessError, match=r"creates only namespaces of its whitelist \(sales_\*\)"):
        catalog.namespaces.create("hr", metastore="m1")
    with pytest.raises(NotFoundError, match="metastore nope does not exist"):
        catalog.namespaces.create("hr", metastore="nope")
    assert _state(catalog) == before and catalog.store.find_namespace("hr") is None


def test_name_clashes_are_refused_unless_routed(catalog: Catalog, other_url: str) -> None:
    make_table(catalog, "default.t")
    catalog.namespaces.create("sales")
    catalog.namespaces.create("hr")
    theirs = Metastore(other_url)
    try:
        theirs.create_namespace("default")
        theirs.create_namespace("sales")
    finally:
        theirs.close()
    before = _state(catalog)
    clash = r"namespaces default, sales exist both in the primary and in m1"
    with pytest.raises(UserInputError, match=clash) as e:
        catalog.federation.add("m1", other_url, "read-only")
    assert "--route default=primary or --route default=m1" in str(e.value)
    with pytest.raises(UserInputError, match=r"namespaces sales exist both"):
        catalog.federation.add("m1", other_url, "read-only", routes={"default": PRIMARY})
    assert _state(catalog) == before
    catalog.federation.add("m1", other_url, "read-only", routes={"default": PRIMARY, "sales": "m1"})
    assert catalog.store.routes() == {"default": PRIMARY, "sales": "m1"}


# Each is refused with one error naming the fault, and nothing is recorded (registry, routes, version).
BAD = [
    ({"name": PRIMARY}, "needs no registration"),
    ({"name": "m/1"}, "path separator"),
    ({"access": "write-all"}, "is not one of read-only, read-write-whitelist"),
    ({"access": "read-write-whitelist"}, "give at least one --writable PATTERN"),
    ({"access": "read-only", "writable": ["x*"]}, "has no whitelist, so --writable does not apply"),
    ({"prefix": "9x"}, "cannot start a namespace name"),
    ({"prefix": "sa"}, "prefix sa collides with namespaces of the primary: sales"),
    ({"url": "postgresql://u:hunter2@127.0.0.1/x"}, "in clear text"),
    ({"url": "postgresql://u:${NOPE_PW}@127.0.0.1/x"}, "secret NOPE_PW is unknown"),
    ({"url": "postgresql://postgres@127.0.0.1:1/test"}, "metastore m1 is unreachable at"),
    ({"url": "sqlite:////nonexistent/dir/m.sqlite"}, r"unreachable at .*directory /nonexistent/dir does not"),
    ({"routes": {"x": "m2"}}, "routed to primary or to m1"),
    ({"url": "PRIMARY"}, "is the primary's own database"),
]


@pytest.mark.parametrize("bad, says", BAD, ids=[str(b) for b, _ in BAD])
def test_bad_metastores_are_refused_and_change_nothing(
    catalog: Catalog, other_url: str, metastore_url: str, bad, says
) -> None:
    catalog.namespaces.create("sales")
    before = _state(catalog)
    url = bad.get("url", other_url)
    with pytest.raises(UserInputError, match=says):
        catalog.federation.add(
            bad.get("name", "m1"),
            metastore_url if url == "PRIMARY" else url,
            bad.get("access", "read-only"),
            bad.get("writable", ()),
            prefix=bad.get("prefix"),
            routes=bad.get("routes"),
        )
    assert _state(catalog) == before


def test_duplicates_are_refused(catalog: Catalog, other_url: str, tmp_path: Path) -> None:
    catalog.federation.add("m1", other_url, "read-only", prefix="fin_")
    before = _state(catalog)
    with pytest.raises(AlreadyExistsError, match="metastore m1 exists already"):
        catalog.federation.add("m1", f"sqlite:///{tmp_path / 'third.sqlite'}", "read-only")
    with pytest.raises(UserInputError, match="metastore m1 has that database already"):
        catalog.federation.add("m2", other_url, "read-only")
    with pytest.raises(UserInputError, match="prefix fin_eu_ overlaps the prefix fin_ of metastore m1"):
        catalog.federation.add("m2", f"sqlite:///{tmp_path / 'third.sqlite'}", "read-only", prefix="fin_eu_")
    with pytest.raises(NotFoundError, match="metastore m2 does not exist"):
        catalog.store.set_route("x", "m2")
    with pytest.raises(NotFoundError, match="metastore m2 does not exist"):
        catalog.federation.remove("m2")
    assert _state(catalog) == before


def test_a_url_naming_secrets_is_stored_as_given(metastore_url: str, other_url: str, tmp_path: Path) -> None:
    if other_url.startswith("sqlite"):
        stored = "sqlite:///${FED_DIR}/other.sqlite"
        secrets, value = {"FED_DIR": str(tmp_path)}, str(tmp_path)
    else:  # trust auth: the password is sent and ignored, which is all this needs
        stored = other_url.replace("postgres@", "postgres:${FED_PW}@")
        secrets, value = {"FED_PW": "s3cret-value"}, "s3cret-value"
    catalog = Catalog.open(tmp_path / "wh", metastore_url, secrets=secrets)
    try:
        m1 = catalog.federation.add("m1", stored, "read-only")
        assert m1.url == stored and value not in catalog.store.get_metastore("m1").url
        assert catalog.federation.health(m1) is None
        assert "secret FED" in str(Catalog(catalog.store, catalog.warehouse).federation.health(m1))
    finally:
        catalog.close()


def test_migration_0008_on_a_real_metastore(metastore_url: str, tmp_path: Path) -> None:
    """0008 → 0007 → 0008: the registry and routes are made afresh (empty, version 0), and the
    metastore's tables are as they were."""
    import sqlalchemy as sa

    catalog = Catalog.open(tmp_path / "wh", metastore_url)
    make_table(catalog, "ns.t")
    catalog.store.set_route("ns", PRIMARY)
    catalog.close()
    with downgraded(metastore_url, "0007") as conn:
        names = sa.inspect(conn).get_table_names()
        assert "sp_metastores" not in names and "sp_routes" not in names and "sp_route_version" not in names
    store = Metastore(metastore_url)  # migrates to head
    try:
        assert (store.routes(), store.route_version(), store.list_metastores()) == ({}, 0, [])
        assert [str(t.name) for t in store.list_tables()] == ["ns.t"]
        store.set_route("ns", PRIMARY)
        assert store.route_version() == 1
    finally:
        store.close()


def test_dropping_a_namespace_drops_its_route(catalog: Catalog, other_url: str) -> None:
    catalog.federation.add("m1", other_url, "read-write-create")
    catalog.namespaces.create("ops", metastore="m1")
    version = catalog.store.route_version()
    with pytest.raises(UserInputError, match="namespaces ops are routed there"):
        catalog.federation.remove("m1")
    assert catalog.on("m1").store.find_namespace("ops") is not None  # it lives there
    catalog.namespaces.drop("ops")
    assert catalog.store.routes() == {} and catalog.store.route_version() == version + 1
    catalog.federation.remove("m1")


def test_a_sqlite_file_that_is_gone_is_down_and_not_remade(catalog: Catalog, tmp_path: Path) -> None:
    path = tmp_path / "fed" / "m.sqlite"
    path.parent.mkdir()
    m1 = catalog.federation.add("m1", f"sqlite:///{path}", "read-only")
    assert path.is_file() and catalog.federation.health(m1) is None
    path.unlink()
    assert catalog.federation.health(m1) == f"file {path} does not exist" and not path.exists()
