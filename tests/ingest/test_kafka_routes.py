"""One Kafka ingest job, many tables: routes, the job's dead letters, refusals, crashes between tables.

The routing rules themselves are checked without a broker; the rest runs a real broker, real Spark
and real chunk commits, and reads every table back with delta-rs (not through our own code).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from ingest.kafka.devbroker import free_port
from ingest.kafka.job import run_kafka_ingest
from ingest.kafka.job_options import KafkaIngestOptions
from ingest.kafka.route_task import RoutedSpec, _route
from ingest.kafka.routes import Route, RouteError, Routes, field_values, read_routes_file
from metastore.catalog import Catalog
from metastore.models import ChunkState, Table
from tests.api.fixtures import Server, auth
from tests.fixtures import make_table
from tests.helpers import all_ids, delta_rows, duplicates

TS = "2026-11-21T10:15:00Z"


def uid() -> str:
    return uuid.uuid4().hex[:8]


def rec(i: int, partition: int = 0, **extra: Any) -> dict[str, Any]:
    return {"value": json.dumps({"id": i, "ts": TS, "msg": f"m{i}", **extra}), "partition": partition}


# -- the rules (no broker, no Spark) ----------------------------------------------------------
def test_a_topic_routes_by_name_before_pattern_and_templates_name_tables() -> None:
    routes = Routes(
        (
            Route(table="{topic}", pattern=r"shop\..*"),
            Route(table="audit.all", topic="shop.audit"),
            Route(table="ev.{field}", topic="events", table_field="kind"),
        )
    )
    assert routes.resolve("shop.orders") == ("shop.orders", None)
    assert routes.resolve("shop.audit") == ("audit.all", None)  # by name first, whatever the order
    assert routes.resolve("events", "click") == ("ev.click", None)
    assert routes.resolve("other") == (None, "no route takes topic other")
    table, reason = routes.resolve("shop.orders-eu")
    assert table is None and "'shop.orders-eu' is not a table name" in str(reason)
    assert routes.resolve("events", None)[1] == "route events[kind]→ev.{field}: the record has no field kind"
    assert "is not a string" in str(routes.resolve("events", 7)[1])
    assert routes.subscription() == {"topics": ["events", "shop.audit"], "pattern": r"(?:shop\..*)"}
    assert Routes.from_json(routes.to_json()) == routes


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ({"table": "a.b"}, "give exactly one of topic and topic-pattern"),
        ({"table": "a.b", "topic": "t", "pattern": "x"}, "give exactly one of topic and topic-pattern"),
        ({"table": "a.b", "pattern": "("}, "topic-pattern is not a regular expression"),
        ({"table": "{topc}", "topic": "t"}, "uses {topc}; a table template knows {topic} and {field}"),
        ({"table": "ns.{field}", "topic": "t"}, "uses {field} without a table-field"),
        ({"table": "nodot", "topic": "t"}, "'nodot' is not a table name NAMESPACE.TABLE"),
    ],
)
def test_a_route_that_cannot_work_is_refused_naming_it(route: dict[str, str], message: str) -> None:
    with pytest.raises(RouteError, match=message.replace("{", r"\{").replace("(", r"\(")):
        Route(**route)


def test_two_routes_for_one_topic_are_refused() -> None:
    with pytest.raises(RouteError, match=r"topic t has two routes: t→a\.b and t→a\.c"):
        Routes((Route(table="a.b", topic="t"), Route(table="a.c", topic="t")))


def test_the_routes_file(tmp_path: Path) -> None:
    path = tmp_path / "routes.toml"
    path.write_text(
        '[[route]]\ntopic = "orders"\ntable = "shop.orders"\n\n'
        "[[route]]\ntopic-pattern = 'shop\\..*'\ntable = \"{topic}\"\n\n"
        '[[route]]\ntopic = "ev"\ntable-field = "kind"\ntable = "ev.{field}"\n'
    )
    assert read_routes_file(path) == (
        Route(table="shop.orders", topic="orders"),
        Route(table="{topic}", pattern=r"shop\..*"),
        Route(table="ev.{field}", topic="ev", table_field="kind"),
    )
    path.write_text('[[route]]\ntopic = "orders"\ntabel = "x.y"\n')
    with pytest.raises(RouteError, match=r"routes\.toml, route 1: unknown key 'tabel'"):
        read_routes_file(path)
    path.write_text("[[route]\n")
    with pytest.raises(RouteError, match="not valid TOML"):
        read_routes_file(path)


def test_the_options_of_a_routed_job() -> None:
    base = {"bootstrap": "h:9092", "name": "shop", "dead_letter_table": "ops.dead"}
    opts = KafkaIngestOptions(**base, route=("a=ns.a",), topic_pattern=r"shop\..*", table_template="{topic}")
    assert [r.describe() for r in opts.routes().routes] == ["a→ns.a", r"/shop\..*/→{topic}"]
    assert opts.group == "streampart-shop"
    with pytest.raises(ValueError, match="a routed job needs --name"):
        KafkaIngestOptions(bootstrap="h:9092", route=("a=ns.a",), dead_letter_table="ops.dead")
    with pytest.raises(ValueError, match="a routed job needs --dead-letter-table"):
        KafkaIngestOptions(bootstrap="h:9092", route=("a=ns.a",), name="j")
    with pytest.raises(ValueError, match="--topic-pattern needs --table TEMPLATE"):
        KafkaIngestOptions(**base, topic_pattern="x")
    with pytest.raises(ValueError, match=r"a one-table job \(TABLE\) takes --topic only, not --route"):
        KafkaIngestOptions(bootstrap="h:9092", table="ns.t", topic="x", route=("a=ns.a",))


def test_a_field_is_read_from_each_record_whatever_the_batch_holds() -> None:
    good = [b'{"kind": "a", "x": 1}', b'{"kind": "b"}', b'{"x": 2}']
    assert field_values(good, "kind") == ["a", "b", None]
    mixed = [b'{"kind": "a"}', b"not json", None, b'{"kind": 3}', b"[1]"]
    assert field_values(mixed, "kind") == ["a", None, None, 3, None]


def test_a_task_sends_records_it_cannot_stage_to_the_driver_with_their_reason() -> None:
    """Without specs every record comes back: pending for a table the job has not seen, or a dead
    letter (unrouted, or of a refused table); a table to skip is left alone."""
    routes = Routes((Route(table="ev.{field}", topic="ev", table_field="kind"),))
    batch = pa.RecordBatch.from_pylist(
        [
            {"value": json.dumps({"kind": k}).encode(), "topic": "ev", "partition": 1, "offset": i}
            for i, k in enumerate(["a", "b", "c", "bad name"])
        ],
        schema=pa.schema(
            [
                ("value", pa.binary()),
                ("topic", pa.string()),
                ("partition", pa.int32()),
                ("offset", pa.int64()),
            ]
        ),
    )
    spec = RoutedSpec(routes, skip=frozenset({"ev.b"}), refused={"ev.c": "QuotaExceededError: full"})
    rows = pa.Table.from_batches(list(_route(spec, 0, iter([batch])))).to_pylist()
    got = {(r["table"], r["pending"], r["position"], r["source"], r["reason"]) for r in rows}
    assert got == {
        ("ev.a", True, 0, "ev/1", None),
        (None, False, 2, "ev/1", "table ev.c: QuotaExceededError: full"),
        (None, False, 3, "ev/1", "route ev[kind]→ev.{field}: table: 'ev.bad name' is not a table name "
         "NAMESPACE.TABLE (letters, digits and '_', starting with a letter or '_')"),
    }  # fmt: skip


# -- end to end -------------------------------------------------------------------------------
def routed(catalog: Catalog, broker: Any, name: str, **kw: Any) -> KafkaIngestOptions:
    base: dict[str, Any] = {
        "bootstrap": broker.bootstrap,
        "name": name,
        "dead_letter_table": f"ops.dead_{name}",
        "available_now": True,
        "checkpoint": str(Path(catalog.warehouse.root).parent / f"ckpt-{name}"),
    }
    return KafkaIngestOptions(**{**base, **kw})


def job_dead_letters(catalog: Catalog, name: str) -> list[dict[str, Any]]:
    return delta_rows(catalog.table(f"ops.dead_{name}"), columns="source, position, reason, raw").to_pylist()


@pytest.mark.spark
def test_one_job_feeds_many_tables_each_exactly_once(spark, sqlite_catalog, kafka_broker) -> None:
    """Routes by name, by pattern and by field in one job: each table gets exactly its records, in one
    chunk per batch under its own idempotency key; what no table takes is in the job's dead letters."""
    u = uid()
    orders, pattern_ns, fields_ns = f"o{u}", f"p{u}", f"f{u}"
    t_orders = make_table(sqlite_catalog, f"ns{u}.orders", dead_letter=True)
    t_a = make_table(sqlite_catalog, f"{pattern_ns}.a", dead_letter=True)
    t_b = make_table(sqlite_catalog, f"{pattern_ns}.b")  # no dead-letter table of its own
    t_click = make_table(sqlite_catalog, f"{fields_ns}.click", dead_letter=True)
    topics = {orders: 2, f"{pattern_ns}.a": 1, f"{pattern_ns}.b": 1, f"{pattern_ns}.gone": 1, "ev" + u: 2}
    for topic, parts in topics.items():
        kafka_broker.create_topic(topic, partitions=parts)
    kafka_broker.produce(orders, [rec(i, i % 2) for i in range(40)])
    kafka_broker.produce(f"{pattern_ns}.a", [rec(i) for i in range(100, 130)])
    kafka_broker.produce(
        f"{pattern_ns}.b", [rec(i) for i in range(200, 210)] + [{"value": "{broken", "partition": 0}]
    )
    kafka_broker.produce(f"{pattern_ns}.gone", [rec(300)])  # matches the pattern, no such table
    kafka_broker.produce(
        "ev" + u,
        [rec(i, i % 2, kind="click") for i in range(400, 420)] + [rec(420, 0), rec(421, 1, kind="nope")],
    )
    routes = tmp_routes(sqlite_catalog, u, orders, pattern_ns, fields_ns)
    opts = routed(sqlite_catalog, kafka_broker, f"j{u}", routes_file=str(routes), max_offsets_per_trigger=60)

    batches = run_kafka_ingest(spark, sqlite_catalog, opts)

    assert batches >= 2
    assert sorted(all_ids(t_orders)) == list(range(40))
    assert sorted(all_ids(t_a)) == list(range(100, 130))
    assert sorted(all_ids(t_b)) == list(range(200, 210))
    assert sorted(all_ids(t_click)) == list(range(400, 420))
    for t in (t_orders, t_a, t_b, t_click):
        chunks = sqlite_catalog.store.list_chunks(t.id, [ChunkState.COMMITTED])
        keys = [c.idempotency_key for c in chunks]
        assert len(keys) == len(set(keys)) and all(k.startswith("kafka:") for k in keys)
    dead = {(d["source"], d["position"]): d["reason"] for d in job_dead_letters(sqlite_catalog, f"j{u}")}
    b, gone, ev = f"{pattern_ns}.b/0", f"{pattern_ns}.gone/0", "ev" + u
    assert set(dead) == {(b, 10), (gone, 0), (f"{ev}/0", 10), (f"{ev}/1", 10)}
    assert dead[(b, 10)].startswith(f"table {pattern_ns}.b: invalid JSON")
    assert f"table {pattern_ns}.gone: NotFoundError" in dead[(gone, 0)]
    assert dead[(f"{ev}/0", 10)].endswith("the record has no field kind")
    assert f"table {fields_ns}.nope: NotFoundError" in dead[(f"{ev}/1", 10)]

    # a second run finds nothing new
    assert run_kafka_ingest(spark, sqlite_catalog, opts) == 0
    assert sorted(all_ids(t_click)) == list(range(400, 420))


