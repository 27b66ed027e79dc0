"""A Python process Spark starts that does not connect back in time (Spark gives it a fixed 10 s; a
busy machine takes longer): one line saying what happened and what to do, never a traceback
(``streampart.errors.worker_start_error``, used by ``streampart.cli.root`` and ``spark_errors``)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from ingest.errors import IngestQueryError
from metastore.errors import RetriableError
from streampart.errors import QueryError, SparkWorkerStartError, worker_start_error

# Spark's words, as a streaming query that met it ends (`streampart ingest kafka` on a busy machine)
STREAM_FAILED = (
    "[STREAM_FAILED] Query [id = 71061dc1-51dc-4d22-8c8a-c15909b73f89, runId = aef8db35-5212-456f-8000-"
    "15b01bb2bd7d] terminated with exception: Python worker failed to connect back. SQLSTATE: XXKST"
)


def assert_says_what_to_do(said: SparkWorkerStartError | None) -> str:
    assert isinstance(said, SparkWorkerStartError) and isinstance(said, RetriableError), said
    text = str(said)
    assert "\n" not in text
    assert "did not connect back within Spark's fixed 10 s" in text and "too busy" in text, text
    assert "run the command again" in text, text
    return text


def test_an_error_quoting_spark_s_words_keeps_what_failed_and_says_what_to_do() -> None:
    said = assert_says_what_to_do(
        worker_start_error(IngestQueryError(f"ingest ns.k failed: {STREAM_FAILED}"))
    )
    assert said.startswith("ingest ns.k failed: a Python process Spark started"), said
    assert "an ingest resumes from its checkpoint" in said
    assert worker_start_error(IngestQueryError("ingest ns.k failed: broker 127.0.0.1:9 unreachable")) is None
    assert worker_start_error(QueryError("query failed: [TABLE_OR_VIEW_NOT_FOUND] …")) is None


@pytest.mark.spark
def test_a_py4j_error_from_the_jvm_is_one_line(spark: Any) -> None:
    """A real Py4J error carrying a Java exception with Spark's words: as the CLI's last resort
    (``root._main``) and ``spark_errors`` (every Spark statement: the CLI, the SQL server) tell it."""
    from py4j.protocol import Py4JJavaError

    from streampart.query_errors import spark_errors

    with pytest.raises(Py4JJavaError) as raised:
        spark._jvm.java.util.Objects.requireNonNull(None, "Python worker failed to connect back.")
    assert_says_what_to_do(worker_start_error(raised.value))
    with pytest.raises(SparkWorkerStartError) as told, spark_errors():
        spark._jvm.java.util.Objects.requireNonNull(None, "Python worker failed to connect back.")
    assert_says_what_to_do(told.value)
    with pytest.raises(Py4JJavaError) as other:
        spark._jvm.java.util.Objects.requireNonNull(None, "something else")
    assert worker_start_error(other.value) is None


# Spark's Python processes, as on a machine too busy to start the streaming source's runner within
# Spark's 10 s: it starts 12 s late (the others, the pyspark daemon's workers, at once)
SLOW_PYTHON = """#!/bin/sh
case "$*" in *python_streaming_source_runner*) sleep 12;; esac
exec {python} "$@"
"""


def streampart(wh: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    environment |= {"STREAMPART_WAREHOUSE": str(wh), "TZ": "UTC", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "streampart", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
        stdin=subprocess.DEVNULL,
        cwd=wh.parent,
    )


@pytest.mark.spark
def test_an_ingest_whose_source_runner_starts_too_late_is_one_line(kafka_broker: Any, tmp_path: Path) -> None:
    """The real thing: Spark's Python streaming source's runner connects back after Spark gave up."""
    wh, slow = tmp_path / "wh", tmp_path / "python"
    slow.write_text(SLOW_PYTHON.format(python=shlex.quote(sys.executable)))
    slow.chmod(0o755)
    topic = f"late-runner-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=1)
    kafka_broker.produce(topic, [{"value": b'{"id": 1, "ts": "2026-11-21T10:00:00Z"}'}])
    schema = ("--schema", "id BIGINT, ts TIMESTAMP", "--time-column", "ts", "--roll-every", "1h")
    created = streampart(wh, "table", "create", "ns.k", *schema, "--dead-letter")
    assert created.returncode == 0, created.stderr

    done = streampart(
        wh,
        "ingest", "kafka", "ns.k", "--bootstrap", kafka_broker.bootstrap, "--topic", topic, "--available-now",
        env={"PYSPARK_PYTHON": str(slow)},
    )  # fmt: skip

    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    said = [line for line in done.stderr.splitlines() if not line.startswith("ingesting ")]  # its start
    assert len(said) == 1 and said[0].startswith("error: ingest ns.k failed: "), done.stderr
    assert_says_what_to_do(SparkWorkerStartError(said[0]))
