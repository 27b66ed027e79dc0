"""``streampart dev broker`` and ``streampart dev produce``, as a user runs them: real processes.

The broker is the CLI's own process (not the ``kafka_broker`` fixture); what ``dev produce`` sent
is read back with kafka-python, an independent client, offsets and all.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ingest.kafka.devbroker import free_port

pytestmark = pytest.mark.process

_SCRIPT = Path(sys.executable).parent / "streampart"
COMMAND = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "streampart.cli"]
READY = "Kafka broker (development only, memory storage) on 127.0.0.1:{port}"


def _env(**extra: str) -> dict[str, str]:
    return (
        {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")} | {"COLUMNS": "250"} | extra
    )


def run(*args: str | Path, stdin: str | None = None, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        [*COMMAND, *map(str, args)], input=stdin, capture_output=True, text=True, timeout=timeout,
        env=env or _env(), stdin=None if stdin is not None else subprocess.DEVNULL,
    )  # fmt: skip


def assert_user_error(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit status 1 and one ``error:`` line, the last, naming the fault; no traceback."""
    context = f"{done.args}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert done.returncode == 1, context
    assert "Traceback" not in done.stderr + done.stdout, context
    assert done.stderr.count("error:") == 1, context
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), context
    for fragment in fragments:
        assert fragment in last, f"{fragment!r} not in the message\n{context}"


@dataclass
class DevBroker:
    proc: subprocess.Popen[str]
    port: int
    line: str

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def terminate(self, sig: int = signal.SIGTERM) -> tuple[int, str, str]:
        """Send ``sig``; the exit status and the rest of stdout and stderr."""
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, err