def tmp_routes(catalog: Catalog, u: str, orders: str, pattern_ns: str, fields_ns: str) -> Path:
    path = Path(catalog.warehouse.root).parent / f"routes-{u}.toml"
    path.write_text(
        f'[[route]]\ntopic = "{orders}"\ntable = "ns{u}.orders"\n\n'
        f"[[route]]\ntopic-pattern = '{pattern_ns}\\..*'\ntable = \"{{topic}}\"\n\n"
        f'[[route]]\ntopic = "ev{u}"\ntable-field = "kind"\ntable = "{fields_ns}.{{field}}"\n'
    )
    return path


@pytest.mark.spark
def test_new_routes_and_topics_are_picked_up_without_a_restart(spark, sqlite_catalog, kafka_broker) -> None:
    u = uid()
    first = make_table(sqlite_catalog, f"n{u}.first", dead_letter=True)
    second = make_table(sqlite_catalog, f"n{u}.second", dead_letter=True)
    third = make_table(sqlite_catalog, f"n{u}.third", dead_letter=True)
    kafka_broker.create_topic(f"a{u}", partitions=1)
    kafka_broker.create_topic(f"b{u}", partitions=1)
    kafka_broker.produce(f"b{u}", [rec(i) for i in range(100, 110)])  # before its route exists
    routes = Path(sqlite_catalog.warehouse.root).parent / f"live-{u}.toml"
    routes.write_text(
        f'[[route]]\ntopic = "a{u}"\ntable = "n{u}.first"\n\n'
        f"[[route]]\ntopic-pattern = 'n{u}\\.t.*'\ntable = \"{{topic}}\"\n"
    )
    opts = routed(
        sqlite_catalog, kafka_broker, f"live{u}", routes_file=str(routes), available_now=False, trigger="1s"
    )
    with running(spark, sqlite_catalog, opts) as box:
        kafka_broker.produce(f"a{u}", [rec(i) for i in range(10)])
        wait_for(lambda: sorted(all_ids(first)) == list(range(10)))
        # a new route in the file: its topic is read from its first offset, without a restart
        routes.write_text(routes.read_text() + f'\n[[route]]\ntopic = "b{u}"\ntable = "n{u}.second"\n')
        wait_for(lambda: sorted(all_ids(second)) == list(range(100, 110)))
        # a new topic matching a pattern: found on a later trigger
        kafka_broker.create_topic(f"n{u}.third", partitions=1)
        kafka_broker.produce(f"n{u}.third", [rec(i) for i in range(200, 205)])
        wait_for(lambda: sorted(all_ids(third)) == list(range(200, 205)))
    assert box["n"] >= 3
    assert duplicates(all_ids(first) + all_ids(second) + all_ids(third)) == []


