"""Benchmark 1: chunk commit latency and throughput, 1 and N writer processes, SQLite and PostgreSQL."""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    TABLE_NAME,
    BenchResult,
    Metric,
    collect_results,
    console,
    create_table,
    drop_pg_schema,
    fmt,
    fmt_ratio,
    fresh_metastore_url,
    percentile,
    pg_url_safe,
    postgres_problem,
    progress,
    sample_data,
    workdir,
)

NAME = "commit"
BARRIER_TIMEOUT_S = 600
PHASES = ("chunk", "parquet")


@dataclass(frozen=True)
class Job:
    """One configuration: ``writers`` processes commit into a fresh table on ``backend``."""

    backend: str
    writers: int
    n_ops: int
    warehouse: str
    url: str | None

    @property
    def key(self) -> str:
        return f"{self.backend}, {self.writers} writer{'s' if self.writers > 1 else ''}"


def _failure(exc: BaseException) -> str:
    text = str(exc).splitlines()
    return f"{type(exc).__name__}: {(text[0] if text else '')[:300]}"


class _Ops:
    """The two timed operations of a writer: a chunk commit and the plain Parquet write."""

    def __init__(self, worker: int, rows: int, writer: Any, plain_dir: Path) -> None:
        self.worker, self.rows, self.writer, self.plain_dir = worker, rows, writer, plain_dir
        self.count = 0

    def __call__(self, phase: str) -> None:
        import pyarrow.parquet as pq

        data = sample_data(
            self.writer.table, self.rows, first_id=self.worker * 10_000_000 + self.count * self.rows
        )
        self.count += 1
        if phase == "chunk":
            self.writer.write_table(data)
        else:
            target = self.plain_dir / f"w{self.worker}-{self.count:06d}.parquet"
            pq.write_table(data, target, compression="snappy")


def _worker(
    worker: int, jobs: list[Job], warmup: int, rows: int, barrier: Any, results: Any, done: Any
) -> None:
    """One writer process of the pool; it runs every job, in order, in step with the others.

    Per job and phase: ``warmup`` untimed operations, a barrier, ``n_ops`` timed operations, a
    barrier. Phase ``chunk`` is ChunkWriter.write_table (reserve, stage, Delta commit,
    metastore bookkeeping); phase ``parquet`` is pyarrow.parquet.write_table of the same data
    (the baseline). Workers numbered ``>= job.writers`` sit the job out (they only pass the
    barriers). A commit that raises is recorded and the writer goes on with the next one.
    """
    out: dict[str, Any] = {"worker": worker, "error": None, "jobs": []}
    try:
        from ingest.chunks import ChunkWriter
        from metastore.catalog import Catalog

        # Process warm-up, all writers at once and untimed: pay the first-use costs (lazy imports
        # of deltalake, alembic, …) in a scratch warehouse of this process's own.
        scratch = Path(jobs[0].warehouse).parent.parent / f"process-warmup-{worker}"
        catalog = Catalog.open(scratch)
        op = _Ops(worker, rows, ChunkWriter(catalog, create_table(catalog)), scratch)
        for phase in PHASES:
            op(phase)
        catalog.close()
        barrier.wait(timeout=BARRIER_TIMEOUT_S)

        for job in jobs:
            active = worker < job.writers
            record: dict[str, Any] = {}
            if active:
                catalog = Catalog.open(job.warehouse, job.url)
                table = catalog.table(TABLE_NAME)
                plain_dir = Path(job.warehouse) / "_plain_parquet"
                plain_dir.mkdir(parents=True, exist_ok=True)
                op = _Ops(worker, rows, ChunkWriter(catalog, table), plain_dir)
            for phase in PHASES:
                failures: list[str] = []
                latencies: list[float] = []
                failed: list[float] = []
                if active:
                    for _ in range(warmup):
                        try:
                            op(phase)
                        except Exception as exc:
                            failures.append(_failure(exc))
                barrier.wait(timeout=BARRIER_TIMEOUT_S)
                # CLOCK_MONOTONIC: comparable across the processes of one host
                start = time.monotonic()
                if active:
                    for _ in range(job.n_ops):
                        t0 = time.perf_counter()
                        try:
                            op(phase)
                            latencies.append(time.perf_counter() - t0)
                        except Exception as exc:
                            failed.append(time.perf_counter() - t0)
                            failures.append(_failure(exc))
                        with done.get_lock():
                            done.value += 1
                end = time.monotonic()
                record[phase] = {
                    "latencies": latencies,
                    "failed": failed,
                    "failures": failures,
                    "start": start,
                    "end": end,
                }
                barrier.wait(timeout=BARRIER_TIMEOUT_S)  # the next phase starts when all are done
            if active:
                catalog.close()
                out["jobs"].append(record)
            else:
                out["jobs"].append(None)
    except BaseException:
        barrier.abort()
        out["error"] = traceback.format_exc()
    results.put(out)


