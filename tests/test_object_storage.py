"""Tables in an S3-compatible bucket (issue 28), on a real S3 server (moto's, ``tests/s3server.py``).

The chunk protocol, rolls and housekeeping on object semantics: commits take a Delta version by
put-if-absent, a roll's compacted files appear whole when their upload completes and become
visible with the sweep commit, and readers nobody here wrote (delta-rs, polars, DuckDB) read the
same rows from the bucket. The store failing mid-commit loses nothing and doubles nothing; bad
settings are one clear error naming the setting, with nothing created.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore import storage
from metastore.catalog import Catalog
from metastore.delta.files import live_files
from metastore.errors import StoreUnavailableError, UserInputError
from metastore.models import PartitionState, iso
from metastore.replicas import replica_table
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import all_ids, duplicates, records
from tests.s3server import S3Server


@pytest.fixture
def s3_catalog(s3_root: str, tmp_path: Path) -> Iterator[Catalog]:
    cat = Catalog.open(s3_root, f"sqlite:///{tmp_path / 'metastore.sqlite'}")
    yield cat
    cat.close()


def _commit(writer: ChunkWriter, ids: range) -> None:
    chunk = writer.stage(writer.reserve(), records(ids), Format.JSONL)
    writer.commit(chunk.id)


def test_chunks_and_a_roll_in_a_bucket_read_by_three_readers(s3_catalog: Catalog) -> None:
    import duckdb
    import polars as pl
    import s3fs

    table = make_table(s3_catalog)
    assert table.location.startswith("s3://")
    writer = ChunkWriter(s3_catalog, table)
    for k in range(3):
        _commit(writer, range(k * 100, k * 100 + 100))
    assert sorted(all_ids(table)) == list(range(300))  # delta-rs over the bucket
    [result] = Roller(s3_catalog).roll_table(table, force=True)
    assert result.state == "done" and result.files_after == 1 and result.rows == 300
    _commit(writer, range(300, 350))  # into the next streaming partition

    options = storage.delta_options(table.location)
    assert sorted(all_ids(table)) == list(range(350))
    assert sorted(pl.read_delta(table.location, storage_options=options)["id"].to_list()) == list(range(350))
    # DuckDB reads the snapshot's files from the bucket itself (its S3 extension is not installable
    # here: through an fsspec file system), checked against the Delta log's own list
    files = live_files(s3_catalog.warehouse.load(table))
    con = duckdb.connect()
    opts = storage.current()
    con.register_filesystem(
        s3fs.S3FileSystem(
            key=opts.access_key_id,
            secret=opts.secret_access_key,
            endpoint_url=opts.endpoint,
            client_kwargs={"region_name": opts.signing_region},
        )
    )
    uris = [storage.join(table.location, f.path) for f in files]
    ids = [r[0] for r in con.sql(f"SELECT id FROM read_parquet({uris!r})").fetchall()]
    assert sorted(ids) == list(range(350))
    # the rolled partition is one directory holding its file and its _SUCCESS marker
    standard = [p for p in s3_catalog.describe(table)["partitions"] if p["state"] == PartitionState.STANDARD]
    assert len(standard) == 1


def test_a_commit_whose_answer_is_lost_lands_once(s3_server: S3Server, s3_catalog: Catalog) -> None:
    """The commit file's PUT lands but its answer is dropped: the client retries, meets 412, and the
    commit counts as landed — once — instead of being taken again at the next version."""
    table = make_table(s3_catalog)
    writer = ChunkWriter(s3_catalog, table)
    _commit(writer, range(10))
    fault = s3_server.proxy.arm("PUT", r"_delta_log/\d{20}\.json", "drop-after")
    _commit(writer, range(10, 20))
    assert fault.hits == 1
    ids = all_ids(table)
    assert sorted(ids) == list(range(20)) and not duplicates(ids)
    assert int(s3_catalog.warehouse.load(table).version()) == 2


def test_a_store_failing_mid_commit_is_ridden_out(s3_server: S3Server, s3_catalog: Catalog) -> None:
    table = make_table(s3_catalog)
    writer = ChunkWriter(s3_catalog, table)
    s3_server.proxy.arm("PUT", r"_staging/", "503", times=2)  # staging a file: slow down, twice
    s3_server.proxy.arm("PUT", r"_delta_log/\d{20}\.json", "drop-before")  # the commit: dropped
    s3_server.proxy.arm("GET", r"_delta_log", "503")  # reading the log: one 5xx
    _commit(writer, range(10))
    ids = all_ids(table)
    assert sorted(ids) == list(range(10)) and not duplicates(ids)


def test_a_warehouse_in_a_bucket_needs_its_metastore_elsewhere(s3_root: str) -> None:
    with pytest.raises(UserInputError, match="--metastore"):
        Catalog.open(s3_root)


def test_an_unknown_bucket_is_one_error_naming_the_setting(s3_root: str, tmp_path: Path) -> None:
    refused = r"--warehouse s3://no-such-bucket/wh: bucket no-such-bucket does not exist"
    with pytest.raises(UserInputError, match=refused):
        Catalog.open("s3://no-such-bucket/wh", f"sqlite:///{tmp_path / 'm.sqlite'}")
    assert not (tmp_path / "m.sqlite").exists()  # nothing created


def test_an_endpoint_that_does_not_answer(
    s3_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.s3server import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    # down, or a wrong address: nobody can tell which from here, so the error says both (and is
    # the store's, retriable: a store that froze for a moment is not a setting to change)
    said = r"does not answer.*if it is down, retry once it answers.*AWS_ENDPOINT_URL"
    with pytest.raises(StoreUnavailableError, match=said):
        Catalog.open(s3_root, f"sqlite:///{tmp_path / 'm.sqlite'}")
    assert not (tmp_path / "m.sqlite").exists()


def test_a_prefix_holding_another_table_is_refused(s3_root: str, tmp_path: Path) -> None:
    """Two warehouses (two metastores) on one prefix: the second's table of the same name would
    write into the first's Delta log. It is refused, and the first table is untouched."""
    first = Catalog.open(s3_root, f"sqlite:///{tmp_path / 'a.sqlite'}")
    table = make_table(first)
    _commit(ChunkWriter(first, table), range(5))
    second = Catalog.open(s3_root, f"sqlite:///{tmp_path / 'b.sqlite'}")
    with pytest.raises(UserInputError, match="already holds another table's Delta log"):
        make_table(second)
    assert second.store.find_table(table.name) is None  # nothing recorded
    assert sorted(all_ids(table)) == list(range(5))
    first.close()
    second.close()


