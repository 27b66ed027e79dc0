"""Calls to the Kafka brokers through kafka-python: bounded retries, and the driver's metadata client.

Every broker call is retried with exponential backoff a bounded number of times
(``fetchOffset.numRetries``, default 8; first pause ``fetchOffset.retryIntervalMs``, doubling up
to :data:`MAX_BACKOFF_S`), one warning per failed attempt; then :class:`KafkaUnavailableError`
names the bootstrap servers. The defaults ride out a broker outage of about a minute and a half
(a rolling restart, a failover), as Kafka Connect and Flink jobs do; nothing waits forever.

Consumers never join a group: the driver's :class:`OffsetClient` only asks for metadata and
offsets, the executors (:mod:`ingest.kafka.reader`) use ``assign`` + ``seek``: the source commits
nothing to Kafka, offsets belong to Spark's checkpoint (the ingest job's monitoring-only group is
:mod:`ingest.kafka.monitoring`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ingest.errors import KafkaUnavailableError
from ingest.kafka.offsets import TP, OffsetMap
from ingest.kafka.options import KafkaSourceOptions

log = logging.getLogger(__name__)

# kafka-python logs every failed connection attempt of its own at ERROR (about 20 lines per broker
# outage, from the driver and each Spark worker), beside the one warning per retry here. Quiet
# unless the application set a level for it itself.
_KAFKA_LOG = logging.getLogger("kafka")
if _KAFKA_LOG.level == logging.NOTSET:
    _KAFKA_LOG.setLevel(logging.CRITICAL)

T = TypeVar("T")

# Why 30 s: long enough that eight attempts span a broker restart or a controller failover
# (1+2+4+8+16+30+30 s ≈ 1.5 min of pauses), short enough that a job notices a recovered broker
# within half a minute.
MAX_BACKOFF_S = 30.0

# Why 1 s: Spark asks for the offsets several times in a row when a query starts (available-now
# target, initial, latest), and kafka-python refreshes metadata at most once per
# ``retry_backoff_ms`` (0.1 s), waiting out the rest: each listing of partitions would cost 0.1 s.
# Within a second they share one listing; a new topic or partition is seen by the next trigger.
LISTING_REUSED_S = 1.0


def retriable(exc: BaseException) -> bool:
    """Whether ``exc`` is a transient broker or network error, worth another attempt."""
    from kafka.errors import KafkaError

    if isinstance(exc, KafkaError):
        return bool(getattr(exc, "retriable", False))
    return isinstance(exc, (OSError, TimeoutError))


def with_retries(opts: KafkaSourceOptions, what: str, call: Callable[[], T], reset: Callable[[], None]) -> T:
    """``call()``, retried on transient broker errors with exponential backoff, a bounded number of times.

    ``reset`` runs after each failure (e.g. to drop a broken consumer). The last error becomes
    a :class:`KafkaUnavailableError` that names the bootstrap servers and the time spent.
    """
    attempts = max(1, opts.num_retries)
    delay = opts.retry_interval_ms / 1000
    started = time.monotonic()
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:
            if not retriable(exc):
                raise
            reset()
            if attempt == attempts:
                from kafka.errors import KafkaConnectionError, KafkaTimeoutError

                silent = isinstance(exc, (KafkaConnectionError, KafkaTimeoutError, OSError, TimeoutError))
                raise KafkaUnavailableError(
                    f"{what}: Kafka brokers at {opts.bootstrap_servers} (kafka.bootstrap.servers) "
                    f"{'did not answer' if silent else 'kept failing'} after {attempts} attempt(s) in "
                    f"{time.monotonic() - started:.1f} s: {type(exc).__name__}: {exc}"
                ) from exc
            log.warning(
                "%s failed (%s: %s); retry %d/%d in %.1f s",
                what,
                type(exc).__name__,
                exc,
                attempt,
                attempts - 1,
                delay,
            )
            time.sleep(delay)
            delay = min(max(delay * 2, 0.1), MAX_BACKOFF_S)
    raise AssertionError("unreachable")


def new_consumer(opts: KafkaSourceOptions) -> Any:
    """A kafka-python consumer with no group (used with assign/seek only)."""
    from kafka import KafkaConsumer

    return KafkaConsumer(**opts.kafka_config())


class OffsetClient:
    """Driver-side metadata: which partitions exist and their earliest/latest offsets.

    Holds one consumer (no group, never assigned) and re-creates it after a failure.

    :meth:`partitions` asks the brokers for fresh metadata, except within :data:`LISTING_REUSED_S`
    of its last answer.
    """

    def __init__(self, opts: KafkaSourceOptions) -> None:
        self.opts = opts
        self._consumer: Any = None
        self._listed: tuple[float, list[TP]] | None = None  # (time.monotonic(), partitions)

    def _get(self) -> Any:
        if self._consumer is None:
            self._consumer = new_consumer(self.opts)
        return self._consumer

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close(autocommit=False)

    def _call(self, what: str, fn: Callable[[Any], T]) -> T:
        return with_retries(self.opts, what, lambda: fn(self._get()), self.close)

    def partitions(self) -> list[TP]:
        """Every partition of the subscribed topics, from fresh metadata, sorted."""
        listed = self._listed
        if listed is not None and time.monotonic() - listed[0] < LISTING_REUSED_S:
            return list(listed[1])

        def discover(consumer: Any) -> list[TP]:
            names = consumer.topics()  # always a metadata round trip: sees new topics/partitions
            found: list[TP] = []
            for topic in sorted(names):
                if self.opts.subscribed(topic):
                    found.extend((topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ()))
            return found

        asked = time.monotonic()
        found = self._call("listing partitions", discover)
        self._listed = (asked, found)
        return list(found)

    def _offsets(self, what: str, tps: Sequence[TP], earliest: bool) -> OffsetMap:
        if not tps:
            return {}
        from kafka import TopicPartition

        timeout = int(self.opts.kafka_config().get("request_timeout_ms", 30_000))

        def fetch(consumer: Any) -> OffsetMap:
            keys = [TopicPartition(t, p) for t, p in tps]
            got = (consumer.beginning_offsets if earliest else consumer.end_offsets)(keys, timeout_ms=timeout)
            return {(k.topic, k.partition): int(v) for k, v in got.items()}

        return self._call(what, fetch)

    def earliest(self, tps: Sequence[TP]) -> OffsetMap:
        return self._offsets("fetching earliest offsets", tps, earliest=True)

    def latest(self, tps: Sequence[TP]) -> OffsetMap:
        """The end offsets: under read_committed (the default) the last stable offsets, which stop at
        the first open transaction."""
        return self._offsets("fetching latest offsets", tps, earliest=False)

    def at_time(self, tps: Sequence[TP], ms: int) -> OffsetMap:
        """Per partition the first offset whose record's timestamp is at or after ``ms`` (epoch
        milliseconds); the end offset where none is."""
        if not tps:
            return {}
        from kafka import TopicPartition

        def fetch(consumer: Any) -> OffsetMap:
            got = consumer.offsets_for_times({TopicPartition(t, p): ms for t, p in tps})
            return {(k.topic, k.partition): int(v.offset) for k, v in got.items() if v is not None}

        found = self._call("looking up offsets by time", fetch)
        ends = self.latest([tp for tp in tps if tp not in found])
        return {tp: found.get(tp, ends.get(tp, 0)) for tp in tps}

    @property
    def read_committed(self) -> bool:
        return self.opts.kafka_config().get("isolation_level") == "read_committed"

    def high_watermarks(self, tps: Sequence[TP]) -> OffsetMap:
        """The end offsets whatever the transactions (read_uncommitted), from a consumer of its own."""
        if not self.read_committed:
            return self.latest(tps)
        config = {**self.opts.consumer_config, "isolation_level": "read_uncommitted"}
        other = OffsetClient(dataclasses.replace(self.opts, consumer_config=config))
        try:
            return other.latest(tps)
        finally:
            other.close()
