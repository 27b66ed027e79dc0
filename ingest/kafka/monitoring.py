"""What an operator watches of a running Kafka ingest: a ``/metrics`` port, and a consumer group.

Both are for monitoring only. The source of truth for what was ingested stays the chunks in the
metastore and the offsets in Spark's checkpoint; a failure here is logged and never stops or
slows the ingest.

* :class:`IngestMetrics` — Prometheus text on ``http://HOST:PORT/metrics`` (the CLI's
  ``--metrics-port``): per table the records, rows and dead letters committed; batches committed and
  the seconds of the last one; per partition the committed offset (the next one to read), the latest
  offset the brokers reported at the last trigger, and the lag between them; per topic the lag in
  seconds and whether it is paused.
* :class:`GroupCommitter` — after each chunk commit, the batch's end offsets are committed to a
  Kafka consumer group (``--consumer-group``, default ``streampart-NS.TABLE``), as Flink commits
  on checkpoint: ``kafka-consumer-groups --describe --group …`` then shows the lag of the job.
  The source itself never joins the group (no rebalances; offsets belong to the checkpoint).
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from ingest.kafka.offsets import OffsetMap, load_offsets

log = logging.getLogger(__name__)


def batch_offsets(checkpoint: str | Path, batch_id: int) -> dict[str, Any]:
    """The end offsets of ``batch_id`` as our source wrote them, markers (``$from``, ``$reset``)
    included, from Spark's offset log, where they are logged before the batch runs.

    The log file is ``v1``, the batch's metadata, then one line per source: ours is the only one.
    """
    lines = (Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()
    return dict(json.loads(lines[2])) if len(lines) > 2 else {}


def last_committed_batch(checkpoint: str | Path) -> int | None:
    """The newest batch Spark recorded as done in ``checkpoint`` (its commit log), None before any."""
    done = [int(f.name) for f in (Path(checkpoint) / "commits").glob("*") if f.name.isdigit()]
    return max(done, default=None)


def batch_end_offsets(checkpoint: str | Path, batch_id: int) -> OffsetMap:
    """The end offsets of ``batch_id`` (see :func:`batch_offsets`), per topic-partition."""
    return load_offsets(batch_offsets(checkpoint, batch_id))


class IngestMetrics:
    """The job's Prometheus metrics, in a registry of their own (one job per process).

    Counts per table the job wrote to (its routed tables; the job's dead-letter table for records no
    table took). The offset, lag and state series mirror the status the job publishes
    (:func:`ingest.kafka.steering.job_status`), labelled with the topic's table where its route
    names one (empty where a template or a record's field does).
    """

    def __init__(self, dead_letter_table: str) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.dead_letter_table = dead_letter_table
        self.registry = CollectorRegistry()
        labels = ["table"]
        tp = ["table", "topic", "partition"]
        topic = ["table", "topic"]
        r = self.registry
        self.records = Counter("streampart_kafka_records", "Kafka records committed", labels, registry=r)
        self.rows = Counter("streampart_kafka_rows", "Rows committed to the table", labels, registry=r)
        self.dead_letters = Counter(
            "streampart_kafka_dead_letters", "Records sent to the dead-letter table", labels, registry=r
        )
        self.batches = Counter("streampart_kafka_batches", "Micro-batches committed", registry=r)
        self.batch_seconds = Gauge(
            "streampart_kafka_last_batch_seconds", "Seconds the last batch took", registry=r
        )
        self.committed = Gauge(
            "streampart_kafka_committed_offset",
            "Next offset to read, committed with the last chunk",
            tp,
            registry=r,
        )
        self.latest = Gauge(
            "streampart_kafka_latest_offset", "Latest offset the brokers reported", tp, registry=r
        )
        self.lag = Gauge("streampart_kafka_lag", "Latest offset minus committed offset", tp, registry=r)
        self.lag_seconds = Gauge(
            "streampart_kafka_lag_seconds",
            "Age of the oldest record of the topic not ingested yet (0: none waiting)",
            topic,
            registry=r,
        )
        self.paused = Gauge("streampart_kafka_paused", "1 while the topic is paused", topic, registry=r)
        self.skipped_records = Gauge(
            "streampart_kafka_skipped_records",
            "Records skipped because retention deleted them before they were read (--no-fail-on-data-loss)",
            ["topic", "partition"],
            registry=r,
        )
        self.server: Any = None

    def serve(self, port: int, host: str = "0.0.0.0") -> int:
        """Serve ``/metrics`` on ``host:port`` (0: a free port) in a daemon thread; returns the port."""
        from prometheus_client import start_http_server

        self.server, _ = start_http_server(port, host, registry=self.registry)
        return int(self.server.server_address[1])

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def batch_committed(self, counts: dict[str | None, tuple[int, int]], seconds: float) -> None:
        """A batch committed ``counts``: per table (None: the job's dead letters) rows and dead letters."""
        for table, (rows, dead) in counts.items():
            name = table or self.dead_letter_table
            self.rows.labels(name).inc(rows)
            self.dead_letters.labels(name).inc(dead)
            self.records.labels(name).inc(rows + dead)
        self.batches.inc()
        self.batch_seconds.set(seconds)

    def skipped(self, counts: OffsetMap) -> None:
        """The records skipped as lost so far, per partition (the source's running totals)."""
        for (topic, partition), n in counts.items():
            self.skipped_records.labels(topic, str(partition)).set(n)

    def status(self, status: dict[str, Any]) -> None:
        """Mirror the job's published status: per partition its offsets and lag, per topic its time lag
        (absent while unknown) and whether it is paused."""
        for topic, t in status.get("topics", {}).items():
            table = t.get("table") or ""
            for partition, end in t["latest"].items():
                at = t["committed"].get(partition)
                labels = (table, topic, partition)
                if at is not None:
                    self.committed.labels(*labels).set(at)
                if end is not None:
                    self.latest.labels(*labels).set(end)
                if at is not None and end is not None:
                    self.lag.labels(*labels).set(max(0, end - at))
            if t.get("lag_seconds") is not None:
                self.lag_seconds.labels(table, topic).set(t["lag_seconds"])
            self.paused.labels(table, topic).set(1 if t["state"] == "paused" else 0)


def progress_latest_offsets(progress: Any) -> OffsetMap:
    """The latest offsets our source reported in a ``StreamingQueryProgress`` (empty if none)."""
    if progress is None:
        return {}
    sources = progress.get("sources") if isinstance(progress, dict) else getattr(progress, "sources", None)
    for source in sources or ():
        raw = (
            source.get("latestOffset") if isinstance(source, dict) else getattr(source, "latestOffset", None)
        )
        if not raw:
            continue
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            return load_offsets(json.loads(raw) if isinstance(raw, str) else raw)
    return {}


class GroupCommitter:
    """Commits a batch's end offsets to a Kafka consumer group, best effort (monitoring only).

    The consumer never subscribes nor joins the group: it commits as a standalone consumer
    (generation -1), which Kafka accepts while no member of the group is active. A failure is
    logged — once until the next success — and the ingest goes on.
    """

    def __init__(self, bootstrap: str, group: str, consumer_config: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.config = dict(consumer_config or {})
        self._consumer: Any = None
        self._failing = False

    def commit(self, offsets: OffsetMap) -> bool:
        """Commit ``offsets`` (next offset to read, per partition); whether it worked."""
        if not offsets:
            return True
        from kafka import KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        try:
            if self._consumer is None:
                self._consumer = KafkaConsumer(
                    **{
                        "bootstrap_servers": [s.strip() for s in self.bootstrap.split(",") if s.strip()],
                        "client_id": "streampart-kafka-group-commit",
                        "request_timeout_ms": 10_000,
                        **self.config,
                        "group_id": self.group,
                        "enable_auto_commit": False,
                    }
                )
            self._consumer.commit(
                {
                    TopicPartition(t, p): OffsetAndMetadata(o, "streampart", -1)
                    for (t, p), o in offsets.items()
                }
            )
        except Exception as exc:  # monitoring only: whatever goes wrong, the ingest goes on
            if not self._failing:
                log.warning(
                    "committing offsets to Kafka consumer group %s failed (%s: %s); it is for monitoring "
                    "only (the checkpoint and the metastore keep the real offsets), the ingest goes on",
                    self.group,
                    type(exc).__name__,
                    exc,
                )
            self._failing = True
            self.close()
            return False
        if self._failing:
            log.info("committing offsets to Kafka consumer group %s works again", self.group)
        self._failing = False
        return True

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close(autocommit=False)