@pytest.mark.spark
def test_spark_reads_a_table_in_a_bucket_without_an_s3_connector(s3_catalog: Catalog, spark) -> None:
    """Spark has no S3A jars here: its Python workers read the snapshot's files (streampart/bucket_reads.py).
    The rows, partition values and a column added after some files were written, as delta-rs reads them."""
    from metastore.models import Column
    from streampart.query import read_table
    from tests.helpers import delta_rows

    table = make_table(s3_catalog)
    writer = ChunkWriter(s3_catalog, table)
    _commit(writer, range(100))
    Roller(s3_catalog).roll_table(table, force=True)
    s3_catalog.schemas.alter(table.name, add=[Column(name="extra", type="string")])
    table = s3_catalog.table(table.name)
    _commit(ChunkWriter(s3_catalog, table), range(100, 150))
    frame = read_table(spark, s3_catalog, table)
    got = sorted((r["id"], r["ts_period"].timestamp(), r["extra"]) for r in frame.collect())
    expected = delta_rows(table, columns="id, ts_period, extra")
    want = sorted(
        (i, p.timestamp(), e)
        for i, p, e in zip(
            *(expected.column(c).to_pylist() for c in ("id", "ts_period", "extra")), strict=True
        )
    )
    assert got == want and len(got) == 150


@pytest.mark.process
def test_the_http_server_writes_into_a_bucket(s3_root: str, s3_server: S3Server, tmp_path: Path) -> None:
    """``streampart serve`` on a warehouse in a bucket (its metastore a local SQLite file): uploads
    spool on the server's disk, staged and committed files go to the bucket; a commit whose answer
    the store drops still lands once."""
    from ingest.client import Client
    from tests.api.fixtures import Server

    srv = Server(s3_root, f"sqlite:///{tmp_path / 'metastore.sqlite'}", tmp_path)  # type: ignore[arg-type]
    table = make_table(srv.catalog, "ns.events")
    srv.admin = srv.token("admin", "admin:*")
    srv.start()
    try:
        with Client(srv.url, srv.admin) as api:
            api.write("ns.events", records(range(40)), idempotency_key="k1")
            s3_server.proxy.arm("PUT", r"_delta_log/\d{20}\.json", "drop-after")
            api.write("ns.events", records(range(40, 80)), idempotency_key="k2")
            again = api.write("ns.events", records(range(40, 80)), idempotency_key="k2")
        assert again["rows"] == 40
        ids = all_ids(table)
        assert sorted(ids) == list(range(80)) and not duplicates(ids)
        assert not any(
            e.name.endswith(".tmp") for e in storage.list_dir(storage.join(table.location, "_staging"))
        )
    finally:
        srv.close()


