"""Lag in seconds: how long the oldest record a job has not ingested yet has waited in Kafka.

Lag in records (latest minus committed offset) says how much is waiting, not how late the table is:
ten records may be a second's or a day's. Per partition with records waiting, the age of the first
of them (the record at the committed offset: now minus its Kafka timestamp, the producer's create
time or the broker's append time as the topic says) is the time lag, the figure Kafka Connect
users read off Burrow or kafka-lag-exporter; a partition with nothing waiting has none (0).

The timestamp is read once per partition and committed offset, from the brokers, by one consumer
of the driver's own (``assign`` + ``seek``, no group), in the job's monitoring loop and never in a
batch: a batch does not wait for it. A record that cannot be read (retention deleted it, the
broker is away) leaves that partition's lag in seconds unknown (None) until the next attempt.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from typing import Any

from ingest.kafka.brokers import new_consumer
from ingest.kafka.offsets import TP, OffsetMap
from ingest.kafka.options import KafkaSourceOptions

log = logging.getLogger(__name__)

# Why 2 s: one fetch round to each broker normally answers in milliseconds; a broker slower than
# that is left for the next refresh (the lag shows as unknown meanwhile), and the loop goes on.
FETCH_TIMEOUT_S = 2.0
# Why 30 s: a failed read (the brokers away) costs the monitoring loop its connection timeout; the
# job's own retries say the brokers are back sooner than the lag in seconds needs to.
RETRY_AFTER_S = 30.0


class WaitingSince:
    """Per partition the timestamp (epoch seconds) of the first record not ingested yet."""

    def __init__(self, opts: KafkaSourceOptions) -> None:
        # small fetches: one record's timestamp is wanted, not the partition's next megabyte
        config = {**opts.consumer_config, "max_partition_fetch_bytes": 64 * 1024, "fetch_max_bytes": 1 << 20}
        self.opts = dataclasses.replace(opts, consumer_config=config)
        self._consumer: Any = None
        self._times: dict[TP, tuple[int, float]] = {}  # partition: (offset, its record's timestamp)
        self._lock = threading.Lock()
        self._retry_at = 0.0  # after a failed read, not before this (time.monotonic())

    def of(self, committed: OffsetMap, latest: OffsetMap) -> dict[TP, float | None]:
        """Per partition with records waiting: when the first of them was written (None: not read yet)."""
        with self._lock:
            times = dict(self._times)
        found: dict[TP, float | None] = {}
        for tp, end in latest.items():
            at = committed.get(tp)
            if at is None or end <= at:
                continue
            known = times.get(tp)
            found[tp] = known[1] if known is not None and known[0] == at else None
        return found

    def refresh(self, committed: OffsetMap, latest: OffsetMap) -> bool:
        """Read the timestamps not known yet (a blocking broker call: never from a batch); whether any
        was read."""
        wanted = {tp: committed[tp] for tp, when in self.of(committed, latest).items() if when is None}
        if not wanted or time.monotonic() < self._retry_at:
            return False
        try:
            got = self._fetch(wanted)
        except Exception as exc:  # monitoring only: the lag in seconds stays unknown meanwhile
            log.debug("reading the timestamps of waiting records failed: %s", exc)
            self.close()
            # a broker away makes each attempt wait for its connection: not on every loop's turn
            self._retry_at = time.monotonic() + RETRY_AFTER_S
            return False
        with self._lock:
            self._times.update(got)
        return bool(got)

    def _fetch(self, wanted: OffsetMap) -> dict[TP, tuple[int, float]]:
        from kafka import TopicPartition

        if self._consumer is None:
            self._consumer = new_consumer(self.opts)
        consumer = self._consumer
        keys = {TopicPartition(t, p): (t, p) for t, p in wanted}
        consumer.assign(list(keys))
        consumer.resume(*keys)  # paused by an earlier round
        for key, tp in keys.items():
            consumer.seek(key, wanted[tp])
        got: dict[TP, tuple[int, float]] = {}
        deadline = time.monotonic() + FETCH_TIMEOUT_S
        while len(got) < len(wanted) and time.monotonic() < deadline:
            for key, records in consumer.poll(timeout_ms=200).items():
                tp = keys[key]
                if tp not in got and records and records[0].timestamp >= 0:
                    # the first record at or after the committed offset (a transaction marker or a
                    # compacted-away record before it is no record to wait for)
                    got[tp] = (wanted[tp], records[0].timestamp / 1000)
                    consumer.pause(key)
        return got

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close(autocommit=False)
