"""Prometheus metrics of the roll daemon, served as text over HTTP (``/metrics``).

Each daemon has its own registry (tests run several in one process). Per-table gauges are
set by the leader only, so summing over daemons never counts a table twice; a standby reports
``streampart_scheduler_leader 0`` and no table gauges.
"""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# The ``*_created`` series (a timestamp per counter) double the output and no dashboard uses them.
disable_created_metrics()


class SchedulerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # registered in this order, which is the order /metrics lists them in
        self._roll_series(self.registry)
        self._table_series(self.registry)
        self._leadership_series(self.registry)
        self._housekeeping_series(self.registry)
        self._replication_series(self.registry)
        self._replicas: set[tuple[str, str]] = set()
        self._tables: set[str] = set()
        self._table_gauges: list[Any] = [
            self.partitions_open,
            self.partitions_rolling,
            self.chunks_pending,
            self.due_lag,
            self.failures,
        ]

    def _roll_series(self, r: CollectorRegistry) -> None:
        self.rolls = Counter(
            "streampart_rolls",
            "Roll attempts by outcome (done, failed, abandoned).",
            ["table", "outcome"],
            registry=r,
        )
        self.roll_seconds = Histogram(
            "streampart_roll_duration_seconds",
            "Duration of successful rolls (seal, sweep, finish).",
            ["table"],
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
            registry=r,
        )

    def _table_series(self, r: CollectorRegistry) -> None:
        """The per-table gauges, set by the leader only (:meth:`set_tables`)."""
        self.partitions_open = Gauge(
            "streampart_partitions_open", "Streaming partitions (open for writes).", ["table"], registry=r
        )
        self.partitions_rolling = Gauge(
            "streampart_partitions_rolling",
            "Partitions being rolled (sealed, not yet standard).",
            ["table"],
            registry=r,
        )
        self.chunks_pending = Gauge(
            "streampart_chunks_pending",
            "Chunks reserved or committing, not yet visible.",
            ["table"],
            registry=r,
        )
        self.due_lag = Gauge(
            "streampart_oldest_due_partition_lag_seconds",
            "How long the oldest partition that is due to roll has been waiting (0: none due).",
            ["table"],
            registry=r,
        )
        self.failures = Gauge(
            "streampart_roll_consecutive_failures",
            "Failed roll attempts of the table since its last success (retried with backoff).",
            ["table"],
            registry=r,
        )

    def _leadership_series(self, r: CollectorRegistry) -> None:
        self.leader = Gauge(
            "streampart_scheduler_leader", "1 while this daemon holds the leadership lease.", registry=r
        )
        self.epoch = Gauge(
            "streampart_scheduler_lease_epoch", "Fencing epoch of the lease this daemon holds.", registry=r
        )

    def _housekeeping_series(self, r: CollectorRegistry) -> None:
        self.housekeeping = Counter(
            "streampart_housekeeping_runs",
            "Housekeeping runs by outcome (ok, failed).",
            ["outcome"],
            registry=r,
        )
        self.files_removed = Counter(
            "streampart_housekeeping_files_removed", "Files removed after the retention period.", registry=r
        )
        self.chunks_expired = Counter(
            "streampart_housekeeping_chunks_expired", "Reserved chunks expired before commit.", registry=r
        )
        self.chunks_pruned = Counter(
            "streampart_housekeeping_chunks_pruned", "Chunk rows pruned into summaries.", registry=r
        )
        self.checkpoints = Counter(
            "streampart_housekeeping_checkpoints", "Delta checkpoints written.", registry=r
        )
        self.expired_partitions = Counter(
            "streampart_expired_partitions",
            "Standard partitions expired by retention (removed from the table in one Delta commit a pass).",
            ["table"],
            registry=r,
        )
        self.partitions_reclaimed = Counter(
            "streampart_housekeeping_partitions_reclaimed",
            "Expired partitions whose files were deleted (no readable version lists them any more).",
            registry=r,
        )
        self.files_reclaimed = Counter(
            "streampart_housekeeping_files_reclaimed",
            "Files deleted once no readable version lists them: replaced by a delete on the primary "
            "(where=primary), or removed by an expiry or a delete's copy on a secondary (where=secondary).",
            ["where"],
            registry=r,
        )

    def _replication_series(self, r: CollectorRegistry) -> None:
        self.copies = Counter(
            "streampart_replication_copies",
            "Copies of standard partitions to secondary clusters, by outcome (done, failed).",
            ["table", "cluster", "outcome"],
            registry=r,
        )
        self.copied_bytes = Counter(
            "streampart_replication_copied_bytes",
            "Bytes copied to secondary clusters (verified; a resumed copy counts only what it wrote).",
            ["table", "cluster"],
            registry=r,
        )
        self.replication_lag = Gauge(
            "streampart_replication_lag_seconds",
            "Age (since its roll) of the oldest standard partition not yet on the secondary (0: none).",
            ["table", "cluster"],
            registry=r,
        )
        self.replication_missing = Gauge(
            "streampart_replication_missing_partitions",
            "Standard partitions not yet on the secondary.",
            ["table", "cluster"],
            registry=r,
        )

    def set_tables(self, values: dict[str, dict[str, float]]) -> None:
        """Set the per-table gauges to ``{table: {gauge: value}}``; tables not given are dropped."""
        for table in self._tables - set(values):
            for gauge in self._table_gauges:
                with contextlib.suppress(KeyError):
                    gauge.remove(table)
        for table, v in values.items():
            self.partitions_open.labels(table).set(v.get("open", 0))
            self.partitions_rolling.labels(table).set(v.get("rolling", 0))
            self.chunks_pending.labels(table).set(v.get("pending", 0))
            self.due_lag.labels(table).set(v.get("lag", 0))
            self.failures.labels(table).set(v.get("failures", 0))
        self._tables = set(values)

    def set_replicas(self, values: dict[tuple[str, str], tuple[float, int]]) -> None:
        """Set the per-replica gauges to ``{(table, cluster): (lag seconds, missing)}``; others dropped."""
        for key in self._replicas - set(values):
            for gauge in (self.replication_lag, self.replication_missing):
                with contextlib.suppress(KeyError):
                    gauge.remove(*key)
        for key, (lag, missing) in values.items():
            self.replication_lag.labels(*key).set(lag)
            self.replication_missing.labels(*key).set(missing)
        self._replicas = set(values)

    def serve(self, host: str, port: int) -> Any:
        """Serve ``/metrics`` on ``host:port`` in a daemon thread; returns the server (``.server_port``)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, host, registry=self.registry)
        return server