def test_a_local_table_replicates_to_a_bucket_and_a_bucket_table_to_a_local_disk(
    s3_root: str, tmp_path: Path
) -> None:
    """Clusters whose storage is a bucket beside one on a local disk: each table's standard
    partitions copied to the other, verified, committed once; read back from the copy."""
    from metastore.models import iso
    from metastore.replicas import replica_table
    from scheduler.replication import Replicator

    catalog = Catalog.open(tmp_path / "warehouse", f"sqlite:///{tmp_path / 'metastore.sqlite'}")
    (tmp_path / "disk").mkdir()
    catalog.clusters.add("disk", str(tmp_path / "disk"), "local[2]")
    catalog.clusters.add("bucket", storage.join(s3_root, "cluster"), "local[2]")
    up = make_table(catalog, "ns.up", cluster="disk", replicate_to=("bucket",))
    down = make_table(catalog, "ns.down", cluster="bucket", replicate_to=("disk",))
    assert down.location.startswith("s3://") and not up.location.startswith("s3://")
    for table in (up, down):
        writer = ChunkWriter(catalog, table)
        _commit(writer, range(30))
        Roller(catalog).roll_table(table, force=True)
        _commit(writer, range(30, 40))  # streaming: never copied
        report = Replicator(catalog).replicate(table)
        assert len(report.copied) == 1 and not report.failed
        [replica] = catalog.replicas.list(table)
        copy = replica_table(table, replica)
        assert sorted(all_ids(copy)) == list(range(30))
        assert Replicator(catalog).replicate(table).copied == []  # nothing twice
        standard = [p for p in catalog.describe(table)["partitions"] if p["state"] == "standard"]
        assert [iso(v) for v in catalog.replicas.present_on(table, replica.cluster)] == [
            p["value"] for p in standard
        ]
    catalog.close()


