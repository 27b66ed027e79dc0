"""Shared test fixtures: metastore backends, catalogs, the Spark session."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from metastore.catalog import Catalog
from metastore.durations import parse_duration
from metastore.models import Keys, LateDataPolicy, Mode, Table, TableName, TableSpec, parse_schema
from metastore.store import Metastore
from tests.pg import drop_scratch_schema, scratch_schema_url

BACKENDS = ["sqlite", "postgresql"]


def add_clusters(catalog: Catalog, root: Path, *names: str) -> None:
    """Register a local cluster per name, each with its own warehouse directory under ``root``."""
    for name in names:
        (root / name).mkdir()
        catalog.clusters.add(name, str(root / name), "local[2]")


def fresh_metastore_url(backend: str, tmp_path: Path) -> str:
    """A metastore URL of an empty database: a new SQLite file, or a new PostgreSQL schema."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'metastore.sqlite'}"
    return scratch_schema_url()


@contextmanager
def mixed_federation(source: str, tmp_path: Path) -> Iterator[Catalog]:
    """A primary of backend ``source`` with ``m2`` (read-write-create) of the other backend: the
    federation a namespace moves across (SQLite → PostgreSQL, or the other way)."""
    primary_url = fresh_metastore_url(source, tmp_path)
    m2 = scratch_schema_url("sp_move") if source == "sqlite" else f"sqlite:///{tmp_path / 'm2.sqlite'}"
    catalog = Catalog.open(tmp_path / "warehouse", primary_url)
    try:
        catalog.federation.add("m2", m2, "read-write-create")
        yield catalog
    finally:
        catalog.close()
        drop_scratch_schema(primary_url)
        drop_scratch_schema(m2)


@pytest.fixture(params=BACKENDS)
def metastore_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    url = fresh_metastore_url(request.param, tmp_path)
    yield url
    drop_scratch_schema(url)


@pytest.fixture
def catalog(metastore_url: str, tmp_path: Path) -> Iterator[Catalog]:
    cat = Catalog.open(tmp_path / "warehouse", metastore_url)
    yield cat
    cat.close()


@pytest.fixture(params=["sqlite", "postgresql", pytest.param("bucket", marks=pytest.mark.process)])
def storage_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    """``catalog`` on a local disk (on both metastore backends) and in a bucket (the session's S3
    server; a SQLite metastore on the local disk): for the crash and concurrency suites, whose
    guarantees must hold on object semantics too (issue 28)."""
    if request.param == "bucket":
        root = request.getfixturevalue("s3_root")
        cat = Catalog.open(root, f"sqlite:///{tmp_path / 'metastore.sqlite'}")
        yield cat
        cat.close()
        return
    url = fresh_metastore_url(request.param, tmp_path)
    cat = Catalog.open(tmp_path / "warehouse", url)
    yield cat
    cat.close()
    drop_scratch_schema(url)


# Where the contract suites' namespaces live in the federated variant of ``routed_catalog``: m1 and m2
# are PostgreSQL schemas, m3 a SQLite file; explicit routes for some, a prefix for others, and every
# other namespace (e.g. ``ops``) stays on the primary. ``a`` and ``b`` apart: links cross metastores.
FEDERATED_ROUTES = {"ns": "m1", "a": "m1", "b": "m2", "nope": "m2", "c": "m3", "iso": "m3"}
FEDERATED_PREFIXES = {"m2": "te", "m3": "sal"}  # team → m2, sales → m3


@pytest.fixture(params=["single", "federated"], name="catalog")
def routed_catalog(request: pytest.FixtureRequest, metastore_url: str, tmp_path: Path) -> Iterator[Catalog]:
    """``catalog`` for the contract suites: one metastore, or a federation of four through the router.

    Import it into a test module (``from tests.fixtures import routed_catalog``) and its tests run on
    both: in the federated variant the primary is ``metastore_url`` and the tests' namespaces live in
    m1 and m2 (two PostgreSQL databases) and m3 (a SQLite file), by :data:`FEDERATED_ROUTES` and
    :data:`FEDERATED_PREFIXES`. A test reaches a namespace's own metastore with :func:`home`.
    """
    cat = Catalog.open(tmp_path / "warehouse", metastore_url)
    made = federate(cat, tmp_path) if request.param == "federated" else []
    yield cat
    cat.close()
    for url in made:
        drop_scratch_schema(url)


def federate(catalog: Catalog, tmp_path: Path) -> list[str]:
    """Register m1, m2 (PostgreSQL scratch schemas) and m3 (a SQLite file) with ``catalog``'s primary
    and place the contract suites' namespaces there; returns the schemas' URLs (to drop)."""
    made = [scratch_schema_url("sp_fed"), scratch_schema_url("sp_fed")]
    urls = {"m1": made[0], "m2": made[1], "m3": f"sqlite:///{tmp_path / 'm3.sqlite'}"}
    for name, url in urls.items():
        catalog.federation.add(name, url, "read-write-create", prefix=FEDERATED_PREFIXES.get(name))
    for namespace, name in FEDERATED_ROUTES.items():
        catalog.federation.set_route(namespace, name)
    return made


