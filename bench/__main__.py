"""``python -m bench [--quick] [--only NAME]``: run the benchmarks, print tables, write JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "latest.json"

# Default scale: under 10 minutes on this 2-core machine (578 s measured while other jobs kept
# the load average near 5), plus about 5 minutes for ``links`` (309 s at load 6-7); quick: a
# smoke run of about a minute, plus 48 s for ``links``. ``federation`` adds about 6 minutes
# (346 s at load 5-7, 4 of them preloading 20M chunk rows; 19 min at load 7-13) and 18 s quick;
# ``router`` about a minute quick (57 s at load 11). ``growth`` about 5 minutes (293 s at load
# 8-10 on SQLite alone, 49 s of it fast-forwarding a log to 10k versions, 30 s loading 900k chunk
# rows; PostgreSQL adds its chunk-row curve), quick about 20-30 s.
#
# Why 2,000 chunks (not 10,000) for the read benchmark by default: every chunk is a real chunk
# commit. Session 1 measured 30-200 ms a commit (each loaded the Delta table from scratch),
# so building 10,000 chunks took 45 minutes; commits now refresh one snapshot in place (about
# 25 ms each on SQLite here), but the 10,000-chunk run stays opt-in: ``--read-chunks 10000``.
# Likewise quick builds 150 chunks, not 500, to stay under a minute.
#
# Why 300 standard partitions (not 1,000) beside the keyed roll of ``keys``: each is built by a real
# forced roll, and a keyed roll reads the key columns of every other live file, so building n
# partitions reads about n²/2 files: 300 took 320 s at load 9 (the append table's 229 s, built at
# once in another process; the whole ``keys`` run 587 s), 1,000 took 1,803 s (append 967 s; the
# whole run 2,069 s, at load 4-14). ``--keys-partitions 1000`` runs it.
SCALES: dict[str, dict[str, Any]] = {
    "default": {
        "rows": 100,
        "writers": [1, 4],
        "commits_per_writer": {1: 200, 4: 60},
        "warmup": 3,
        "roll_chunks": 1000,
        "baseline_reps": 3,
        "read_chunks": 2000,
        "read_reps": 3,
        "read_warmup_rounds": 1,
        "avro_records": 100_000,
        "avro_reps": 3,
        "fleet_topics": 100,
        "fleet_records": 1_000,
        "fleet_reps": 2,
        "kafka_records": 200_000,
        "kafka_partitions": 4,
        "kafka_max_offsets": 50_000,
        "kafka_reps": 5,
        "kafka_warmup": 1,
        "kafka_fresh_seconds": 60,
        "kafka_fresh_rate": 200,
        "http_producers": 32,
        "http_seconds": 60,
        "http_roll_every": "10s",
        "links_files": 10_000,
        "links_rolled_partitions": 4,
        "links_files_per_chunk": 100,
        "links_reps": 5,
        "links_warmup_rounds": 1,
        "replication_bytes": 1024 * 1024 * 1024,
        "replication_reps": 3,
        "spark_roll_bytes": 2 * 1024 * 1024 * 1024,
        "federation_rows": 10_000_000,
        "federation_writers": 6,
        "federation_tables": 30,
        "federation_commits": 50,
        "federation_warmup": 3,
        "federation_rounds": 2,
        "router_commits": 300,
        "router_warmup": 5,
        "evolution_commits": 150,
        "deletes_partitions": 1000,
        "deletes_rows": 20,
        "deletes_reps": 3,
        "catalogs_partitions": 200,
        "catalogs_rows": 1000,
        "catalogs_chunks": 300,
        "catalogs_reps": 5,
        "jdbc_chunks": 200,
        "jdbc_reps": 10,
        "tables_count": 100,
        "tables_seconds": 300,
        "tables_rate": 1.0,
        "tables_roll_every": "1m",
        "tables_server_workers": 2,
        "tables_roll_workers": 16,
        "objects_commits": 150,
        "objects_scan_rows": 4_000_000,
        "objects_scan_chunks": 8,
        "objects_reps": 3,
        "growth_chunk_rows": [0, 100_000, 1_000_000],
        "growth_versions": [10, 1_000, 10_000],
        "growth_commits": 40,
        "growth_warmup": 3,
        "growth_reps": 5,
        "growth_spark": True,
        "sqlscan_chunks": 200,
        "sqlscan_rows": 5_000,
        "sqlscan_reps": 3,
        "keys_ingest_rows": 200_000,
        "keys_ingest_chunk": 10_000,
        "keys_ingest_reps": 3,
        "keys_query_rows": 300_000,
        "keys_query_reps": 2,
        "keys_queries": ["count(*)", "sum(v)", "filter + group by", "point lookup"],
        "keys_roll_partitions": 300,
        "keys_roll_rows": 20,
        "keys_roll_reps": 2,
        "stats_commits": 400,
        "cluster_partitions": 1000,
        "cluster_chunks": 16,
        "cluster_rows": 50,
        "cluster_probes": 5,
    },
    "quick": {
        "rows": 100,
        "writers": [1, 4],
        "commits_per_writer": {1: 10, 4: 5},
        "warmup": 1,
        "roll_chunks": 100,
        "baseline_reps": 3,
        "read_chunks": 150,
        "read_reps": 1,
        "read_warmup_rounds": 0,
        "avro_records": 10_000,
        "avro_reps": 1,
        "fleet_topics": 10,
        "fleet_records": 200,
        "fleet_reps": 1,
        "kafka_records": 20_000,
        "kafka_partitions": 4,
        "kafka_max_offsets": 5_000,
        "kafka_reps": 2,
        "kafka_warmup": 1,
        "kafka_fresh_seconds": 15,
        "kafka_fresh_rate": 200,
        "http_producers": 8,
        "http_seconds": 10,
        "http_roll_every": "3s",
        "links_files": 500,
        "links_rolled_partitions": 2,
        "links_files_per_chunk": 25,
        "links_reps": 2,
        "links_warmup_rounds": 1,
        "replication_bytes": 128 * 1024 * 1024,
        "replication_reps": 2,
        "spark_roll_bytes": 128 * 1024 * 1024,
        "federation_rows": 200_000,
        "federation_writers": 3,
        "federation_tables": 9,
        "federation_commits": 15,
        "federation_warmup": 2,
        "federation_rounds": 1,
        "router_commits": 30,
        "router_warmup": 2,
        "evolution_commits": 20,
        "deletes_partitions": 100,
        "deletes_rows": 20,
        "deletes_reps": 2,
        "catalogs_partitions": 20,
        "catalogs_rows": 100,
        "catalogs_chunks": 20,
        "catalogs_reps": 2,
        "jdbc_chunks": 20,
        "jdbc_reps": 3,
        "tables_count": 10,
        "tables_seconds": 20,
        "tables_rate": 1.0,
        "tables_roll_every": "10s",
        "tables_server_workers": 2,
        "tables_roll_workers": 4,
        "objects_commits": 20,
        "objects_scan_rows": 400_000,
        "objects_scan_chunks": 4,
        "objects_reps": 2,
        "growth_chunk_rows": [0, 20_000, 100_000],
        "growth_versions": [10, 300, 1_000],
        "growth_commits": 15,
        "growth_warmup": 2,
        "growth_reps": 3,
        "growth_spark": False,
        "sqlscan_chunks": 40,
        "sqlscan_rows": 2_500,
        "sqlscan_reps": 2,
        "keys_ingest_rows": 50_000,
        "keys_ingest_chunk": 5_000,
        "keys_ingest_reps": 1,
        "keys_query_rows": 10_000,
        "keys_query_reps": 1,
        "keys_queries": ["count(*)"],
        "keys_roll_partitions": 20,
        "keys_roll_rows": 20,
        "keys_roll_reps": 1,
        "stats_commits": 40,
        "cluster_partitions": 30,
        "cluster_chunks": 8,
        "cluster_rows": 50,
        "cluster_probes": 3,
    },
}


def benchmarks() -> dict[str, Any]:
    from bench import (
        catalogs,
        clustering,
        commit_latency,
        deletes,
        evolution,
        federation,
        file_stats,
        growth,
        http_load,
        kafka_avro,
        kafka_fleet,
        kafka_ingest,
        keys,
        link_planning,
        many_tables,
        objects,
        replication,
        roll,
        router,
        snapshot_read,
        spark_roll,
        sql_fairness,
        sql_roundtrip,
        sqlscan,
    )

    modules = (
        commit_latency, roll, snapshot_read, kafka_ingest, http_load, link_planning, replication, spark_roll,
        federation,
        router,
        growth,
        sqlscan,
        evolution,
        objects,
        kafka_fleet,
        kafka_avro,
        deletes,
        sql_roundtrip,
        many_tables,
        sql_fairness,
        keys,
        catalogs,
        file_stats,
        clustering,
    )  # fmt: skip
    return {m.NAME: m for m in modules}


NAMES = (
    "commit",
    "roll",
    "read",
    "kafka",
    "http",
    "links",
    "replication",
    "spark_roll",
    "federation",
    "router",
    "growth",
    "sqlscan",
    "evolution",
    "objects",
    "kafka_fleet",
    "kafka_avro",
    "deletes",
    "jdbc",
    "tables",
    "fairness",
    "keys",
    "catalogs",
    "stats",
    "cluster",
)


def _bootstrap(text: str) -> str:
    servers = [s.strip() for s in text.split(",") if s.strip()]
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"expected HOST:PORT[,HOST:PORT…], got {server!r}")
    if not servers:
        raise argparse.ArgumentTypeError("expected HOST:PORT[,HOST:PORT…]")
    return ",".join(servers)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description=(
            "Benchmarks of streampart, each against a plain pyarrow/Spark baseline measured in the same run."
        ),
    )
    p.add_argument("--quick", action="store_true", help="small-scale smoke run (under a minute)")
    p.add_argument("--only", choices=NAMES, metavar="NAME", help=f"run one benchmark: {', '.join(NAMES)}")
    p.add_argument("--roll-chunks", type=int, help="chunks in the rolled partition (overrides the scale)")
    p.add_argument("--read-chunks", type=int, help="chunks in the table read by Spark (overrides the scale)")
    p.add_argument(
        "--keys-partitions",
        type=int,
        help="keys: standard partitions beside the keyed roll (overrides the scale)",
    )
    p.add_argument("--links-files", type=int, help="files in the link's source table (overrides the scale)")
    p.add_argument(
        "--federation-rows",
        type=int,
        help="chunk rows preloaded into the one big metastore (overrides the scale)",
    )
    p.add_argument(
        "--bootstrap",
        type=_bootstrap,
        metavar="HOST:PORT[,HOST:PORT…]",
        help="kafka: run against this external Kafka broker instead of the bundled Tansu one "
        "(the benchmark creates its own uniquely named topics there)",
    )
    p.add_argument("--output", type=Path, default=RESULTS, help=f"JSON results file (default {RESULTS})")
    return p.parse_args(argv)


def environment() -> dict[str, Any]:
    from importlib.metadata import version

    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    for pkg in ("deltalake", "pyarrow", "pyspark", "sqlalchemy", "psycopg"):
        try:
            env[pkg] = version(pkg)
        except Exception:
            env[pkg] = None
    return env


def print_summary(results: list[Any]) -> None:
    from rich.table import Table

    from bench.common import console, fmt, fmt_ratio

    t = Table(title="Summary (ratio = streampart / baseline)", title_justify="left")
    for col in ("benchmark", "metric", "streampart", "baseline", "ratio", "better"):
        t.add_column(col, justify="left" if col in ("benchmark", "metric") else "right")
    for r in results:
        for i, m in enumerate(r.metrics):
            better = "" if m.baseline is None else ("higher" if m.higher_is_better else "lower")
            t.add_row(
                r.name if i == 0 else "",
                m.name,
                fmt(m.value, m.unit),
                fmt(m.baseline, m.unit),
                fmt_ratio(m.ratio),
                better,
            )
        t.add_section()
    console.print(t)
    console.print("  baselines:")
    for r in results:
        console.print(f"  - {r.name}: {r.baseline}")
    for r in results:
        for note in r.notes:
            console.print(f"  [yellow]note ({r.name}): {note}[/]")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bench.common import console

    scale_name = "quick" if args.quick else "default"
    scale = dict(SCALES[scale_name])
    if args.roll_chunks:
        scale["roll_chunks"] = args.roll_chunks
    if args.read_chunks:
        scale["read_chunks"] = args.read_chunks
    if args.keys_partitions:
        scale["keys_roll_partitions"] = args.keys_partitions
    if args.links_files:
        scale["links_files"] = args.links_files
    if args.federation_rows:
        scale["federation_rows"] = args.federation_rows
    if args.bootstrap:
        scale["kafka_bootstrap"] = args.bootstrap
    selected = [args.only] if args.only else list(NAMES)
    mods = benchmarks()
    started = time.perf_counter()
    console.rule(f"streampart benchmarks — scale {scale_name}, running {', '.join(selected)}")
    load_before = os.getloadavg()
    console.print(
        f"  {os.cpu_count()} CPUs; load average {load_before[0]:.2f} (1 min) at the start"
        + (" [yellow]- the machine is busy, timings will be noisy[/]" if load_before[0] > 0.5 else "")
    )
    results = []
    for name in selected:
        mod = mods[name]
        console.rule(f"[bold]{name}[/]")
        t0 = time.perf_counter()
        result = mod.run(scale)
        result.seconds = time.perf_counter() - t0
        console.print("  [bold]how it was measured[/]")
        for line in result.method:
            console.print(f"  - {line}")
        console.print(f"  - baseline: {result.baseline}")
        console.print(f"  ({name} took {result.seconds:.1f} s)")
        results.append(result)
    console.rule("[bold]summary[/]")
    print_summary(results)
    total = time.perf_counter() - started
    doc = {
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "scale": scale_name,
        "scale_params": {
            k: (v if not isinstance(v, dict) else {str(a): b for a, b in v.items()}) for k, v in scale.items()
        },
        "environment": {**environment(), "load_average_at_start": [round(x, 2) for x in load_before]},
        "seconds": round(total, 3),
        "benchmarks": [r.to_json() for r in results],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    load_after = os.getloadavg()
    console.print(
        f"  total {total:.1f} s; load average {load_before[0]:.2f} at the start, "
        f"{load_after[0]:.2f} at the end; results written to {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