@pytest.mark.process
@pytest.mark.spark
def test_the_cli_on_a_warehouse_in_a_bucket(s3_root: str, tmp_path: Path) -> None:
    """What a user types: create, write, roll, INSERT and query (Spark, through the query policy), check — on
    ``--warehouse s3://…``; and a mistyped bucket is one line naming it, no traceback."""
    import json
    import subprocess

    from tests.test_cli import COMMAND, CREATE

    base = [*COMMAND, "--warehouse", s3_root, "--metastore", f"sqlite:///{tmp_path / 'metastore.sqlite'}"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], capture_output=True, text=True, cwd=tmp_path, timeout=300)

    (tmp_path / "rows.jsonl").write_bytes(records(range(5)))
    for args in (
        ("table", "create", "shop.orders", *CREATE),
        ("write", "shop.orders", str(tmp_path / "rows.jsonl")),
        ("roll", "shop.orders", "--force"),
        ("write", "shop.orders", str(tmp_path / "rows.jsonl"), "--key", "second"),
    ):
        done = run(*args)
        assert done.returncode == 0, done.stderr
    insert = run("query", "INSERT INTO shop.orders SELECT id + 100, ts, msg FROM shop.orders WHERE id < 2")
    assert insert.returncode == 0, insert.stderr
    query = run("query", "--json", "SELECT count(*) AS n, sum(id) AS s FROM shop.orders")
    assert query.returncode == 0, query.stderr
    assert [json.loads(line) for line in query.stdout.splitlines()] == [{"n": 14, "s": 20 + 2 * 201}]
    checked = run("check", "shop.orders")
    assert checked.returncode == 0 and "0 error(s)" in checked.stdout + checked.stderr
    wrong = subprocess.run(
        [
            *COMMAND,
            "--warehouse",
            "s3://no-such-bucket/wh",
            "--metastore",
            "sqlite:///x.sqlite",
            "table",
            "list",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
    assert wrong.stderr.startswith(
        "error: --warehouse s3://no-such-bucket/wh: bucket no-such-bucket does not exist"
    )
    assert not (tmp_path / "x.sqlite").exists()


@pytest.mark.spark
def test_kafka_ingest_into_a_bucket(
    spark, s3_catalog: Catalog, kafka_broker, tmp_path: Path, monkeypatch
) -> None:
    """A Kafka job on a table in a bucket: Spark tasks stage into the bucket with the driver's store
    options (their spec carries them), the checkpoint stays on this host's disk
    (``Warehouse.local_dir``), and every record lands once, a second run adding nothing."""
    import json
    import uuid

    from ingest.kafka.job import KafkaIngestOptions, run_kafka_ingest

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    table = make_table(s3_catalog, dead_letter=True)
    topic = f"t-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, partitions=2)
    kafka_broker.produce(
        topic,
        [
            {"value": json.dumps({"id": i, "ts": "2026-11-21T10:15:00Z", "msg": f"m{i}"}), "partition": i % 2}
            for i in range(300)
        ],
    )
    opts = KafkaIngestOptions(
        table="ns.events",
        bootstrap=kafka_broker.bootstrap,
        topic=topic,
        available_now=True,
        max_offsets_per_trigger=200,
    )
    assert run_kafka_ingest(spark, s3_catalog, opts) == 2
    assert str(tmp_path / "state") in opts.checkpoint_dir(s3_catalog.warehouse)
    assert run_kafka_ingest(spark, s3_catalog, opts) == 0
    ids = all_ids(table)
    assert sorted(ids) == list(range(300)) and not duplicates(ids)
    assert all(f.path.startswith("_staging/") for f in live_files(s3_catalog.warehouse.load(table)))


@pytest.mark.process
def test_credentials_the_store_refuses_are_one_error_naming_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that checks credentials (moto with IAM authentication): a wrong secret and an
    unknown key are each one error naming the settings to fix; nothing is created."""
    checking = S3Server(tmp_path, checks_credentials=True).start()
    try:
        bucket = checking.create_bucket()
        for key, value in checking.env().items():
            monkeypatch.setenv(key, value)
        Catalog.open(f"s3://{bucket}/wh", f"sqlite:///{tmp_path / 'ok.sqlite'}").close()  # its own: fine
        for key_id, secret in ((checking.access_key, "wrong"), ("AKIANOSUCHKEY0000000", "x")):
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
            with pytest.raises(UserInputError, match=r"refused the credentials.*AWS_SECRET_ACCESS_KEY"):
                Catalog.open(f"s3://{bucket}/wh", f"sqlite:///{tmp_path / 'm.sqlite'}")
            assert not (tmp_path / "m.sqlite").exists()
    finally:
        checking.stop()


@pytest.mark.process
@pytest.mark.spark
def test_the_sql_server_serves_a_warehouse_in_a_bucket(
    s3_catalog: Catalog, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``streampart sql-server`` on ``--warehouse s3://…``: its file on this host's disk
    (``Warehouse.local_dir``), statements read the bucket's tables through the query policy (and
    see a commit made after the server started); while the bucket does not serve the files, a
    client is told so in the store's one line."""
    import os

    from streampart.sql_client import Connection, Target
    from streampart.sql_endpoint import LOCAL_USER
    from tests.helpers import ROOT, sql_server, wait_for

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    table = make_table(s3_catalog)
    _commit(ChunkWriter(s3_catalog, table), range(20))
    Roller(s3_catalog).roll_table(table, force=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    env.update(
        STREAMPART_WAREHOUSE=s3_catalog.warehouse.root,
        STREAMPART_METASTORE=s3_catalog.store.url,
        STREAMPART_SPARK__SHUFFLE_PARTITIONS="2",
        STREAMPART_SPARK__DRIVER_MEMORY="1g",
        STREAMPART_STORAGE__RETRIES="1",
        STREAMPART_STORAGE__RETRY_TIMEOUT="2s",
        PYTHONPATH=str(ROOT),
    )
    with (
        sql_server(s3_catalog.warehouse.root, env, tmp_path / "server.log") as info,
        Connection(Target(info.host, info.port, LOCAL_USER, info.secret)) as conn,
    ):
        _, rows = conn.execute("SELECT count(*), sum(id) FROM ns.events")
        assert list(rows) == [(20, 190)]
        _commit(ChunkWriter(s3_catalog, table), range(100, 120))
        wait_for(
            lambda: list(conn.execute("SELECT count(*) FROM ns.events")[1]) == [(40,)],
            "the new chunk to be read (sqlserver.freshness)",
        )
        assert (tmp_path / "state" / "streampart").is_dir()
        # the bucket stops serving the table's files: the client is told the store's one line
        # (retriable: StoreUnavailableError), not the first line of a Python worker's traceback
        s3_server.proxy.arm("GET", DATA_FILE, "503", times=1_000_000)
        try:
            with pytest.raises(StoreUnavailableError) as refused:
                list(conn.execute("SELECT count(*), max(id) FROM ns.events")[1])
        finally:
            s3_server.proxy.clear()
        assert refused.value.store == s3_server.endpoint, refused.value
        said = f"the store at {s3_server.endpoint} is unavailable: it answered 503"
        assert str(refused.value).startswith(said), refused.value
        assert list(conn.execute("SELECT count(*), min(id) FROM ns.events")[1]) == [(40, 0)]


@pytest.mark.parametrize("stall", [1.4, 4.0], ids=["reaches-the-store-first", "reaches-it-after-the-retry"])
def test_a_commit_that_times_out_lands_once(s3_server: S3Server, s3_catalog: Catalog, stall: float) -> None:
    """The commit file's PUT is held on its way (a timeout at 1 s): the client gives up, and the
    request reaches the store later — before the create is sent again, or after. Either way the
    version is taken once, by this commit, and the late request changes nothing."""
    import time
    from datetime import timedelta

    storage.configure(storage.S3Options(request_timeout=timedelta(seconds=1)))
    try:
        table = make_table(s3_catalog)
        writer = ChunkWriter(s3_catalog, table)
        _commit(writer, range(10))
        fault = s3_server.proxy.arm("PUT", r"_delta_log/\d{20}\.json", "stall", seconds=stall)
        _commit(writer, range(10, 20))
        assert fault.hits == 1
        time.sleep(max(0.0, stall - 1.5) + 0.5)  # the held request has reached the store by now
        ids = all_ids(table)
        assert sorted(ids) == list(range(20)) and not duplicates(ids)
        assert int(s3_catalog.warehouse.load(table).version()) == 2
    finally:
        storage.configure(storage.S3Options())


AWS_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
)


def test_no_credentials_at_all_is_one_error_naming_where_to_set_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key in the settings, the environment or the AWS files, and no instance role (this
    machine's metadata address refuses connections): one line saying where credentials go."""
    for key in AWS_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(UserInputError, match=r"no credentials for the store at AWS S3.*AWS_ACCESS_KEY_ID"):
        Catalog.open("s3://some-bucket/wh", f"sqlite:///{tmp_path / 'm.sqlite'}")
    assert not (tmp_path / "m.sqlite").exists()


def test_housekeeping_in_a_bucket_removes_what_no_snapshot_lists(s3_catalog: Catalog) -> None:
    """Housekeeping lists a bucket's staging area a page at a time and deletes what is past the
    retention and no snapshot lists: an aborted chunk's file, a crashed writer's orphan, an expired
    chunk's; a live file stays, whatever its age, and a swept chunk's while the log holds a version
    that lists it. Readers notice nothing."""
    import uuid
    from datetime import timedelta

    from metastore.delta import staging
    from scheduler.config import HousekeepingConfig
    from scheduler.housekeeping import Housekeeper

    catalog, store = s3_catalog, s3_catalog.store
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    first = store.streaming_partition(table.id).value
    swept = store.get_chunk(w.write(records(range(10)), Format.JSONL, key="swept").chunk)
    aborted = w.stage(w.reserve("aborted"), records(range(50, 55)), Format.JSONL)
    store.abort_chunk(aborted)
    w.stage(w.reserve("stuck"), records(range(60, 65)), Format.JSONL)
    orphan = f"_staging/{uuid.uuid4()}-0.parquet"
    storage.write_bytes(storage.join(table.location, orphan), b"PAR1")
    Roller(catalog).roll_table(table, force=True)
    live = store.get_chunk(w.write(records(range(100, 105)), Format.JSONL, key="live").chunk)
    rolled = store.get_partition(table.id, first)
    assert rolled is not None and rolled.rolled_at is not None
    rolled_at = rolled.rolled_at
    rows = sorted(all_ids(table))
    keeper = Housekeeper(catalog, HousekeepingConfig(retention="1h", chunk_retention="1h"))
    report = keeper.run(now=rolled_at + timedelta(hours=2))  # every file is an hour past the retention
    assert orphan in report.files_removed and report.expired == 1
    left = {rel for rel, _ in staging.files(table)}
    # the swept chunk's file stays while the log holds the versions before the roll (time travel)
    live_staged = {f.path for f in live_files(catalog.warehouse.load(table)) if f.staged}
    assert {rel.rsplit("/", 1)[-1] for rel in left - live_staged} == {swept.files[0].path.rsplit("/", 1)[-1]}
    assert {f.path.rsplit("/", 1)[-1] for f in live.files} <= {rel.rsplit("/", 1)[-1] for rel in left}
    assert sorted(all_ids(table)) == rows


def test_an_empty_log_left_by_a_crashed_create_is_no_other_table(tmp_path: Path) -> None:
    """A create that died before its first commit file leaves an empty ``_delta_log``: creating the
    table again makes it there (only a log with commits can belong to another table)."""
    catalog = Catalog.open(tmp_path / "warehouse", f"sqlite:///{tmp_path / 'metastore.sqlite'}")
    (tmp_path / "warehouse" / "ns" / "events" / "_delta_log").mkdir(parents=True)
    table = make_table(catalog)
    _commit(ChunkWriter(catalog, table), range(3))
    assert sorted(all_ids(table)) == [0, 1, 2]
    catalog.close()


# -- a store that does not serve is unavailable, never damage ---------------------------------------
# Each case: what the store does to every request for the table's Delta log, and what the message
# says it answered. The client's retries are cut short (storage.retries, storage.retry_timeout).
OUTAGES = [
    ("503", "answered 503 Service Unavailable (SlowDown)"),  # a store shedding load
    ("drop-before", "closed the connection without answering"),  # a store dropping connections
]


@pytest.mark.parametrize(("kind", "answered"), OUTAGES, ids=[k for k, _ in OUTAGES])
def test_a_store_outage_is_unavailable_not_a_damaged_log(
    s3_server: S3Server, s3_catalog: Catalog, kind: str, answered: str
) -> None:
    """Loading the log, committing and `check` while the store does not serve the log: each says the
    store at its address is unavailable (retriable), none calls the log damaged; all read the same
    rows once the store answers again."""
    from datetime import timedelta

    from metastore.errors import RetriableError, StoreUnavailableError, TableIntegrityError
    from metastore.integrity import check_table

    table = make_table(s3_catalog)
    writer = ChunkWriter(s3_catalog, table)
    _commit(writer, range(10))
    storage.configure(storage.S3Options(retries=1, retry_timeout=timedelta(seconds=2)))
    try:
        s3_server.proxy.arm("GET", r"_delta_log/\d{20}\.json", kind, times=1_000_000)
        with pytest.raises(StoreUnavailableError) as refused:
            s3_catalog.warehouse.load(table)
        assert not isinstance(refused.value, TableIntegrityError)
        assert refused.value.store == s3_server.endpoint
        assert f"the store at {s3_server.endpoint} is unavailable: it {answered}" in str(refused.value)
        assert "damaged" not in str(refused.value).replace("nothing was found damaged", "")
        with pytest.raises(RetriableError, match=f"the store at {s3_server.endpoint} is unavailable"):
            _commit(ChunkWriter(s3_catalog, table), range(10, 20))
        [problem] = check_table(s3_catalog, table)
        assert (problem.kind, problem.store, problem.severity) == (
            "store_unavailable",
            s3_server.endpoint,
            "error",
        )
        s3_server.proxy.clear()
        assert check_table(s3_catalog, table) == []
    finally:
        s3_server.proxy.clear()
        storage.configure(storage.S3Options())
    assert sorted(all_ids(table)) == list(range(10))  # the failed commit left nothing


def test_a_store_that_answers_403_is_not_called_unavailable() -> None:
    """Only an outage (5xx, 429, no answer) is *unavailable*: a refusal or a missing key is an
    answer (here, as object_store words them)."""
    from metastore.storage import faults

    url = "http://127.0.0.1:9000/b/wh/ns/t/_delta_log/00000000000000000001.json"
    for text in (
        f"Generic S3 error: Error performing GET {url} in 3ms - Client error with status 403 Forbidden: "
        "<Error><Code>AccessDenied</Code></Error>",
        f"Generic S3 error: Error performing GET {url} in 3ms, after 0 retries, max_retries: 4, "
        "retry_timeout: 5s - Server returned non-2xx status code: 400 Bad Request",
        "Kernel error -> Invalid JSON in log record",
    ):
        assert faults.unavailable(OSError(5, text)) is None, text
    said = faults.unavailable(
        OSError(5, f"Generic S3 error: Error performing GET {url} in 1.2s, after 4 retries - HTTP error: "
                "error sending request: client error (Connect): tcp connect error: Connection refused")
    )  # fmt: skip
    assert (
        said is not None
        and said.store == "http://127.0.0.1:9000"
        and said.answered == "refused the connection"
    )


@pytest.mark.process
def test_the_cli_names_a_store_outage_in_one_line_and_check_lists_it(
    s3_root: str, s3_server: S3Server, tmp_path: Path
) -> None:
    """What a user sees while the bucket answers 503 to the Delta log: `table read` and `write` exit 1
    with one line naming the store's address and what it answered (not "restore from a backup"),
    and `check --json` lists a store_unavailable problem naming the address, no traceback."""
    import json
    import os
    import subprocess

    from tests.test_cli import COMMAND, CREATE

    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    env |= {"STREAMPART_STORAGE__RETRY_TIMEOUT": "3s", "STREAMPART_STORAGE__RETRIES": "1"}
    base = [*COMMAND, "--warehouse", s3_root, "--metastore", f"sqlite:///{tmp_path / 'metastore.sqlite'}"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
        )

    (tmp_path / "rows.jsonl").write_bytes(records(range(5)))
    for args in (
        ("table", "create", "shop.orders", *CREATE),
        ("write", "shop.orders", str(tmp_path / "rows.jsonl")),
    ):
        done = run(*args)
        assert done.returncode == 0, done.stderr
    said = f"error: the store at {s3_server.endpoint} is unavailable: it answered 503 Service Unavailable"
    s3_server.proxy.arm("GET", r"_delta_log/\d{20}\.json", "503", times=1_000_000)
    for args in (
        ("table", "read", "shop.orders"),
        ("write", "shop.orders", str(tmp_path / "rows.jsonl"), "--key", "second"),
    ):
        done = run(*args)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(said) and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "restore" not in done.stderr
    checked = run("check", "--json")
    assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stderr
    [problem] = json.loads(checked.stdout)["problems"]
    assert (problem["kind"], problem["store"]) == ("store_unavailable", s3_server.endpoint)
    s3_server.proxy.clear()
    assert run("check").returncode == 0


@pytest.mark.process
def test_a_commit_over_http_while_the_store_is_out_is_a_503_with_retry_after(
    s3_root: str, s3_server: S3Server, tmp_path: Path
) -> None:
    """`streampart serve` on a bucket whose Delta log the store does not serve: a commit answers 503
    ``unavailable`` with Retry-After and the store's address (a 500 said the log was damaged); the
    same commit lands once the store answers."""
    import httpx

    from tests.api.fixtures import Server, auth

    srv = Server(s3_root, f"sqlite:///{tmp_path / 'metastore.sqlite'}", tmp_path)  # type: ignore[arg-type]
    table = make_table(srv.catalog, "ns.events")
    srv.admin = srv.token("admin", "admin:*")
    srv.start(STREAMPART_STORAGE__RETRY_TIMEOUT="3s", STREAMPART_STORAGE__RETRIES="1")
    try:
        with httpx.Client(base_url=srv.url, headers=auth(srv.admin), timeout=120) as http:
            chunk = http.post("/v1/tables/ns/events/chunks", json={}).json()
            up = http.put(
                f"/v1/chunks/{chunk['id']}/data",
                content=records(range(10)),
                headers={"Content-Type": "application/x-ndjson"},
            )
            assert up.status_code == 200, up.text
            for method in ("GET", "HEAD", "PUT"):
                s3_server.proxy.arm(method, r"_delta_log/", "503", times=1_000_000)
            refused = http.post(f"/v1/chunks/{chunk['id']}/commit")
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == "unavailable" and int(refused.headers["Retry-After"]) >= 1
            assert refused.json()["store"] == s3_server.endpoint
            assert f"the store at {s3_server.endpoint} is unavailable" in refused.json()["message"]
            s3_server.proxy.clear()
            done = http.post(f"/v1/chunks/{chunk['id']}/commit")
            assert done.status_code == 200, done.text
        ids = all_ids(table)
        assert sorted(ids) == list(range(10)) and not duplicates(ids)
    finally:
        s3_server.proxy.clear()
        srv.close()


@pytest.mark.process
def test_an_endpoint_without_a_scheme_is_one_line_naming_the_setting(s3_root: str, tmp_path: Path) -> None:
    """``AWS_ENDPOINT_URL=127.0.0.1:5055`` (as MinIO prints its address): one line naming the variable
    and the URL to write, no Rust panic, no traceback; the same from the settings' storage.endpoint."""
    import os
    import subprocess

    from tests.test_cli import COMMAND

    base = [
        *COMMAND,
        "--warehouse",
        s3_root,
        "--metastore",
        f"sqlite:///{tmp_path / 'm.sqlite'}",
        "table",
        "list",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    for extra, setting in (
        ({"AWS_ENDPOINT_URL": "127.0.0.1:5055"}, "AWS_ENDPOINT_URL '127.0.0.1:5055'"),
        (
            {"STREAMPART_STORAGE__ENDPOINT": "localhost:5055"},
            "storage.endpoint (STREAMPART_STORAGE__ENDPOINT) 'localhost:5055'",
        ),
    ):
        done = subprocess.run(
            base, capture_output=True, text=True, cwd=tmp_path, env=env | extra, timeout=120
        )
        assert done.returncode == 1 and "Traceback" not in done.stderr and "panicked" not in done.stderr, (
            done.stderr
        )
        assert done.stderr.startswith(f"error: {setting} is not the store's URL"), done.stderr
        assert "write it as http://" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m.sqlite").exists()


def test_a_roll_while_the_store_is_out_fails_as_retriable_and_resumes(
    s3_server: S3Server, s3_catalog: Catalog
) -> None:
    """A roll during an outage fails with a retriable error naming the store (the daemon logs such a
    failure as a warning and retries it with backoff), and the next attempt rolls every row."""
    from datetime import timedelta

    from metastore.errors import RetriableError

    table = make_table(s3_catalog)
    _commit(ChunkWriter(s3_catalog, table), range(10))
    storage.configure(storage.S3Options(retries=1, retry_timeout=timedelta(seconds=2)))
    try:
        s3_server.proxy.arm("GET", r"_delta_log/\d{20}\.json", "503", times=1_000_000)
        with pytest.raises(RetriableError, match=f"the store at {s3_server.endpoint} is unavailable"):
            Roller(s3_catalog).roll_table(table, force=True)
    finally:
        s3_server.proxy.clear()
        storage.configure(storage.S3Options())
    results = Roller(s3_catalog).roll_table(table, force=True)  # the failed roll resumed, and so on
    assert all(r.state == "done" for r in results) and sum(r.rows for r in results) == 10
    assert sorted(all_ids(table)) == list(range(10))


# -- the table's data files not served, while its Delta log is -------------------------------------
DATA_FILE = r"\.parquet"
# a dropped connection, as obstore's reader words it for a GET of a data file
DATA_OUTAGES = [OUTAGES[0], ("drop-before", "did not answer (the request could not be sent)")]


@pytest.mark.spark
@pytest.mark.parametrize(("kind", "answered"), DATA_OUTAGES, ids=[k for k, _ in DATA_OUTAGES])
def test_a_query_whose_data_files_the_store_does_not_serve_is_unavailable(
    spark, s3_server: S3Server, s3_catalog: Catalog, kind: str, answered: str
) -> None:
    """A Spark query of a table in a bucket reads its files in Spark's Python workers
    (streampart/bucket_reads.py): a worker meeting a store that does not serve a file fails the job
    with a Java exception holding its traceback. That is the store's StoreUnavailableError again
    (retriable, naming the store's address and what it answered), not "query failed: An exception
    was thrown from the Python worker:"; the same query reads every row once the store answers."""
    from datetime import timedelta

    from streampart.query import run_sql
    from streampart.query_errors import spark_errors

    table = make_table(s3_catalog)
    _commit(ChunkWriter(s3_catalog, table), range(10))
    storage.configure(storage.S3Options(retries=1, retry_timeout=timedelta(seconds=2)))
    try:
        s3_server.proxy.arm("GET", DATA_FILE, kind, times=1_000_000)
        frame = run_sql(spark, s3_catalog, "SELECT count(*) AS n, sum(id) AS s FROM ns.events")
        with pytest.raises(StoreUnavailableError) as refused, spark_errors():
            frame.collect()
        assert refused.value.store == s3_server.endpoint
        assert f"the store at {s3_server.endpoint} is unavailable: it {answered} to GET /" in str(
            refused.value
        )
        assert len(str(refused.value).splitlines()) == 1 and "Traceback" not in str(refused.value)
        s3_server.proxy.clear()
        # a new frame: Spark keeps the failed stage of the one it ran
        again = run_sql(spark, s3_catalog, "SELECT count(*) AS n, sum(id) AS s FROM ns.events")
        assert [tuple(r) for r in again.collect()] == [(10, 45)]
    finally:
        s3_server.proxy.clear()
        storage.configure(storage.S3Options())


@pytest.mark.process
@pytest.mark.spark
def test_the_cli_names_a_store_not_serving_data_files_in_one_line(
    s3_root: str, s3_server: S3Server, tmp_path: Path
) -> None:
    """`query` (Spark) and `table read` (pyarrow) while the bucket answers 503 to the table's data
    files (its Delta log served): each exits 1 with one line naming the store's address and what it
    answered, no Python worker's traceback nor Spark's JVM stack before it."""
    import os
    import subprocess

    from tests.test_cli import COMMAND

    catalog = Catalog.open(s3_root, f"sqlite:///{tmp_path / 'metastore.sqlite'}")
    _commit(ChunkWriter(catalog, make_table(catalog, "shop.orders")), range(5))
    catalog.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    env |= {"STREAMPART_STORAGE__RETRY_TIMEOUT": "3s", "STREAMPART_STORAGE__RETRIES": "1"}
    env |= {"STREAMPART_SPARK__SHUFFLE_PARTITIONS": "2", "STREAMPART_SPARK__DRIVER_MEMORY": "1g"}
    base = [*COMMAND, "--warehouse", s3_root, "--metastore", f"sqlite:///{tmp_path / 'metastore.sqlite'}"]
    said = f"error: the store at {s3_server.endpoint} is unavailable: it answered 503 Service Unavailable"
    s3_server.proxy.arm("GET", DATA_FILE, "503", times=1_000_000)
    for args in (("query", "SELECT sum(id) AS s FROM shop.orders"), ("table", "read", "shop.orders")):
        done = subprocess.run(
            [*base, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
        )
        assert done.returncode == 1, done.stderr
        # a JVM's start prints its own notes first (a query's, every time): the error is the last line
        errors = [line for line in done.stderr.splitlines() if "error" in line.lower() or "Traceback" in line]
        assert errors == [done.stderr.strip().splitlines()[-1]], done.stderr
        assert errors[0].startswith(said) and " to GET /" in errors[0], done.stderr


def test_a_replica_copy_while_the_store_is_out_is_retriable_and_copied_later(
    s3_root: str, s3_server: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A copy to a secondary in a bucket while the store answers 503 fails as the store's
    StoreUnavailableError (retriable, naming the copy and the store), not a ReplicationFailedError:
    recorded with its retry time and logged as a warning; the next pass once the store answers
    copies the partition."""
    import logging
    from datetime import timedelta

    from metastore.errors import RetriableError, StoreUnavailableError
    from scheduler.errors import ReplicationFailedError
    from scheduler.replication import Replicator

    catalog = Catalog.open(tmp_path / "warehouse", f"sqlite:///{tmp_path / 'metastore.sqlite'}")
    (tmp_path / "disk").mkdir()
    catalog.clusters.add("disk", str(tmp_path / "disk"), "local[2]")
    catalog.clusters.add("bucket", storage.join(s3_root, "cluster"), "local[2]")
    table = make_table(catalog, "ns.up", cluster="disk", replicate_to=("bucket",))
    _commit(ChunkWriter(catalog, table), range(30))
    Roller(catalog).roll_table(table, force=True)
    [partition] = catalog.store.list_partitions(table.id, [PartitionState.STANDARD])
    [replica] = catalog.replicas.list(table)
    storage.configure(storage.S3Options(retries=1, retry_timeout=timedelta(seconds=2)))
    try:
        s3_server.proxy.arm("PUT", r"/cluster/", "503", times=1_000_000)
        with caplog.at_level(logging.WARNING, "streampart.replication"):
            with pytest.raises(StoreUnavailableError) as refused:
                Replicator(catalog).copy(table, partition, replica)
            report = Replicator(catalog).replicate(table, include_waiting=True)  # a pass: recorded
        assert isinstance(refused.value, RetriableError)
        assert not isinstance(refused.value, ReplicationFailedError)
        assert refused.value.store == s3_server.endpoint
        assert str(refused.value).startswith(
            f"copy of ns.up partition {iso(partition.value)} to bucket failed: the store at "
            f"{s3_server.endpoint} is unavailable: it answered 503 Service Unavailable (SlowDown)"
        )
        [failure] = report.failed
        assert "is unavailable" in failure.error and not report.copied
        logged = [r for r in caplog.records if getattr(r, "event", None) == "replica.failed"]
        assert [(r.levelno, r.transient) for r in logged] == [(logging.WARNING, True)] * 2  # type: ignore[attr-defined]
        [recorded] = catalog.store.list_copies(table.id, "bucket")
        assert recorded.retry_at is not None and "is unavailable" in (recorded.error or "")
        assert Replicator(catalog).replicate(table).failed == []  # waits for its retry time
    finally:
        s3_server.proxy.clear()
        storage.configure(storage.S3Options())
    [copied] = Replicator(catalog).replicate(table, include_waiting=True).copied
    assert copied.cluster == "bucket" and sorted(all_ids(replica_table(table, replica))) == list(range(30))
    catalog.close()