def run_pool(jobs: list[Job], warmup: int, rows: int) -> list[dict[str, dict[str, Any]]]:
    """Run every job with one pool of spawned writer processes; per job and phase the raw figures."""
    n_procs = max(job.writers for job in jobs)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n_procs)
    results = ctx.Queue()
    done = ctx.Value("i", 0)
    procs = [
        ctx.Process(target=_worker, args=(w, jobs, warmup, rows, barrier, results, done), daemon=True)
        for w in range(n_procs)
    ]
    for p in procs:
        p.start()
    with progress() as bar:
        tasks = [
            bar.add_task(f"{job.key}: chunk commits, then parquet writes", total=2 * job.writers * job.n_ops)
            for job in jobs
        ]
        offsets = [sum(2 * jb.writers * jb.n_ops for jb in jobs[:i]) for i in range(len(jobs))]

        def refresh() -> None:
            for task, offset, job in zip(tasks, offsets, jobs, strict=True):
                total = 2 * job.writers * job.n_ops
                bar.update(task, completed=max(0, min(total, done.value - offset)))

        collected = collect_results(results, procs, refresh)
    out = []
    for j in range(len(jobs)):
        records = [r["jobs"][j] for r in collected if r["jobs"][j] is not None]
        phases = {}
        for phase in PHASES:
            parts = [rec[phase] for rec in records]
            phases[phase] = {
                "latencies": [x for p in parts for x in p["latencies"]],
                "failed": [x for p in parts for x in p["failed"]],
                "failures": [x for p in parts for x in p["failures"]],
                "wall": max(p["end"] for p in parts) - min(p["start"] for p in parts),
            }
        out.append(phases)
    return out


def _summary(phase: dict[str, Any]) -> dict[str, Any]:
    lat = phase["latencies"] or [float("nan")]
    ok = len(phase["latencies"])
    return {
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "mean_ms": sum(lat) / len(lat) * 1000,
        "max_ms": max(lat) * 1000,
        "per_s": ok / phase["wall"],
        "wall_s": phase["wall"],
        "ops": ok,
        "failed": len(phase["failed"]),
        "failures": phase["failures"],
    }