def start_broker(*args: str) -> DevBroker:
    """``streampart dev broker --port FREE ARGS`` in a process; returns once it printed its line."""
    port = free_port()
    proc = subprocess.Popen(
        [*COMMAND, "dev", "broker", "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=_env(),
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "" if it exited: the assertion below shows why
    if not line.startswith(READY.format(port=port)):
        proc.kill()
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"dev broker did not start: {line}{out}\nstderr: {err}")
    return DevBroker(proc, port, line.strip())


@pytest.fixture(scope="module")
def broker() -> Iterator[DevBroker]:
    """One ``streampart dev broker`` for the module, with topic t of 2 partitions."""
    started = start_broker("--topic", "t:2", "--topic", "single")
    yield started
    if started.proc.poll() is None:
        started.terminate()


def read_topic(bootstrap: str, topic: str) -> dict[int, list[Any]]:
    """Every record of ``topic`` by partition, read from offset 0 to the end offset each reports;
    fails unless the records end exactly there (a broker that under-reports an end offset hands
    out records past it, in the batch that holds the last one it reported)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        ends = consumer.end_offsets(parts)
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        got: dict[int, list[Any]] = {tp.partition: [] for tp in parts}
        while any(len(got[tp.partition]) < ends[tp] for tp in parts):
            polled = consumer.poll(timeout_ms=10_000)
            assert polled, f"no more records, read {[len(v) for v in got.values()]} of {ends}"
            for tp, records in polled.items():
                got[tp.partition].extend(records)
        for tp in parts:  # offsets 0…end-1, none missing, none past the end reported
            assert [r.offset for r in got[tp.partition]] == list(range(ends[tp])), (tp, ends)
        return got
    finally:
        consumer.close(autocommit=False)


def test_the_broker_line_names_its_address_and_topics(broker: DevBroker) -> None:
    assert broker.line == (
        f"Kafka broker (development only, memory storage) on 127.0.0.1:{broker.port}, "
        "topics t (2 partitions), single (1 partition) — Ctrl-C stops it"
    )


def test_produce_sends_each_line_once_and_the_end_offsets_count_them(
    broker: DevBroker, tmp_path: Path
) -> None:
    lines = [json.dumps({"id": i, "user": f"u{i % 3}"}) for i in range(40)]
    source = tmp_path / "t.jsonl"
    source.write_text("\n".join(lines[:20]) + "\n\n" + "\n".join(lines[20:]) + "\n")  # a blank line: skipped

    done = run("dev", "produce", "t", source, "--bootstrap", broker.bootstrap)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"sent 40 records to topic t (2 partitions) at {broker.bootstrap}"
    got = read_topic(broker.bootstrap, "t")
    assert set(got) == {0, 1}
    assert all(r.key is None for records in got.values() for r in records)
    assert sorted(r.value.decode() for rs in got.values() for r in rs) == sorted(lines)
    in_order = [json.loads(r.value)["id"] for r in got[0]]
    assert in_order == sorted(in_order)  # a partition keeps the file's order


def test_produce_keys_records_by_a_field_and_reads_standard_input(broker: DevBroker) -> None:
    lines = [json.dumps({"id": i, "user": f"u{i % 3}"}) for i in range(9)] + ['{"id": 9}']

    done = run("dev", "produce", "keyed", "-", "--bootstrap", broker.bootstrap, "--key-field", "user",
               "--partitions", "3", stdin="\n".join(lines) + "\n")  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"sent 10 records to topic keyed (3 partitions) at {broker.bootstrap}"
    assert "created topic keyed (3 partitions)" in done.stderr
    got = read_topic(broker.bootstrap, "keyed")
    assert len(got) == 3
    keys = {json.loads(r.value)["id"]: r.key for rs in got.values() for r in rs}
    assert keys == {i: f"u{i % 3}".encode() for i in range(9)} | {9: None}  # no field: no key
    for key in (b"u0", b"u1", b"u2"):
        assert len({p for p, rs in got.items() for r in rs if r.key == key}) == 1  # one key, one partition


def test_produce_to_an_existing_topic_keeps_its_partitions(broker: DevBroker, tmp_path: Path) -> None:
    source = tmp_path / "one.jsonl"
    source.write_text('{"id": 1}\n')

    done = run("dev", "produce", "single", source, "--bootstrap", broker.bootstrap, "--partitions", "4")

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"sent 1 record to topic single (1 partition) at {broker.bootstrap}"
    assert "topic single exists with 1 partition: --partitions 4 is ignored" in done.stderr
    assert [r.value for r in read_topic(broker.bootstrap, "single")[0]] == [b'{"id": 1}']


def test_produce_refuses_bad_input_in_one_line(broker: DevBroker, tmp_path: Path) -> None:
    assert_user_error(
        run("dev", "produce", "t", tmp_path / "missing.jsonl", "--bootstrap", broker.bootstrap),
        f"file {tmp_path / 'missing.jsonl'} does not exist",
    )
    assert_user_error(run("dev", "produce", "a/b", "-", stdin="{}\n"), "'a/b' is not a Kafka topic name")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"id": 1, "user": "a"}\n[1, 2]\n{"id": 3, "user": "c"}\n')
    assert_user_error(
        run("dev", "produce", "mixed", mixed, "--bootstrap", broker.bootstrap, "--key-field", "user"),
        "line 2 is not a JSON object, and --key-field user needs one (1 record before it was sent)",
    )
    assert [r.value for r in read_topic(broker.bootstrap, "mixed")[0]] == [b'{"id": 1, "user": "a"}']


def test_produce_to_no_broker_says_none_answered(tmp_path: Path) -> None:
    with socket.socket() as nobody:  # a port bound but never listening: connections are refused
        nobody.bind(("127.0.0.1", 0))
        port = nobody.getsockname()[1]
        done = run("dev", "produce", "t", "-", "--bootstrap", f"127.0.0.1:{port}", stdin="{}\n")
    assert_user_error(
        done, f"no Kafka broker answered at 127.0.0.1:{port} within 5 s", "streampart dev broker"
    )


def test_a_taken_port_is_one_error_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run("dev", "broker", "--port", str(port))
    assert_user_error(done, f"cannot listen on 127.0.0.1:{port}", "--port")


def test_bad_topics_are_refused_before_the_broker_starts() -> None:
    assert_user_error(run("dev", "broker", "--topic", "t:0"), "--topic takes NAME[:PARTITIONS]")
    assert_user_error(run("dev", "broker", "--topic", "t", "--topic", "t:2"), "--topic t is given twice")


def test_a_topic_a_client_made_first_keeps_its_partitions_and_says_so(
    kafka_broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``dev produce`` right after ``dev broker --topic early:3 &`` may make the topic first."""
    from streampart.cli.dev import _create_topic
    from streampart.cli.output import TextOutput

    kafka_broker.create_topic("early", partitions=1)

    assert _create_topic(TextOutput(), kafka_broker.bootstrap, "early", 3) == 1
    assert "topic early was made by a client first, with 1 partition" in capsys.readouterr().err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_broker_cleanly(sig: int) -> None:
    started = start_broker()

    code, out, err = started.terminate(sig)

    assert code == 0, err
    assert "Traceback" not in err
    assert out.strip() == "stopped the Kafka broker (its topics and records are gone: memory storage)"
    with socket.socket() as again:  # the broker process is gone with it: its port is free
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", started.port))


@pytest.mark.spark
def test_a_new_user_ingests_what_they_produced(broker: DevBroker, tmp_path: Path) -> None:
    """The guide's way to try Kafka ingest (docs/guides/kafka.md): dev broker, dev produce, ingest."""
    env = _env(STREAMPART_WAREHOUSE=str(tmp_path / "wh"))
    source = tmp_path / "clicks.jsonl"
    clicks = [{"id": i, "ts": f"2026-11-21T10:{i:02d}:00Z", "page": "/"} for i in range(30)]
    source.write_text("".join(json.dumps(c) + "\n" for c in clicks) + '{"id": "x"\n')  # one malformed
    created = run("table", "create", "shop.clicks", "--schema", "id BIGINT, ts TIMESTAMP, page STRING",
                  "--time-column", "ts", "--roll-every", "1h", "--dead-letter", env=env)  # fmt: skip
    assert created.returncode == 0, created.stderr
    sent = run(
        "dev", "produce", "clicks", source, "--bootstrap", broker.bootstrap, "--partitions", "2", env=env
    )
    assert sent.returncode == 0, sent.stderr

    ingested = run("ingest", "kafka", "shop.clicks", "--bootstrap", broker.bootstrap, "--topic", "clicks",
                   "--available-now", env=env, timeout=600)  # fmt: skip

    assert ingested.returncode == 0, ingested.stderr[-3000:]
    rows = run("table", "read", "shop.clicks", "--limit", "0", "--json", env=env)
    assert rows.returncode == 0, rows.stderr
    assert sorted(json.loads(line)["id"] for line in rows.stdout.splitlines()) == list(range(30))
    dead = run("table", "read", "shop.clicks__dead_letter", "--json", env=env)
    assert dead.returncode == 0, dead.stderr
    assert len(dead.stdout.splitlines()) == 1
