"""Benchmark: one Kafka ingest job for N tables against the same records into one table (issue 29).

Both sides read the same N topics (one partition each, the same records) in the same SparkSession, in
batches of the same size; the routed job commits one chunk per table per batch (N per batch), the
baseline one chunk per batch into one table. The ratio is what routing and N commits cost. Then the
memory: the routed job's CLI process (Python and Spark's JVM, peak resident set of the process
tree) against N one-table jobs, estimated as N times one such job reading one of the topics.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import BenchResult, Metric, console, fmt, fmt_ratio, median, workdir
from bench.kafka_ingest import bulk_produce, create_table

NAME = "kafka_fleet"


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants, from /proc (0 for a process gone)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, ()))
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def peak_rss(cmd: list[str]) -> tuple[int, float, str]:
    """Run ``cmd``; its process tree's peak resident bytes (sampled every 0.2 s), seconds, stderr."""
    t0 = time.perf_counter()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    peak = 0
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read() if proc.stderr else ""))
    reader.start()
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(0.2)
    reader.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} … exited {proc.returncode}: {''.join(err)[-2000:]}")
    return peak, time.perf_counter() - t0, "".join(err)


def cli(catalog: Any, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "streampart.cli", "--warehouse", str(catalog.warehouse.root),
        "--metastore", str(catalog.store.url), "ingest", "kafka", *args, "--available-now",
    ]  # fmt: skip


def run(scale: dict[str, Any]) -> BenchResult:
    from ingest.kafka.devbroker import EmbeddedBroker
    from ingest.kafka.job import run_kafka_ingest
    from ingest.kafka.job_options import KafkaIngestOptions
    from metastore.catalog import Catalog
    from streampart.query import spark_session

    n, per_topic, reps = scale["fleet_topics"], scale["fleet_records"], scale["fleet_reps"]
    total = n * per_topic
    batch = max(1, total // 4)
    result = BenchResult(
        name=NAME,
        title=f"One Kafka job for {n} tables vs the same records into one table",
        method=[
            f"Embedded Tansu broker; {n} topics of 1 partition, {per_topic:,} JSON records of ~1 KB each "
            f"({total:,} in all), produced before any timing.",
            f"Routed: one job, --topic-pattern over the {n} topics, --table 'NS.{{topic}}' into {n} fresh "
            f"tables (a dead-letter table each), Trigger.AvailableNow, {batch:,} records a batch: "
            f"{n} chunk commits per batch.",
            f"One table: one job, TABLE --topic <all {n} topics>, same batches, into one fresh table: one "
            "commit per batch.",
            f"Same SparkSession (local[2]), SQLite metastore; {reps} round(s) each, alternating, after one "
            "warm-up of each; medians. records/s = records / wall time of run_kafka_ingest.",
            f"Memory: the CLI (`streampart ingest kafka --available-now`, a fresh process) of the routed job "
            f"over all {n} topics, and of a one-table job over one topic; peak resident set of the process "
            "tree (Python, Spark's JVM and its Python workers), sampled every 0.2 s from /proc. "
            f"{n} one-table jobs ≈ {n} × the one.",
        ],
        baseline="the same records read by a one-table job into one table, same session and batches",
        params={"topics": n, "records_per_topic": per_topic, "batch": batch, "reps": reps},
    )
    with workdir("fleet") as tmp, EmbeddedBroker() as broker:
        catalog = Catalog.open(str(tmp / "wh"))
        prefix = f"fl{uuid.uuid4().hex[:6]}"
        topics = [f"{prefix}_t{i:03d}" for i in range(n)]
        for topic in topics:
            broker.create_topic(topic, partitions=1)
            bulk_produce(broker, topic, per_topic, 1)
        spark = spark_session()

        def routed(k: int) -> float:
            for topic in topics:
                create_table(catalog, f"r{k}.{topic}")
            opts = KafkaIngestOptions(
                bootstrap=broker.bootstrap,
                name=f"fleet{k}",
                topic_pattern=rf"{prefix}_t\d+",
                table_template=f"r{k}.{{topic}}",
                dead_letter_table=f"r{k}.dead",
                available_now=True,
                max_offsets_per_trigger=batch,
                checkpoint=str(tmp / f"ck-r{k}"),
            )
            t0 = time.perf_counter()
            run_kafka_ingest(spark, catalog, opts)
            return time.perf_counter() - t0

        def single(k: int) -> float:
            create_table(catalog, f"s{k}.all")
            opts = KafkaIngestOptions(
                bootstrap=broker.bootstrap,
                table=f"s{k}.all",
                topic=",".join(topics),
                available_now=True,
                max_offsets_per_trigger=batch,
                checkpoint=str(tmp / f"ck-s{k}"),
            )
            t0 = time.perf_counter()
            run_kafka_ingest(spark, catalog, opts)
            return time.perf_counter() - t0

        console.print("  warm-up")
        routed(0), single(0)
        ours: list[float] = []
        base: list[float] = []
        for k in range(1, reps + 1):
            order = (routed, single) if k % 2 else (single, routed)
            for fn in order:
                (ours if fn is routed else base).append(fn(k))
            console.print(f"  round {k}: routed {ours[-1]:.1f} s, one table {base[-1]:.1f} s")
        landed = sum(len(catalog.store.list_chunks(catalog.table(f"r{reps}.{t}").id)) > 0 for t in topics)
        result.notes.append(f"tables of the last routed round that received chunks: {landed} of {n}")
        result.metrics.append(
            Metric("records/s", total / median(ours), "rec/s", total / median(base), higher_is_better=True)
        )
        create_table(catalog, "m1.one")
        one_peak, one_s, _ = peak_rss(
            cli(
                catalog,
                "m1.one",
                "--bootstrap",
                broker.bootstrap,
                "--topic",
                topics[0],
                "--checkpoint",
                str(tmp / "ck-m1"),
            )
        )
        for topic in topics:
            create_table(catalog, f"m2.{topic}")
        fleet_peak, fleet_s, _ = peak_rss(
            cli(
                catalog,
                "--bootstrap",
                broker.bootstrap,
                "--name",
                "mem",
                "--topic-pattern",
                rf"{prefix}_t\d+",
                "--table",
                "m2.{topic}",
                "--dead-letter-table",
                "m2.dead",
                "--checkpoint",
                str(tmp / "ck-m2"),
                "--max-offsets-per-trigger",
                str(batch),
            )
        )
        result.metrics.append(
            Metric(f"memory, 1 job vs {n} one-table jobs", fleet_peak / 2**20, "MiB", n * one_peak / 2**20)
        )
        result.notes.append(
            f"one one-table job over one topic: peak {one_peak / 2**20:.0f} MiB in {one_s:.1f} s; the routed "
            f"job over {n} topics: {fleet_peak / 2**20:.0f} MiB in {fleet_s:.1f} s"
        )
        spark.stop()
    for m in result.metrics:
        console.print(f"  {m.name}: {fmt(m.value)} {m.unit} vs {fmt(m.baseline)} → {fmt_ratio(m.ratio)}")
    return result