def run(scale: dict[str, Any]) -> BenchResult:
    from rich.table import Table as RichTable

    from metastore.catalog import Catalog
    from metastore.delta.files import live_files

    writer_counts: list[int] = scale["writers"]
    commits: dict[int, int] = scale["commits_per_writer"]
    warmup, rows = scale["warmup"], scale["rows"]
    result = BenchResult(
        name=NAME,
        title="Chunk commit latency and throughput",
        method=[
            f"Each commit = ChunkWriter(catalog, table).write_table(<pyarrow table of {rows} rows>): "
            "reserve, stage one Parquet file, one Delta commit, metastore bookkeeping.",
            "Writers are separate processes (multiprocessing, 'spawn'), each with its own Catalog; one "
            "pool of processes runs every configuration in turn, each into a fresh arrival-mode table "
            "(one open partition, no roll) on a fresh metastore (SQLite file / new PostgreSQL schema).",
            f"Each writer first does {warmup} untimed warm-up commit(s), then all start together at a "
            "barrier; every commit's wall time is taken with time.perf_counter().",
            "Latency p50/p99 over all writers' successful commits; throughput = successful commits / "
            "wall time from the first writer's start to the last writer's end. A commit that raises "
            "is counted as failed and the writer goes on.",
            "The table starts empty, so later commits see a longer Delta log (checkpoint every 100 "
            "versions); commit cost grows with the table (see the read benchmark's build figures).",
        ],
        baseline=(
            "pyarrow.parquet.write_table of the same 100-row table (snappy, a new file each time), by "
            "the same processes right after their commits (warm-up, barrier, same count): the cost of "
            "just writing the data."
        ),
        params={
            "writers": writer_counts,
            "commits_per_writer": {str(k): v for k, v in commits.items()},
            "warmup": warmup,
            "rows_per_chunk": rows,
        },
    )
    backends = ["sqlite", "postgresql"]
    pg_problem = postgres_problem()
    if pg_problem:
        backends.remove("postgresql")
        result.notes.append(f"PostgreSQL skipped: {pg_url_safe()} is not reachable ({pg_problem})")
        console.print(f"  [yellow]{result.notes[-1]}[/]")

    with workdir("commit") as tmp:
        jobs: list[Job] = []
        try:
            for backend in backends:
                for writers in writer_counts:
                    wh = tmp / f"{backend}-{writers}" / "warehouse"
                    url = fresh_metastore_url(backend, tmp)
                    jobs.append(Job(backend, writers, commits[writers], str(wh), url))
                    catalog = Catalog.open(wh, url)
                    create_table(catalog)
                    catalog.close()
            raw = run_pool(jobs, warmup, rows)
            after = []
            for job in jobs:
                catalog = Catalog.open(job.warehouse, job.url)
                table = catalog.table(TABLE_NAME)
                live = len(live_files(catalog.warehouse.load(table)))
                states = Counter(c.state.value for c in catalog.store.list_chunks(table.id))
                catalog.close()
                after.append((live, dict(states)))
        finally:
            for job in jobs:
                drop_pg_schema(job.url)

    rich_table = RichTable(title="Chunk commit latency and throughput", title_justify="left")
    columns = (
        "metastore",
        "writers",
        "ok",
        "failed",
        "p50 ms",
        "p99 ms",
        "mean ms",
        "max ms",
        "commits/s",
        "parquet p50",
        "parquet p99",
        "writes/s",
        "p50 x",
        "p99 x",
        "rate x",
    )
    for col in columns:
        rich_table.add_column(col, justify="left" if col == "metastore" else "right")
    for job, phases, (live, states) in zip(jobs, raw, after, strict=True):
        ours, base = _summary(phases["chunk"]), _summary(phases["parquet"])
        attempted = job.writers * (job.n_ops + warmup)
        if ours["failures"]:
            kinds = dict(Counter(f.split(":", 1)[0] for f in ours["failures"]))
            result.notes.append(
                f"{job.key}: {len(ours['failures'])} of {attempted} commits (warm-up included) raised "
                f"{kinds}, e.g. {ours['failures'][0]!r}. Afterwards the Delta table holds {live} live "
                f"files and the metastore's chunks are {states}."
            )
        result.metrics += [
            Metric(f"{job.key}: commit p50", ours["p50_ms"], "ms", base["p50_ms"]),
            Metric(f"{job.key}: commit p99", ours["p99_ms"], "ms", base["p99_ms"]),
            Metric(f"{job.key}: commits/s", ours["per_s"], "ops/s", base["per_s"], higher_is_better=True),
            Metric(f"{job.key}: failed commits", ours["failed"], "commits"),
        ]
        result.params.setdefault("raw", {})[job.key] = {
            "chunk": ours,
            "parquet": base,
            "live_files_after": live,
            "chunk_states_after": states,
        }
        rich_table.add_row(
            job.backend,
            str(job.writers),
            str(ours["ops"]),
            str(ours["failed"]),
            fmt(ours["p50_ms"], "ms").removesuffix(" ms"),
            fmt(ours["p99_ms"], "ms").removesuffix(" ms"),
            fmt(ours["mean_ms"], "ms").removesuffix(" ms"),
            fmt(ours["max_ms"], "ms").removesuffix(" ms"),
            fmt(ours["per_s"], "/s").removesuffix(" /s"),
            fmt(base["p50_ms"], "ms").removesuffix(" ms"),
            fmt(base["p99_ms"], "ms").removesuffix(" ms"),
            fmt(base["per_s"], "/s").removesuffix(" /s"),
            fmt_ratio(ours["p50_ms"] / base["p50_ms"]),
            fmt_ratio(ours["p99_ms"] / base["p99_ms"]),
            fmt_ratio(ours["per_s"] / base["per_s"]),
        )
    console.print(rich_table)
    for note in result.notes:
        console.print(f"  [yellow]note: {note}[/]")
    return result
