"""Kafka → table: the ``streampart-kafka`` Spark source and the ingest job built on it.

One module per concept; import from the defining module:

* :mod:`ingest.kafka.options` — the source's options: parsed, checked, built from Python;
* :mod:`ingest.kafka.offsets` — offsets as Spark's checkpoint keeps them;
* :mod:`ingest.kafka.brokers` — broker calls with bounded retries, the driver's metadata client;
* :mod:`ingest.kafka.planning` — a batch's offset ranges cut into tasks, the rate limit;
* :mod:`ingest.kafka.reader` — an executor reads one offset range into Arrow batches;
* :mod:`ingest.kafka.source` — the Spark data source (stream and batch readers);
* :mod:`ingest.kafka.control` — the source's control file: subscription and paused topics, live;
* :mod:`ingest.kafka.routes` — which table each record goes to (routes, templates, a routes file);
* :mod:`ingest.kafka.staging` — the ingest job's tasks: records → Arrow → staged Parquet;
* :mod:`ingest.kafka.route_task` — a task's records split by table, each part staged;
* :mod:`ingest.kafka.table_sink` — one table of a job: its chunk of the batch, what was staged;
* :mod:`ingest.kafka.batch_plans` — the route log: each batch's routes and tables, fixed;
* :mod:`ingest.kafka.batch_sink` — one micro-batch → one chunk per table, the job's dead letters;
* :mod:`ingest.kafka.monitoring` — the job's ``/metrics`` and its monitoring consumer group;
* :mod:`ingest.kafka.job_options` — what a job does (one table, or routes), checked;
* :mod:`ingest.kafka.job` — the ingest job: the streaming query, stopping, monitoring;
* :mod:`ingest.kafka.devbroker` — a Tansu broker for the demo, tests and benchmarks only.

The names below are re-exported for outside callers. They load on first use: Spark's Python
workers import :mod:`ingest.kafka.source` (and so this package) for every task, and the CLI
imports :mod:`ingest.kafka.job`; neither should pay for the other's imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest.kafka.job import KafkaIngestOptions, run_kafka_ingest, start_kafka_ingest
    from ingest.kafka.options import source_options
    from ingest.kafka.source import read_stream, register

_HOME = {
    "KafkaIngestOptions": "ingest.kafka.job_options",
    "run_kafka_ingest": "ingest.kafka.job",
    "start_kafka_ingest": "ingest.kafka.job",
    "source_options": "ingest.kafka.options",
    "read_stream": "ingest.kafka.source",
    "register": "ingest.kafka.source",
}

__all__ = [
    "KafkaIngestOptions",
    "read_stream",
    "register",
    "run_kafka_ingest",
    "source_options",
    "start_kafka_ingest",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)
