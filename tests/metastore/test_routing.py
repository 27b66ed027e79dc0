"""Routing (issue 12, part 2): every operation that names a namespace goes to that namespace's
metastore, through the catalog of the process (SQLite and PostgreSQL primaries; the federated
metastores are a SQLite file and a scratch PostgreSQL schema).

Each test looks in the metastore databases themselves: a namespace's rows are in its home and
nowhere else, whichever catalog call made them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.chunks import ChunkWriter
from metastore.catalog import Catalog
from metastore.errors import DanglingLinkError, FederationAccessError, MetastoreDownError, UserInputError
from metastore.federation import PRIMARY
from metastore.links import LinkSpec
from metastore.models import TableName
from metastore.store import Metastore
from tests.fixtures import make_table
from tests.pg import drop_scratch_schema, scratch_schema_url


@pytest.fixture
def federation(catalog: Catalog, tmp_path: Path) -> Iterator[Catalog]:
    """The primary, plus m1 (a SQLite file; namespaces placed explicitly) and m2 (a PostgreSQL schema;
    namespaces named ``fin_…`` by its prefix)."""
    m2 = scratch_schema_url("sp_route")
    catalog.federation.add("m1", f"sqlite:///{tmp_path / 'm1.sqlite'}", "read-write-create")
    catalog.federation.add("m2", m2, "read-write-create", prefix="fin_")
    yield catalog
    catalog.close()
    drop_scratch_schema(m2)


def _rows(catalog: Catalog, table: TableName) -> int:
    t = catalog.table(table)
    return int(catalog.load(t).to_pyarrow_table().num_rows)


def _batch(n: int) -> pa.Table:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "ts": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
            "msg": pa.array(["x"] * n),
        }
    )


def test_each_namespace_lives_in_its_metastore_and_every_call_goes_there(federation: Catalog) -> None:
    catalog = federation
    catalog.namespaces.create("ops", metastore="m1")
    homes = {"ops": "m1", "fin_ledger": "m2", "web": PRIMARY}
    for ns, home in homes.items():
        assert catalog.router.metastore_of(ns) == home
        table = make_table(catalog, f"{ns}.events", dead_letter=True)  # the namespace is made on first use
        assert table.metastore == home and table.uid
        result = ChunkWriter(catalog, catalog.table(f"{ns}.events")).write_table(_batch(3), key=f"k-{ns}")
        assert _rows(catalog, TableName.parse(f"{ns}.events")) == 3
        found, owner = catalog.chunk(result.chunk)
        assert found.id == result.chunk and owner.name == table.name and owner.metastore == home
        assert catalog.describe(catalog.table(f"{ns}.events"))["partitions"]
    for name in [PRIMARY, "m1", "m2"]:  # the rows are in the home, and nowhere else
        held = {t.name.namespace for t in catalog.on(name).store.list_tables()}
        assert held == {ns for ns, home in homes.items() if home == name}, name
        assert {n.name for n in catalog.on(name).store.list_namespaces()} == held
    listed = catalog.list_tables()
    assert not listed.missing
    assert sorted(str(t.name) for t in listed.merged()) == sorted(
        f"{ns}.{t}" for ns in homes for t in ("events", "events__dead_letter")
    )
    assert [n.name for n in catalog.namespaces.list().merged()] == ["web", "ops", "fin_ledger"]


def test_a_write_is_checked_against_the_access_type_of_its_metastore(
    federation: Catalog, tmp_path: Path
) -> None:
    catalog = federation
    ro = tmp_path / "ro.sqlite"
    theirs = Metastore(f"sqlite:///{ro}")
    try:  # a metastore another warehouse writes: we may only read it
        theirs.create_namespace("archive")
    finally:
        theirs.close()
    catalog.federation.add("ro", f"sqlite:///{ro}", "read-only", routes={})
    catalog.federation.set_route("archive", "ro")
    assert catalog.namespaces.get("archive").name == "archive"  # reads go there
    with pytest.raises(
        FederationAccessError, match="namespace archive is on metastore ro, which is read-only"
    ):
        make_table(catalog, "archive.t")
    with pytest.raises(FederationAccessError, match="metastore ro is read-only: no namespace is created"):
        catalog.namespaces.create("more", metastore="ro")
    assert catalog.on("ro").store.list_tables() == []


def test_links_read_across_metastores_and_dangle_when_the_source_goes(federation: Catalog) -> None:
    catalog = federation
    catalog.namespaces.create("ops", metastore="m1")
    source = make_table(catalog, "fin_ledger.entries")
    ChunkWriter(catalog, source).write_table(_batch(5), key="k")
    link = catalog.links.create(LinkSpec(name=TableName.parse("ops.entries"), source=source.name))
    assert link.source_uid == source.uid and link.source_table_id is None  # the source is in m2
    resolved = catalog.resolve("ops.entries")
    assert resolved.table.uid == source.uid and resolved.table.metastore == "m2"
    assert [str(x.name) for x in catalog.links.to(source).merged()] == ["ops.entries"]
    with pytest.raises(UserInputError, match=r"linked by ops\.entries"):
        catalog.drop_table(source)
    catalog.drop_table(source, force=True)
    make_table(catalog, "fin_ledger.entries")  # the same name again: another table
    with pytest.raises(DanglingLinkError, match=r"its source fin_ledger\.entries was dropped"):
        catalog.resolve("ops.entries")


def test_a_route_change_reaches_another_process_within_its_refresh_interval(
    federation: Catalog, metastore_url: str, tmp_path: Path
) -> None:
    other = Catalog.open(tmp_path / "warehouse", metastore_url, refresh_s=0)
    try:
        assert other.router.metastore_of("sales") == PRIMARY
        federation.federation.route("sales", "m1")  # no tables yet: nothing is hidden
        assert other.router.metastore_of("sales") == "m1"  # refresh_s=0: read on every call
        version = other.router.version
        federation.namespaces.create("fin_x")
        assert other.router.version == version  # creating by prefix changes no route
    finally:
        other.close()


def test_a_metastore_that_does_not_answer_is_named_and_fails_fast(
    federation: Catalog, metastore_url: str, tmp_path: Path
) -> None:
    """This process reaches m3 through a secret that points at a port where nothing listens: the host
    is gone, as far as this process can tell. Only m3's namespaces fail, at once after the first."""
    catalog = federation
    real = scratch_schema_url("sp_route")
    host = "127.0.0.1:5432"
    assert host in real
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STREAMPART_SECRET_M3_HOST", host)
        catalog.federation.add("m3", real.replace(host, "${M3_HOST}"), "read-write-create", prefix="m3_")
        make_table(catalog, "m3_ns.t")
    make_table(catalog, "web.t")
    cut_off = Catalog.open(
        tmp_path / "warehouse", metastore_url, secrets={"M3_HOST": "127.0.0.1:1"}, fail_fast_s=60
    )
    try:
        listed = cut_off.list_tables()
        assert sorted(str(t.name) for t in listed.merged()) == ["web.t"]
        assert list(listed.missing) == ["m3"] and "did not answer" in str(listed.warning())
        with pytest.raises(MetastoreDownError, match=r"metastore m3 .* is down") as err:
            cut_off.table("m3_ns.t")  # the breaker is open: no connect is tried
        assert 0 < err.value.retry_after <= 60
        assert cut_off.table("web.t").name == TableName.parse("web.t")  # the others carry on
    finally:
        cut_off.close()
        drop_scratch_schema(real)


def test_a_federated_sqlite_file_that_is_gone_is_down_and_not_made_anew(
    federation: Catalog, metastore_url: str, tmp_path: Path
) -> None:
    federation.namespaces.create("ops", metastore="m1")
    path = tmp_path / "m1.sqlite"
    for leftover in tmp_path.glob("m1.sqlite*"):
        leftover.unlink()
    fresh = Catalog.open(tmp_path / "warehouse", metastore_url)
    try:
        listed = fresh.namespaces.list()
        assert list(listed.missing) == ["m1"] and f"file {path} does not exist" in listed.missing["m1"]
        assert not path.exists()  # an empty database would make ops seem dropped
    finally:
        fresh.close()