def home(catalog: Catalog, namespace: str = "ns") -> Metastore:
    """The metastore ``namespace`` lives in, as ``catalog``'s router places it (its primary, unfederated)."""
    return catalog.home(namespace).store


@pytest.fixture
def sqlite_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    """For Spark-heavy tests where the backend does not matter (both are covered elsewhere).

    ``@pytest.mark.parametrize("sqlite_catalog", ["single", "federated"], indirect=True)`` runs a
    test on it alone and on it as the primary of a federation (see :func:`federate`).
    """
    cat = Catalog.open(tmp_path / "warehouse")
    made = federate(cat, tmp_path) if getattr(request, "param", "single") == "federated" else []
    yield cat
    cat.close()
    for url in made:
        drop_scratch_schema(url)


def make_table(
    catalog: Catalog,
    name: str = "ns.events",
    mode: Mode = Mode.ARRIVAL,
    roll_every: str = "1h",
    lateness: str = "0s",
    late_data: LateDataPolicy = LateDataPolicy.REJECT,
    dead_letter: bool = False,
    schema: str = "id BIGINT, ts TIMESTAMP, msg STRING",
    max_future: str = "1d",
    max_age: str | None = None,
    cluster: str = "default",
    replicate_to: tuple[str, ...] = (),
    retain: str | None = None,
    keys: Keys | None = None,
    cluster_by: tuple[str, ...] = (),
) -> Table:
    return catalog.create_table(
        TableSpec(
            name=TableName.parse(name),
            columns=parse_schema(schema),
            time_column="ts",
            mode=mode,
            roll_every=parse_duration(roll_every),
            lateness=parse_duration(lateness),
            late_data=late_data,
            dead_letter=dead_letter,
            max_future=parse_duration(max_future),
            max_age=parse_duration(max_age) if max_age is not None else None,
            cluster=cluster,
            retain=parse_duration(retain) if retain is not None else None,
            keys=keys,
            cluster_by=cluster_by,
        ),
        replicate_to=replicate_to,
    )


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the whole test session (start-up costs seconds)."""
    from streampart.config import SparkConfig
    from streampart.query import spark_session

    session = spark_session(SparkConfig(master="local[2]", shuffle_partitions=2, driver_memory="1g"))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory):
    """One real Kafka-compatible broker (Tansu, memory storage) on a free loopback port per session.

    Yields an ``ingest.kafka.devbroker.EmbeddedBroker``: ``.bootstrap`` is ``127.0.0.1:PORT``;
    ``.create_topic(name, partitions)``, ``.produce(topic, records)``, ``.end_offsets(topic)``,
    ``.delete_topic(name)`` help tests. Give each test its own topic names (the broker is shared).
    """
    from ingest.kafka.devbroker import EmbeddedBroker

    broker = EmbeddedBroker(log_path=tmp_path_factory.mktemp("kafka") / "tansu.log")
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory):
    """A real Spark standalone cluster per session: a master and two workers (1 core, 1 GiB each).

    Yields a ``tests.standalone.StandaloneCluster``: ``.url`` is its master
    (``spark://127.0.0.1:PORT``), ``.applications()`` what the master has run. Drive it from
    other processes (``streampart --spark-master URL …`` with ``tests.standalone.cluster_env()``):
    this one's SparkSession is the shared ``local[2]`` one.
    """
    from tests.standalone import StandaloneCluster

    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone")).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """One real S3 server per session (moto's, behind a fault proxy: ``tests/s3server.py``)."""
    from tests.s3server import S3Server

    server = S3Server(tmp_path_factory.mktemp("s3")).start()
    yield server
    server.stop()


@pytest.fixture
def s3_root(s3_server, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``s3://<a new bucket>/warehouse``, with the standard AWS variables pointing this process (and
    the processes it starts) at the session's S3 server through its fault proxy (no fault armed)."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    bucket = s3_server.create_bucket()
    s3_server.proxy.clear()
    yield f"s3://{bucket}/warehouse"
    s3_server.proxy.clear()


@pytest.fixture(scope="session")
def private_pg_server(tmp_path_factory: pytest.TempPathFactory):
    """One private PostgreSQL instance per session (``tests.private_pg.PrivatePostgres``), never the
    shared server: tests may stop it (``.stop("immediate")`` is a dead backend) and start it again.

    Use :func:`private_pg` instead, which starts it again if an earlier test left it stopped.
    Give each test its own databases (``.create_database(name)`` returns the URL): the instance
    is shared. It is stopped and its directory removed at the end of the session, pass or fail.
    """
    from tests.private_pg import PrivatePostgres

    pg = PrivatePostgres(tmp_path_factory.mktemp("private-pg"))
    try:
        yield pg.start()
    finally:
        pg.cleanup()


@pytest.fixture
def private_pg(private_pg_server):
    """The session's private PostgreSQL instance, running (started again if a test stopped it)."""
    return private_pg_server.start()
