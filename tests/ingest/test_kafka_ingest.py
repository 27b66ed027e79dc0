"""Kafka → table ingest, end to end: a real broker, real Spark, real chunk commits and rolls."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pydantic import ValidationError

from ingest.config import ChunkConfig
from ingest.errors import IngestQueryError, KafkaConfigError
from ingest.kafka.job import KafkaIngestOptions, run_kafka_ingest, start_kafka_ingest
from ingest.kafka.options import source_options
from metastore.catalog import Catalog
from metastore.delta.layout import partition_dir
from metastore.delta.metadata import schema_at
from metastore.models import ChunkState, Mode, PartitionState, TableKind
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import all_ids, delta_rows, duplicates

TS = "2026-11-21T10:15:00Z"


def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def event(i: int, ts: str = TS, **extra: Any) -> dict[str, Any]:
    return {"value": json.dumps({"id": i, "ts": ts, "msg": f"event {i}", **extra}), "partition": i % 3}


def options(catalog: Catalog, broker: Any, topic: str, **kw: Any) -> KafkaIngestOptions:
    base: dict[str, Any] = {
        "table": "ns.events",
        "bootstrap": broker.bootstrap,
        "topic": topic,
        "available_now": True,
        "checkpoint": str(Path(catalog.warehouse.root).parent / f"ckpt-{topic}"),
    }
    return KafkaIngestOptions(**{**base, **kw})


# -- options (no broker, no Spark) --------------------------------------------------------------
@pytest.mark.parametrize("spec", ["soon", "[]", '{"t": [0]}', '{"t": {"x": 1}}', '{"t": {"0": -3}}'])
def test_starting_offsets_follow_the_sources_rule(spec: str) -> None:
    """The job refuses, before any query starts, exactly what the source refuses (one rule)."""
    with pytest.raises(ValidationError, match="must be earliest, latest or JSON like"):
        KafkaIngestOptions(table="ns.events", bootstrap="127.0.0.1:9092", topic="t", starting_offsets=spec)
    with pytest.raises(KafkaConfigError, match="option startingOffsets must be earliest, latest or JSON"):
        source_options("127.0.0.1:9092", "t", starting_offsets=spec)


def test_the_jobs_source_options_are_built_as_the_sources() -> None:
    opts = KafkaIngestOptions(
        table="ns.events",
        bootstrap="127.0.0.1:9092",
        topic="a, b",
        starting_offsets='{"a": {"0": -2}, "b": {"0": 7}}',
        max_offsets_per_trigger=500,
        fail_on_data_loss=False,
        source_options={"minPartitions": "4", "failOnDataLoss": "true"},  # extra options win
    )
    expected = source_options(
        "127.0.0.1:9092",
        ["a", "b"],
        starting_offsets='{"a": {"0": -2}, "b": {"0": 7}}',
        max_offsets_per_trigger=500,
        fail_on_data_loss=False,
        minPartitions=4,
        failOnDataLoss=True,
    )
    del expected["subscribe"]  # the job's control file says what is subscribed (routes may change)
    assert opts.source_reader_options("/ckpt/control.json") == {
        **expected,
        "streampart.controlFile": "/ckpt/control.json",
        "streampart.emit": "ranges",  # the batch's tasks read them
    }
    assert opts.routes().subscription() == {"topics": ["a", "b"], "pattern": None}


def test_available_now_lands_every_record_exactly_once(spark, sqlite_catalog, kafka_broker) -> None:
    table = make_table(sqlite_catalog, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=3)
    kafka_broker.produce(topic, [event(i) for i in range(600)])
    opts = options(sqlite_catalog, kafka_broker, topic, max_offsets_per_trigger=250)

    batches = run_kafka_ingest(spark, sqlite_catalog, opts)

    assert batches == 3  # 600 records at 250 per trigger
    rows = delta_rows(table, columns="id, msg")
    assert sorted(rows.column("id").to_pylist()) == list(range(600))
    for i, m in zip(rows.column("id").to_pylist(), rows.column("msg").to_pylist(), strict=True):
        assert m == f"event {i}"
    chunks = sqlite_catalog.store.list_chunks(table.id, [ChunkState.COMMITTED])
    assert len(chunks) == 3 and all(c.idempotency_key.startswith("kafka:") for c in chunks)

    # a second run finds nothing new and adds nothing
    assert run_kafka_ingest(spark, sqlite_catalog, opts) == 0
    assert sorted(all_ids(table)) == list(range(600))

    # new records are picked up from where the checkpoint left off
    kafka_broker.produce(topic, [event(i) for i in range(600, 650)])
    assert run_kafka_ingest(spark, sqlite_catalog, opts) == 1
    assert sorted(all_ids(table)) == list(range(650))


def test_malformed_records_go_to_the_dead_letter_table_good_ones_commit(
    spark, sqlite_catalog, kafka_broker
) -> None:
    table = make_table(sqlite_catalog, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=1)
    bad = {
        b"{not json": "invalid JSON",
        json.dumps({"id": "seven", "ts": TS}).encode(): "column 'id'",
        json.dumps({"id": 7}).encode(): "column 'ts' is required",
        json.dumps({"id": 8, "ts": TS, "msg": "x" * 5000}).encode(): "exceeds 1000",
        b"\xff\xfe garbage": "invalid UTF-8",
        b"[1, 2]": "expected a JSON object",
        # valid JSON nested 100,000 deep: json.loads' RecursionError stopped the stream for good
        b'{"id": 9, "msg": ' + b"[" * 100_000 + b"]" * 100_000 + b"}": "nested more than 1024 levels",
    }
    records: list[dict[str, Any]] = [
        {"value": json.dumps({"id": i, "ts": TS}), "partition": 0} for i in range(5)
    ]
    records += [{"value": raw, "partition": 0} for raw in bad]
    records += [{"value": json.dumps({"id": i, "ts": TS}), "partition": 0} for i in range(5, 10)]
    offsets = kafka_broker.produce(topic, records)

    run_kafka_ingest(
        spark, sqlite_catalog, options(sqlite_catalog, kafka_broker, topic), ChunkConfig(max_value_bytes=1000)
    )

    assert sorted(all_ids(table)) == list(range(10))
    dlq = sqlite_catalog.companion(table, TableKind.DEAD_LETTER)
    dead = delta_rows(dlq, columns="source, position, reason, raw").to_pylist()
    assert len(dead) == len(bad)
    by_raw = {d["raw"]: d for d in dead}
    for k, (raw, reason) in enumerate(bad.items()):
        entry = by_raw[raw]  # the exact bytes that arrived
        assert reason in entry["reason"], entry
        assert entry["source"] == f"{topic}/0"
        assert entry["position"] == offsets[5 + k][1]  # the Kafka offset of that record


def test_csv_records(spark, sqlite_catalog, kafka_broker) -> None:
    table = make_table(sqlite_catalog, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=1)
    kafka_broker.produce(
        topic,
        [f'{i},{TS},"hello, {i}"' for i in range(20)]
        + [f"20,{TS},{'x' * 200_000}"]  # over the csv module's 128 KiB field limit (a csv.Error before)
        + ["1,2"],  # the last one lacks a field
    )
    run_kafka_ingest(spark, sqlite_catalog, options(sqlite_catalog, kafka_broker, topic, format="csv"))
    rows = delta_rows(table, columns="id, msg").to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(21))
    assert {r["msg"] for r in rows} == {f"hello, {i}" for i in range(20)} | {"x" * 200_000}
    dlq = sqlite_catalog.companion(table, TableKind.DEAD_LETTER)
    assert [d["reason"] for d in delta_rows(dlq, columns="reason").to_pylist()] == [
        "expected 3 CSV fields (id, ts, msg), got 2"
    ]


@pytest.fixture
def local_time_zone_not_utc(monkeypatch):
    # the driver's local zone must not leak into partition values (Spark's collect() turns
    # timestamps into naive local datetimes)
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("local_time_zone_not_utc")
def test_event_time_batch_spanning_partitions_commits_atomically(spark, sqlite_catalog, kafka_broker) -> None:
    table = make_table(sqlite_catalog, mode=Mode.EVENT_TIME, lateness="1h", dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=3)
    hours = ["2026-11-21T08:10:00Z", "2026-11-21T09:20:00Z", "2026-11-21T10:30:00Z"]
    kafka_broker.produce(topic, [event(i, ts=hours[i % 3]) for i in range(90)])
    before = int(sqlite_catalog.warehouse.load(table).version())

    assert run_kafka_ingest(spark, sqlite_catalog, options(sqlite_catalog, kafka_broker, topic)) == 1

    after = int(sqlite_catalog.warehouse.load(table).version())
    assert after == before + 1  # one batch, one Delta commit, three partitions
    (chunk,) = sqlite_catalog.store.list_chunks(table.id, [ChunkState.COMMITTED])
    assert len(chunk.partitions) == 3 and chunk.rows == 90
    rows = delta_rows(table, columns="id, ts_period").to_pylist()
    for r in rows:
        assert r["ts_period"].hour == int(hours[r["id"] % 3][11:13])


def test_not_without_a_dead_letter_table(spark, sqlite_catalog, kafka_broker) -> None:
    make_table(sqlite_catalog)
    with pytest.raises(Exception, match="no dead-letter table"):
        run_kafka_ingest(spark, sqlite_catalog, options(sqlite_catalog, kafka_broker, topic_name()))


def test_rolls_while_the_stream_runs_lose_and_duplicate_nothing(spark, sqlite_catalog, kafka_broker) -> None:
    table = make_table(sqlite_catalog, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=3)
    total = 1500
    opts = options(sqlite_catalog, kafka_broker, topic, available_now=False, trigger="1s")
    query = start_kafka_ingest(spark, sqlite_catalog, opts)
    stop = threading.Event()

    def produce() -> None:
        for start in range(0, total, 100):
            kafka_broker.produce(topic, [event(i) for i in range(start, start + 100)])
            if stop.wait(0.4):
                return

    producer = threading.Thread(target=produce)
    producer.start()
    roller = Roller(sqlite_catalog)
    rolled = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            time.sleep(1.5)
            rolled += roller.roll_table(table, force=True)
            if not producer.is_alive() and len(all_ids(table)) >= total:
                break
            assert query.isActive, query.exception()
    finally:
        stop.set()
        producer.join()
        query.stop()

    ids = all_ids(table)
    assert duplicates(ids) == [] and sorted(ids) == list(range(total))
    standard = sqlite_catalog.store.list_partitions(table.id, [PartitionState.STANDARD])
    assert len(rolled) >= 2 and len(standard) == len([r for r in rolled if r is not None])
    # each standard partition holds exactly the chunks committed into it while it was open,
    # and a plain Parquet reader of its directory sees exactly those rows
    committed = sqlite_catalog.store.list_chunks(table.id, [ChunkState.COMMITTED])
    for p in standard:
        expected = sum(c.rows for c in committed if p.value in c.partitions)
        directory = Path(table.location) / partition_dir(table, p.value)
        assert pq.read_table(directory).num_rows == expected == p.rows


# -- crashes ------------------------------------------------------------------------------
def ingest_cmd(catalog: Catalog, bootstrap: str, topic: str, checkpoint: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "streampart.cli",
        "--warehouse",
        str(catalog.warehouse.root),
        "--metastore",
        str(catalog.store.url),
        "ingest",
        "kafka",
        "ns.events",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--checkpoint",
        str(checkpoint),
        *extra,
    ]


# Where the ingest process dies (its driver, with Spark's JVM below it), then restarts:
CRASHES = [
    # a task staged files, the driver recorded them, no commit: the replay restages, commits
    "chunk-after-write@2",
    # COMMITTING recorded, no Delta commit: the replay takes the commit over at once
    "chunk-before-delta-commit@3",
    # Delta commit landed, metastore not told: the replay finds it in the log, adds nothing
    "chunk-after-delta-commit@2",
    # and SIGKILL at random instants, from outside, while producers keep producing
    "random",
    "random",
]


def run_until_killed(
    cmd: list[str], env: dict[str, str], crash: str, catalog: Any, table: Any, rng: random.Random
) -> tuple[subprocess.Popen[bytes], bytes]:
    """Run the ingest job ``cmd`` until it is SIGKILLed: at ``crash`` (a crash point), or, for
    ``"random"``, from outside at a random instant once it committed a chunk. The process and its
    stderr."""
    if crash == "random":
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # wait until it commits something, then kill it at a random instant
        seen = len(catalog.store.list_chunks(table.id, [ChunkState.COMMITTED]))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if len(catalog.store.list_chunks(table.id, [ChunkState.COMMITTED])) > seen:
                break
            time.sleep(0.2)
        time.sleep(rng.uniform(0.0, 2.5))
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    else:
        proc = subprocess.Popen(
            cmd,
            env={**env, "STREAMPART_CRASHPOINT": crash},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _, err = proc.communicate(timeout=240)
    return proc, err


@pytest.mark.spark
def test_ingest_killed_again_and_again_lands_every_record_once(
    sqlite_catalog, kafka_broker, tmp_path
) -> None:
    table = make_table(sqlite_catalog, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=3)
    checkpoint = tmp_path / "checkpoint"
    produced = Counter[int]()
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            kafka_broker.produce(topic, [event(k) for k in range(i, i + 50)])
            produced.update(range(i, i + 50))
            i += 50
            stop.wait(0.2)

    producer = threading.Thread(target=produce)
    producer.start()
    rng = random.Random(4196)
    outcomes = []
    try:
        for crash in CRASHES:
            env = {**os.environ}
            cmd = ingest_cmd(
                sqlite_catalog,
                kafka_broker.bootstrap,
                topic,
                checkpoint,
                "--trigger",
                "1s",
                "--max-offsets-per-trigger",
                "120",
            )
            proc, err = run_until_killed(cmd, env, crash, sqlite_catalog, table, rng)
            outcomes.append((crash, proc.returncode))
            assert proc.returncode == -signal.SIGKILL, (crash, cmd, err.decode()[-1000:])
            # whatever was committed so far is there exactly once
            assert duplicates(all_ids(table)) == []
    finally:
        stop.set()
        producer.join()
    # a final clean run drains the topic
    final = subprocess.run(
        ingest_cmd(sqlite_catalog, kafka_broker.bootstrap, topic, checkpoint, "--available-now"),
        capture_output=True,
        timeout=300,
    )
    assert final.returncode == 0, final.stderr.decode()[-2000:]
    ids = all_ids(table)
    assert duplicates(ids) == []
    assert set(ids) == set(produced), (len(ids), len(produced), outcomes)
    # no chunk is left half-way
    states = Counter(c.state for c in sqlite_catalog.store.list_chunks(table.id))
    assert set(states) <= {ChunkState.COMMITTED, ChunkState.RESERVED}, states


def test_metrics_port_and_consumer_group_show_offsets_and_lag(spark, sqlite_catalog, kafka_broker) -> None:
    """/metrics shows what was committed per partition, and the consumer group holds the same offsets
    (kafka-consumer-groups reads them), so lag is visible outside the job."""
    import urllib.request

    from kafka import KafkaConsumer, TopicPartition

    from ingest.kafka.devbroker import free_port

    table = make_table(sqlite_catalog, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=3)
    kafka_broker.produce(topic, [event(i) for i in range(90)] + [{"value": b"not json", "partition": 0}])
    port = free_port()
    opts = options(
        sqlite_catalog,
        kafka_broker,
        topic,
        available_now=False,
        trigger="1s",
        metrics_port=port,
        metrics_host="127.0.0.1",
    )
    stop = threading.Event()
    box: dict[str, Any] = {}
    runner = threading.Thread(
        target=lambda: box.update(n=run_kafka_ingest(spark, sqlite_catalog, opts, should_stop=stop.is_set))
    )
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while len(all_ids(table)) < 90 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert sorted(all_ids(table)) == list(range(90))
        time.sleep(2.5)  # a trigger or two more: the latest offsets get reported
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        stop.set()
        runner.join(timeout=120)
    ends = kafka_broker.end_offsets(topic)
    labels = 'table="ns.events"'
    assert f"streampart_kafka_records_total{{{labels}}} 91.0" in text, text
    assert f"streampart_kafka_rows_total{{{labels}}} 90.0" in text, text
    assert f"streampart_kafka_dead_letters_total{{{labels}}} 1.0" in text, text
    for p, end in ends.items():
        tp = f'partition="{p}",{labels},topic="{topic}"'  # labels in sorted order
        assert f"streampart_kafka_committed_offset{{{tp}}} {float(end)}" in text, text
        assert f"streampart_kafka_latest_offset{{{tp}}} {float(end)}" in text, text
    assert "streampart_kafka_lag{" in text and all(
        line.endswith(" 0.0") for line in text.splitlines() if line.startswith("streampart_kafka_lag{")
    ), text
    group = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, group_id="streampart-ns.events")
    try:
        assert {p: group.committed(TopicPartition(topic, p)) for p in ends} == ends
    finally:
        group.close(autocommit=False)


# SIGTERM to the job's own process (docker stop, Kubernetes), and to its whole process group
# (a service manager, `timeout`, `kill -- -PGID`), which reaches Spark's JVM unless it is shielded.
@pytest.mark.spark
@pytest.mark.parametrize("to_group", [False, True], ids=["process", "process-group"])
def test_sigterm_ends_the_job_quietly_and_loses_nothing(
    sqlite_catalog, kafka_broker, tmp_path, to_group
) -> None:
    table = make_table(sqlite_catalog, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=3)
    kafka_broker.produce(topic, [event(i) for i in range(300)])
    checkpoint = tmp_path / "checkpoint"
    cmd = ingest_cmd(
        sqlite_catalog,
        kafka_broker.bootstrap,
        topic,
        checkpoint,
        "--trigger",
        "1s",
        "--max-offsets-per-trigger",
        "60",
    )
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # until the second batch lands; batches follow each other from here on
        seen.append(line)
        if sum("→ chunk" in s for s in seen) == 2:
            break
    if to_group:
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    proc.wait(timeout=240)
    err = "".join(seen) + rest
    assert proc.returncode == 0, err[-3000:]
    for noise in ("Traceback", "Exception", "Error", "WARN", "ERROR"):
        assert noise not in rest, rest[-3000:]
    assert "stopped after" in rest
    assert duplicates(all_ids(table)) == []
    # the next run picks up where this one stopped
    done = subprocess.run(
        ingest_cmd(sqlite_catalog, kafka_broker.bootstrap, topic, checkpoint, "--available-now"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(all_ids(table)) == list(range(300))


# -- broker trouble -------------------------------------------------------------------------
@pytest.mark.spark
@pytest.mark.process
def test_broker_unreachable_at_start_is_a_clear_error(sqlite_catalog, tmp_path) -> None:
    from ingest.kafka.devbroker import free_port

    make_table(sqlite_catalog, dead_letter=True)
    port = free_port()
    # two attempts, not the default eight: the error is the same, found in seconds rather than minutes
    # (the default's patience is what the outage tests below ride on)
    retries = ("--option", "fetchOffset.numRetries=2", "--option", "fetchOffset.retryIntervalMs=100")
    proc = subprocess.run(
        ingest_cmd(
            sqlite_catalog, f"127.0.0.1:{port}", "nothing", tmp_path / "ckpt", "--available-now", *retries
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and f"127.0.0.1:{port}" in last, proc.stderr[-3000:]
    assert "after 2 attempt(s)" in last, last
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("option", "named"),
    [
        ("fetchOffset.numRetries=abc", "option fetchOffset.numRetries must be an integer, got 'abc'"),
        ("no-equals-sign", "--option takes KEY=VALUE"),
    ],
)
@pytest.mark.process
def test_a_bad_source_option_is_one_error_before_spark_starts(
    sqlite_catalog, tmp_path, option, named
) -> None:
    make_table(sqlite_catalog, dead_letter=True)
    proc = subprocess.run(
        ingest_cmd(sqlite_catalog, "127.0.0.1:9", "t", tmp_path / "ckpt", "--option", option),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()  # one line, before the job (and its Spark) started
    assert len(lines) == 1 and lines[0].startswith(f"error: {named}"), proc.stderr


def test_broker_lost_mid_stream_fails_clearly_and_loses_nothing(spark, sqlite_catalog, tmp_path) -> None:
    from ingest.kafka.devbroker import EmbeddedBroker

    table = make_table(sqlite_catalog, dead_letter=True)
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    topic = topic_name()
    try:
        broker.create_topic(topic, partitions=3)
        broker.produce(topic, [event(i) for i in range(100)])
        opts = options(
            sqlite_catalog,
            broker,
            topic,
            available_now=False,
            trigger="1s",
            source_options={
                "fetchOffset.numRetries": "2",
                "fetchOffset.retryIntervalMs": "200",
                "kafkaConsumer.pollTimeoutMs": "5000",
            },
        )
        box: dict[str, Any] = {}
        stop = threading.Event()

        def run() -> None:
            try:
                box["batches"] = run_kafka_ingest(spark, sqlite_catalog, opts, should_stop=stop.is_set)
            except IngestQueryError as exc:
                box["error"] = exc

        runner = threading.Thread(target=run)
        runner.start()
        deadline = time.monotonic() + 120
        while len(all_ids(table)) < 100 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert sorted(all_ids(table)) == list(range(100))
        broker.stop()
        runner.join(timeout=180)
        stop.set()
        runner.join(timeout=60)
        assert not runner.is_alive()
        assert "error" in box, box  # never a silent stall
        assert broker.bootstrap in str(box["error"]), str(box["error"])
        assert sorted(all_ids(table)) == list(range(100))  # nothing committed is lost
    finally:
        broker.stop()


class Outage:
    """A TCP hop in front of a broker (which advertises the hop's address): ``down()`` drops every
    connection and refuses new ones, as a broker that went away does; ``up()`` brings it back."""

    def __init__(self, target_port: int) -> None:
        from ingest.kafka.devbroker import free_port

        self.port, self.target = free_port(), target_port
        self.conns: list[Any] = []
        self.listener: Any = None
        self.up()

    def up(self) -> None:
        import socket

        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(64)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def down(self) -> None:
        import contextlib

        self.listener.close()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.close()
        self.conns.clear()

    def _accept(self, listener: Any) -> None:
        import socket

        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            self.conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: Any, dst: Any) -> None:
        import contextlib

        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.close()


def test_a_broker_outage_of_a_minute_is_ridden_out(spark, sqlite_catalog, tmp_path) -> None:
    """The default retry budget (no source options) outlasts a one-minute outage: the stream goes
    on where it stopped, and nothing is lost or doubled."""
    from ingest.kafka.devbroker import EmbeddedBroker, free_port

    table = make_table(sqlite_catalog, dead_letter=True)
    hop = Outage(free_port())
    broker = EmbeddedBroker(port=hop.target, advertised=f"127.0.0.1:{hop.port}", log_path=tmp_path / "t.log")
    broker.start()
    topic = topic_name()
    try:
        broker.create_topic(topic, partitions=3)
        broker.produce(topic, [event(i) for i in range(100)])
        opts = options(sqlite_catalog, broker, topic, available_now=False, trigger="1s")
        opts = opts.model_copy(update={"bootstrap": f"127.0.0.1:{hop.port}"})
        box: dict[str, Any] = {}
        stop = threading.Event()

        def run() -> None:
            try:
                box["batches"] = run_kafka_ingest(spark, sqlite_catalog, opts, should_stop=stop.is_set)
            except IngestQueryError as exc:
                box["error"] = exc

        runner = threading.Thread(target=run)
        runner.start()
        try:
            deadline = time.monotonic() + 120
            while len(all_ids(table)) < 100 and time.monotonic() < deadline:
                time.sleep(0.3)
            assert sorted(all_ids(table)) == list(range(100))
            hop.down()
            time.sleep(60)  # the outage
            hop.up()
            broker.produce(topic, [event(i) for i in range(100, 200)])
            deadline = time.monotonic() + 240
            while len(all_ids(table)) < 200 and time.monotonic() < deadline and runner.is_alive():
                time.sleep(0.5)
            assert "error" not in box, box
            assert sorted(all_ids(table)) == list(range(200))
        finally:
            stop.set()
            runner.join(timeout=240)
        assert not runner.is_alive()
        assert "error" not in box, box
        # Each failed attempt logs one line ("listing partitions failed (…); retry 3/7 in 4.0 s"),
        # from the process Spark runs the source's driver side in: it writes to the stderr the
        # session's JVM started with, which no fixture of this test can capture.
    finally:
        broker.stop()
        hop.down()


def test_late_rows_of_a_rejecting_table_become_dead_letters(spark, sqlite_catalog, kafka_broker) -> None:
    # A stream has no producer to answer "rejected": late rows become dead letters, the rest lands.
    from datetime import UTC, datetime

    table = make_table(sqlite_catalog, mode=Mode.EVENT_TIME, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=3)
    kafka_broker.produce(topic, [event(i, ts="2026-11-21T08:10:00Z") for i in range(10)])
    opts = options(sqlite_catalog, kafka_broker, topic)
    run_kafka_ingest(spark, sqlite_catalog, opts)
    Roller(sqlite_catalog).roll_table(table, now=datetime(2026, 11, 21, 9, 30, tzinfo=UTC))
    kafka_broker.produce(
        topic,
        [event(i, ts="2026-11-21T08:50:00Z") for i in range(10, 13)]  # the 08:00 partition is sealed
        + [event(i, ts="2026-11-21T09:40:00Z") for i in range(13, 20)],
    )

    run_kafka_ingest(spark, sqlite_catalog, opts)

    assert sorted(all_ids(table)) == [*range(10), *range(13, 20)]
    dead = delta_rows(
        sqlite_catalog.companion(table, TableKind.DEAD_LETTER), columns="reason, raw"
    ).to_pylist()
    assert sorted(json.loads(d["raw"])["id"] for d in dead) == [10, 11, 12]
    assert all(d["reason"].startswith("late: partition 2026-11-21T08:00:00Z") for d in dead), dead


def test_a_full_namespace_stops_the_stream_clearly_and_loses_nothing(
    spark, sqlite_catalog, kafka_broker
) -> None:
    """A batch that would pass its namespace's quota is refused whole: the ingest stops with an
    error naming the quota (never drops the batch); with the quota raised, the restarted ingest
    replays the batch and every record lands exactly once."""
    table = make_table(sqlite_catalog, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=3)
    kafka_broker.produce(topic, [event(i) for i in range(300)])
    opts = options(sqlite_catalog, kafka_broker, topic, max_offsets_per_trigger=100)
    assert run_kafka_ingest(spark, sqlite_catalog, opts.model_copy(update={"available_now": False}),
                            should_stop=lambda: bool(all_ids(table))) >= 1  # fmt: skip
    landed = len(all_ids(table))
    sqlite_catalog.store.alter_namespace("ns", quota_bytes=sqlite_catalog.store.committed_bytes("ns") + 10)
    with pytest.raises(IngestQueryError, match=r"QuotaExceededError: namespace ns is over its quota"):
        run_kafka_ingest(spark, sqlite_catalog, opts)
    assert len(all_ids(table)) == landed  # nothing more committed, nothing half-committed
    sqlite_catalog.store.alter_namespace("ns", quota_bytes=None)
    run_kafka_ingest(spark, sqlite_catalog, opts)
    ids = all_ids(table)
    assert sorted(ids) == list(range(300)) and not duplicates(ids)


def test_a_field_appearing_mid_stream_becomes_a_column_with_its_rows(
    spark, sqlite_catalog, kafka_broker
) -> None:
    """Schema evolution from data (issue 27) in the ingest job: new fields become columns in the commit
    of the micro-batch that brings them; tasks that inferred one field's type differently (integers in
    one Kafka partition, text in another) are staged again with the joined type (STRING)."""
    table = sqlite_catalog.schemas.set_evolution(make_table(sqlite_catalog, dead_letter=True), "add-columns")
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=2)
    opts = options(sqlite_catalog, kafka_broker, topic)
    kafka_broker.produce(topic, [{**event(i), "partition": i % 2} for i in range(10)])
    assert run_kafka_ingest(spark, sqlite_catalog, opts) == 1
    newer = [
        {"value": json.dumps({"id": i, "ts": TS, "coupon": f"c{i}", "tier": i if i % 2 == 0 else f"t{i}"}),
         "partition": i % 2}
        for i in range(10, 20)
    ]  # fmt: skip
    kafka_broker.produce(topic, newer)
    assert run_kafka_ingest(spark, sqlite_catalog, opts) == 1
    columns = schema_at(Path(table.location))
    assert [(c.name, c.type) for c in columns][-2:] in (
        [("coupon", "string"), ("tier", "string")],
        [("tier", "string"), ("coupon", "string")],
    )
    found = {r["id"]: r for r in DeltaTable(table.location).to_pyarrow_table().to_pylist()}
    assert sorted(found) == list(range(20))
    assert all(found[i]["coupon"] is None and found[i]["tier"] is None for i in range(10))
    assert [(found[i]["coupon"], found[i]["tier"]) for i in range(10, 20)] == [
        (f"c{i}", str(i) if i % 2 == 0 else f"t{i}") for i in range(10, 20)
    ]
    assert sqlite_catalog.table("ns.events").columns == columns
    [change] = sqlite_catalog.store.schema_changes(table.id)
    assert change.source.startswith("chunk:")
    assert change.version == int(DeltaTable(table.location).version())