@contextlib.contextmanager
def running(spark: Any, catalog: Catalog, opts: KafkaIngestOptions) -> Iterator[dict[str, Any]]:
    """The job runs in a thread while the block runs; then it stops (``box["n"]``: its batches)."""
    stop = threading.Event()
    box: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: box.update(n=run_kafka_ingest(spark, catalog, opts, should_stop=stop.is_set))
    )
    thread.start()
    try:
        yield box
    finally:
        stop.set()
        thread.join(timeout=180)


def wait_for(check: Any, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # the table has no commit yet
            pass
        time.sleep(0.5)
    raise AssertionError("timed out")


@pytest.mark.spark
def test_a_refused_table_holds_back_only_its_own_records(spark, sqlite_catalog, kafka_broker) -> None:
    """A namespace over its quota refuses its table's chunk: that table's records of the batch go to the
    job's dead letters (raw, with the reason), the other tables commit theirs, and the job goes on."""
    u = uid()
    full = make_table(sqlite_catalog, f"full{u}.t", dead_letter=True)
    fine = make_table(sqlite_catalog, f"fine{u}.t", dead_letter=True)
    for t in ("x", "y"):
        kafka_broker.create_topic(t + u, partitions=1)
    opts = routed(sqlite_catalog, kafka_broker, f"q{u}", route=(f"x{u}=full{u}.t", f"y{u}=fine{u}.t"))
    kafka_broker.produce("x" + u, [rec(i) for i in range(5)])
    kafka_broker.produce("y" + u, [rec(i) for i in range(100, 105)])
    assert run_kafka_ingest(spark, sqlite_catalog, opts) == 1
    sqlite_catalog.store.alter_namespace(
        f"full{u}", quota_bytes=sqlite_catalog.store.committed_bytes(f"full{u}") + 10
    )
    kafka_broker.produce("x" + u, [rec(i) for i in range(5, 10)])
    kafka_broker.produce("y" + u, [rec(i) for i in range(105, 110)])
    assert run_kafka_ingest(spark, sqlite_catalog, opts) == 1
    assert sorted(all_ids(full)) == list(range(5))
    assert sorted(all_ids(fine)) == list(range(100, 110))
    dead = job_dead_letters(sqlite_catalog, f"q{u}")
    assert sorted(json.loads(d["raw"])["id"] for d in dead) == list(range(5, 10))
    assert all(
        f"table full{u}.t: QuotaExceededError: namespace full{u} is over its quota" in d["reason"]
        for d in dead
    )


def ingest_cmd(
    catalog: Catalog, bootstrap: str, routes: list[str], checkpoint: Path, *extra: str
) -> list[str]:
    args = [a for r in routes for a in ("--route", r)]
    return [
        sys.executable, "-m", "streampart.cli", "--warehouse", str(catalog.warehouse.root),
        "--metastore", str(catalog.store.url), "ingest", "kafka", "--bootstrap", bootstrap, *args,
        "--name", checkpoint.name, "--dead-letter-table", f"ops.dead_{checkpoint.name}",
        "--checkpoint", str(checkpoint), *extra,
    ]  # fmt: skip


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.parametrize(
    "crash",
    [
        "kafka-between-tables@1",  # the first table of the batch committed, the second not
        "kafka-between-tables@2",  # both committed, the job's dead letters not
        "kafka-before-dead-letters@1",
        "chunk-after-delta-commit@2",  # the second table's Delta commit made, its metastore not told
    ],
)
def test_a_crash_between_the_tables_commits_replays_only_the_others(
    sqlite_catalog, kafka_broker, tmp_path, crash: str
) -> None:
    u = uid()
    one = make_table(sqlite_catalog, f"k{u}.one", dead_letter=True)
    two = make_table(sqlite_catalog, f"k{u}.two", dead_letter=True)
    for t in ("p", "q", "r"):
        kafka_broker.create_topic(t + u, partitions=2)
    kafka_broker.produce("p" + u, [rec(i, i % 2) for i in range(30)])
    kafka_broker.produce("q" + u, [rec(i, i % 2) for i in range(100, 130)])
    kafka_broker.produce("r" + u, [rec(i, i % 2) for i in range(200, 205)])  # its table does not exist
    routes = [f"p{u}=k{u}.one", f"q{u}=k{u}.two", f"r{u}=k{u}.missing"]
    checkpoint = tmp_path / f"crash{u}"
    cmd = ingest_cmd(sqlite_catalog, kafka_broker.bootstrap, routes, checkpoint, "--available-now")
    proc = subprocess.run(
        cmd, env={**os.environ, "STREAMPART_CRASHPOINT": crash}, capture_output=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    landed = all_ids(one) + (all_ids(two) if crash != "kafka-between-tables@1" else [])
    assert duplicates(landed) == []
    final = subprocess.run(cmd, capture_output=True, timeout=300)
    assert final.returncode == 0, final.stderr.decode()[-2000:]
    assert sorted(all_ids(one)) == list(range(30))
    assert sorted(all_ids(two)) == list(range(100, 130))
    dead = job_dead_letters(sqlite_catalog, checkpoint.name)
    assert sorted(json.loads(d["raw"])["id"] for d in dead) == list(range(200, 205))


def test_the_jobs_data_loss_error_names_its_flag_not_the_sources_option() -> None:
    from ingest.kafka.job import query_failure
    from ingest.kafka.reader import DATA_LOSS_ADVICE

    wrapped = (
        "StreamingQueryException: [FOREACH_BATCH] …\n"
        f"ingest.errors.KafkaDataLossError: offsets [0, 5) of t-0 were deleted before they were read "
        f"(5 records). {DATA_LOSS_ADVICE}\n"
    )
    found = query_failure(Exception(wrapped))
    assert found.startswith(
        "KafkaDataLossError: offsets [0, 5) of t-0 were deleted before they were read (5 records)"
    )
    assert "run the job with --no-fail-on-data-loss" in found and "failOnDataLoss" not in found


@pytest.mark.spark
def test_each_table_is_written_in_its_own_metastore_and_a_read_only_one_refuses(
    spark, sqlite_catalog, kafka_broker, tmp_path
) -> None:
    """Federation: a routed table whose namespace lives in another metastore is committed there (its
    chunks are that metastore's); one whose metastore turned read-only refuses, and its records go to
    the job's dead letters while the others commit."""
    u = uid()
    catalog = sqlite_catalog
    catalog.federation.add("fw", f"sqlite:///{tmp_path / 'fw.sqlite'}", "read-write-create")
    catalog.federation.add("fr", f"sqlite:///{tmp_path / 'fr.sqlite'}", "read-write-create")
    catalog.namespaces.create(f"w{u}", metastore="fw")
    catalog.namespaces.create(f"r{u}", metastore="fr")
    home = make_table(catalog, f"h{u}.t", dead_letter=True)
    away = make_table(catalog, f"w{u}.t", dead_letter=True)
    frozen = make_table(catalog, f"r{u}.t", dead_letter=True)
    catalog.federation.alter("fr", access="read-only")
    for t in ("h", "w", "r"):
        kafka_broker.create_topic(t + u, partitions=1)
        kafka_broker.produce(t + u, [rec(i) for i in range(10)])
    opts = routed(catalog, kafka_broker, f"fed{u}", route=(f"h{u}=h{u}.t", f"w{u}=w{u}.t", f"r{u}=r{u}.t"))
    assert run_kafka_ingest(spark, catalog, opts) == 1
    assert sorted(all_ids(home)) == sorted(all_ids(away)) == list(range(10))
    assert all_ids(frozen) == []
    assert catalog.home(away).store.list_chunks(away.id, [ChunkState.COMMITTED])  # in fw, not the primary
    dead = job_dead_letters(catalog, f"fed{u}")
    assert sorted(json.loads(d["raw"])["id"] for d in dead) == list(range(10))
    assert all(f"table r{u}.t: FederationAccessError" in d["reason"] for d in dead)


def cli(catalog: Catalog, *args: str) -> Any:
    proc = subprocess.run(
        [sys.executable, "-m", "streampart.cli", "--warehouse", str(catalog.warehouse.root),
         "--metastore", str(catalog.store.url), *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if "--json" in args else proc.stdout


def two_topics_job(
    catalog: Catalog, broker: Any, u: str, ns: str, name: str
) -> tuple[Table, Table, str, KafkaIngestOptions]:
    """Tables ``{ns}{u}.a`` and ``.b`` fed from topics ``a{u}`` and ``b{u}`` by a running routed job
    named ``{name}{u}``: the tables, the job's name and its options."""
    a, b = (make_table(catalog, f"{ns}{u}.{t}", dead_letter=True) for t in ("a", "b"))
    for t in ("a", "b"):
        broker.create_topic(t + u, partitions=1)
    job = f"{name}{u}"
    route = (f"a{u}={ns}{u}.a", f"b{u}={ns}{u}.b")
    return a, b, job, routed(catalog, broker, job, route=route, available_now=False, trigger="1s")


@pytest.mark.spark
@pytest.mark.process
def test_a_paused_topic_holds_its_records_the_others_go_on_and_resume_lands_them_once(
    spark, sqlite_catalog, kafka_broker, tmp_path
) -> None:
    """Pause over the HTTP API (admin on the job's namespace) and resume from the CLI while the job
    runs: each request is recorded and applied between batches; the paused topic's records wait in
    Kafka, the other topic's land; resumed, they land exactly once. Its lag in records and in seconds
    (the oldest waiting record's age, from its Kafka timestamp) shows in the API, on the status page
    and on the job's /metrics."""
    u = uid()
    a, b, job, opts = two_topics_job(sqlite_catalog, kafka_broker, u, "st", "steer")
    opts = opts.model_copy(update={"metrics_port": free_port(), "metrics_host": "127.0.0.1"})
    srv = Server(Path(sqlite_catalog.warehouse.root), str(sqlite_catalog.store.url), tmp_path)
    srv.start()
    steerer, other = srv.token("steer" + u, f"admin:st{u}"), srv.token("other" + u, "admin:elsewhere")
    api = httpx.Client(base_url=srv.url, headers=auth(steerer), timeout=30)
    pause = f"/v1/admin/ingest/jobs/{job}/topics/a{u}/pause"
    try:
        assert api.post(pause).status_code == 403  # not run yet: its tables are unknown, admin:* only
        with running(spark, sqlite_catalog, opts):
            kafka_broker.produce("a" + u, [rec(i) for i in range(10)])
            kafka_broker.produce("b" + u, [rec(i) for i in range(100, 110)])
            wait_for(lambda: len(all_ids(a)) == 10 and len(all_ids(b)) == 10)
            refused = httpx.post(srv.url + pause, headers=auth(other))
            assert refused.status_code == 403 and f"admin:st{u}" in refused.json()["message"], refused.text
            bad = api.post(f"/v1/admin/ingest/jobs/{job}/topics/a{u}/reset", json={"to": "yesterday"})
            assert bad.status_code == 400 and bad.json()["field"] == "to", bad.text
            request = api.post(pause)
            assert request.status_code == 202 and request.json()["job_known"], request.text
            wait_for(lambda: sqlite_catalog.store.ingest_requests(job)[0].done_at is not None)
            [done] = sqlite_catalog.store.ingest_requests(job)
            assert done.id == request.json()["id"] and done.outcome == f"paused topic a{u}"
            assert done.requested_by == "steer" + u
            hour_ago = int(time.time() * 1000) - 3_600_000  # written an hour ago, as far as Kafka says
            kafka_broker.produce("a" + u, [{**rec(i), "timestamp_ms": hour_ago} for i in range(10, 20)])
            kafka_broker.produce("b" + u, [rec(i) for i in range(110, 120)])
            wait_for(lambda: len(all_ids(b)) == 20)
            time.sleep(3)  # a few more triggers: nothing of the paused topic
            assert sorted(all_ids(a)) == list(range(10))

            def paused_with_lag() -> bool:
                topic = api.get(f"/v1/admin/ingest/jobs/{job}").json()["status"]["topics"]["a" + u]
                return topic["state"] == "paused" and topic["lag_records"] == 10 and topic["lag_seconds"]

            wait_for(paused_with_lag)
            topic = api.get(f"/v1/admin/ingest/jobs/{job}").json()["status"]["topics"]["a" + u]
            assert 3600 <= topic["lag_seconds"] < 3900, topic
            assert job in [j["job"] for j in api.get("/v1/admin/ingest/jobs").json()]
            assert job not in [
                j["job"] for j in httpx.get(srv.url + "/v1/admin/ingest/jobs", headers=auth(other)).json()
            ]
            page = httpx.get(
                srv.url + "/ui/fragment", headers=auth(srv.token("read" + u, f"read:st{u}"))
            ).text
            row = page[page.index(f'data-topic="a{u}"') :].split("</tr>")[0]
            assert (
                'data-field="state" class="warn">paused<' in row and 'data-field="lag_seconds">1h 0' in row
            ), row
            metrics = httpx.get(f"http://127.0.0.1:{opts.metrics_port}/metrics").text
            labels = f'table="st{u}.a",topic="a{u}"'
            assert f"streampart_kafka_paused{{{labels}}} 1.0" in metrics, metrics
            assert f'streampart_kafka_lag{{partition="0",{labels}}} 10.0' in metrics, metrics
            assert f'streampart_kafka_rows_total{{table="st{u}.b"}} 20.0' in metrics, metrics
            cli(sqlite_catalog, "ingest", "resume", job, "a" + u)
            wait_for(lambda: len(all_ids(a)) == 20)
            wait_for(
                lambda: (
                    api.get(f"/v1/admin/ingest/jobs/{job}").json()["status"]["topics"]["a" + u]["lag_seconds"]
                    == 0
                )
            )
    finally:
        api.close()
        srv.close()
    assert sorted(all_ids(a)) == list(range(20)) and sorted(all_ids(b)) == list(range(100, 120))
    assert [r.outcome for r in sqlite_catalog.store.ingest_requests(job)] == [
        f"resumed topic a{u}",
        f"paused topic a{u}",
    ]


@pytest.mark.spark
@pytest.mark.process
def test_a_reset_skips_or_replays_explicitly_and_records_what_it_moved(
    spark, sqlite_catalog, kafka_broker
) -> None:
    """Resets from the CLI while the job runs: to latest while the topic is paused (its waiting records
    are skipped, on record), then to earliest (everything is read again: an explicit replay, so those
    rows land a second time). The other topic is untouched."""
    u = uid()
    a, b, job, opts = two_topics_job(sqlite_catalog, kafka_broker, u, "rs", "reset")

    def done(n: int) -> bool:
        return sum(r.done_at is not None for r in sqlite_catalog.store.ingest_requests(job)) == n

    with running(spark, sqlite_catalog, opts):
        kafka_broker.produce("a" + u, [rec(i) for i in range(10)])
        kafka_broker.produce("b" + u, [rec(i) for i in range(100, 105)])
        wait_for(lambda: len(all_ids(a)) == 10 and len(all_ids(b)) == 5)
        cli(sqlite_catalog, "ingest", "pause", job, "a" + u)
        wait_for(lambda: done(1))
        kafka_broker.produce("a" + u, [rec(i) for i in range(10, 20)])
        cli(sqlite_catalog, "ingest", "reset", job, "a" + u, "--to", "latest")
        kafka_broker.produce("b" + u, [rec(i) for i in range(105, 110)])  # a batch runs: the reset applies
        wait_for(lambda: done(2))
        cli(sqlite_catalog, "ingest", "resume", job, "a" + u)
        wait_for(lambda: done(3))
        kafka_broker.produce("a" + u, [rec(i) for i in range(20, 25)])
        wait_for(lambda: len(all_ids(a)) == 15)
        assert sorted(all_ids(a)) == [*range(10), *range(20, 25)]  # 10..19 skipped
        cli(sqlite_catalog, "ingest", "reset", job, "a" + u, "--to", "earliest")
        wait_for(lambda: len(all_ids(a)) == 40)
    ids = all_ids(a)
    assert sorted(set(ids)) == list(range(25))
    assert sorted(i for i in set(ids) if ids.count(i) == 2) == [*range(10), *range(20, 25)]
    assert sorted(all_ids(b)) == list(range(100, 110))
    outcomes = [r.outcome for r in sqlite_catalog.store.ingest_requests(job)]
    assert outcomes[0] == f"reset topic a{u} to earliest: a{u}-0 25 → 0 (25 records read again)"
    assert outcomes[2] == f"reset topic a{u} to latest: a{u}-0 10 → 20 (10 records skipped)"
    with pytest.raises(AssertionError, match="--to: takes earliest, latest"):
        cli(sqlite_catalog, "ingest", "reset", job, "a" + u, "--to", "yesterday")
