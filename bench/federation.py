"""Benchmark: Didi's problem in numbers — chunk commits on one big PostgreSQL metastore vs three.

The question of issue 12 (federation): does a metastore holding many chunk rows make every
chunk commit slower, and does spreading the namespaces over three metastore databases, each
holding a third of the rows, win that back? Four configurations get the same commit load
(the same writers, tables, chunks and Delta logs), in turns:

- **1 metastore**: every table in one database whose ``sp_chunks`` holds N committed chunk rows;
- **3 metastores**: the tables' namespaces spread over three databases, N/3 rows each (each
  writer commits through a Catalog of the database its namespace lives in, as the federation
  router will route it);
- **1 empty** (the baseline): one database with no chunk rows at all;
- **3 empty**: the writers' tables spread over three empty databases (the split without the rows).

Besides each commit's wall time, pg_stat_statements gives the metastore's own share of a commit
(the execution time of its statements on the server), which the wall-clock figures of a busy
2-core machine blur.

The databases live on a private PostgreSQL instance (tests/private_pg.py): ten million rows do
not belong in the machine's shared server. Tables are made through the real API
(``Catalog.create_table``); their history is preloaded with set-based SQL (``INSERT … SELECT …
generate_series``) straight into ``sp_chunks``, as COMMITTED chunks of past days; then real
commits run through ``ChunkWriter.write_table`` (reserve → stage → commit) from several writer
processes at once.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.common import (
    BenchResult,
    Metric,
    collect_results,
    console,
    create_table,
    fmt,
    fmt_ratio,
    insert_chunk_history,
    percentile,
    progress,
    sample_data,
    workdir,
)

NAME = "federation"
# Why 900 s: the writers wait at a barrier while the others warm up; one stuck writer must not
# hang the run for ever, but a slow warm-up on a loaded 2-core machine must not abort it either.
BARRIER_TIMEOUT_S = 900
FEDERATED = 3
ROWS_PER_CHUNK = 100
# Preloaded history: chunk rows spread evenly over the last HISTORY (created_at), as a metastore
# that keeps chunk rows for chunk_retention (7 days) after their partition rolled would.
HISTORY = timedelta(days=6)

# The private instance: PostgreSQL's defaults where they shape the commit path (shared_buffers
# 128MB, as the shared server here), plus what makes a bulk load fast and changes nothing the
# commits measure the same way in every configuration: fsync off (no durability needed),
# wal_level minimal (the preload TRUNCATEs and fills sp_chunks in one transaction: no WAL for it),
# more memory for the index builds.
PG_SETTINGS = {
    "shared_buffers": "128MB",
    "wal_level": "minimal",
    "max_wal_senders": "0",
    "max_wal_size": "8GB",
    "maintenance_work_mem": "512MB",
}


@dataclass(frozen=True)
class Placement:
    """Where one writer commits: its table, in a warehouse, on a metastore database."""

    table: str
    warehouse: str
    url: str


@dataclass(frozen=True)
class Config:
    """One configuration: ``placements[w]`` is writer ``w``'s."""

    key: str
    rows: int  # chunk rows preloaded into each of its databases
    databases: tuple[str, ...]
    placements: tuple[Placement, ...]


def _failure(exc: BaseException) -> str:
    text = str(exc).splitlines()
    return f"{type(exc).__name__}: {(text[0] if text else '')[:300]}"


# -- preload -------------------------------------------------------------------------------
def preload(url: str, rows: int, table_ids: list[int]) -> dict[str, float]:
    """Fill ``sp_chunks`` of the database at ``url`` with ``rows`` committed chunks of past days.

    Set-based and bulk: in one transaction the (still empty) table is truncated, its indexes and
    constraints dropped, the rows inserted, the same indexes and constraints made again from
    their saved definitions; then VACUUM ANALYZE, so the commits run against a settled table
    (hint bits set, visibility map, statistics) and no autovacuum of the load competes with
    them. Returns the seconds of each step.
    """
    import sqlalchemy as sa

    steps: dict[str, float] = {}
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            t0 = time.perf_counter()
            found = conn.execute(sa.text("SELECT count(*) FROM sp_chunks")).scalar()
            if found:
                raise RuntimeError(f"sp_chunks of {url} holds {found} rows already; preload expects none")
            constraints = conn.execute(
                sa.text(
                    "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                    "WHERE conrelid = 'sp_chunks'::regclass AND contype IN ('p', 'u', 'f') "
                    "ORDER BY contype = 'p' DESC, conname"
                )
            ).all()
            indexes = conn.execute(
                sa.text(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'sp_chunks' "
                    "AND indexname NOT IN (SELECT conname FROM pg_constraint "
                    "WHERE conrelid = 'sp_chunks'::regclass)"
                )
            ).all()
            conn.execute(sa.text("SET LOCAL maintenance_work_mem = '512MB'"))
            conn.execute(sa.text("TRUNCATE sp_chunks"))  # new relfilenode: with wal_level minimal, no WAL
            for name, _ in indexes:
                conn.execute(sa.text(f'DROP INDEX "{name}"'))
            for name, _ in constraints:
                conn.execute(sa.text(f'ALTER TABLE sp_chunks DROP CONSTRAINT "{name}"'))
            insert_chunk_history(conn, rows, table_ids, HISTORY)
            steps["insert"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            for name, definition in constraints:
                conn.execute(sa.text(f'ALTER TABLE sp_chunks ADD CONSTRAINT "{name}" {definition}'))
            for _, definition in indexes:
                conn.execute(sa.text(definition))
            steps["indexes"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM (ANALYZE) sp_chunks"))
        steps["vacuum"] = time.perf_counter() - t0
    finally:
        engine.dispose()
    return steps


def _chunk_states(url: str) -> dict[str, int]:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT state, count(*) FROM sp_chunks GROUP BY state")).all()
    finally:
        engine.dispose()
    return {str(state): int(n) for state, n in rows}


def statement_stats_available() -> bool:
    """Whether this PostgreSQL has pg_stat_statements (Debian ships it with the server)."""
    from tests.private_pg import _binary

    lib = Path(_binary("postgres")).resolve().parent.parent / "lib" / "pg_stat_statements.so"
    return lib.exists()


def _reset_statement_stats(url: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
            conn.execute(sa.text("SELECT pg_stat_statements_reset()"))
    finally:
        engine.dispose()


def _statement_time(url: str) -> dict[str, dict[str, float]]:
    """Per database: statements run and their total execution time (ms) since the last reset, and
    the mean time of the INSERT that reserves a chunk (the one statement whose cost grows with the
    table: a random UUID into the primary key's B-tree)."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT d.datname, sum(s.calls), sum(s.total_exec_time), "
                    "sum(s.total_exec_time) FILTER (WHERE s.query LIKE 'INSERT INTO sp_chunks%'), "
                    "sum(s.calls) FILTER (WHERE s.query LIKE 'INSERT INTO sp_chunks%') "
                    "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid GROUP BY d.datname"
                )
            ).all()
    finally:
        engine.dispose()
    return {
        str(db): {
            "calls": float(calls or 0),
            "ms": float(ms or 0),
            "insert_ms": float(insert_ms or 0),
            "inserts": float(inserts or 0),
        }
        for db, calls, ms, insert_ms, inserts in rows
    }


def _relation_size(url: str) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT pg_total_relation_size('sp_chunks')")).scalar() or 0)
    finally:
        engine.dispose()


# -- writers -------------------------------------------------------------------------------
def _commit(writer: Any, worker: int, count: int) -> None:
    """One real chunk commit of ``ROWS_PER_CHUNK`` new rows, under an idempotency key of its own."""
    data = sample_data(writer.table, ROWS_PER_CHUNK, first_id=(worker * 1_000_000 + count) * 1000)
    writer.write_table(data, key=f"bench-w{worker}-{count}")


def _worker(
    worker: int,
    configs: list[Config],
    order: list[int],
    warmup: int,
    n_ops: int,
    barrier: Any,
    results: Any,
    done: Any,
) -> None:
    """One writer process; it runs the turns ``configs[i] for i in order``, in step with the others.

    Per turn: ``warmup`` untimed commits into its table, a barrier, ``n_ops`` timed commits
    (``ChunkWriter.write_table`` with an idempotency key: reserve, stage, commit), a barrier.
    A commit that raises is recorded and the writer goes on.
    """
    out: dict[str, Any] = {"worker": worker, "error": None, "phases": []}
    try:
        from ingest.chunks import ChunkWriter
        from metastore.catalog import Catalog

        # Process warm-up (imports, first-use costs) in a SQLite warehouse of its own, untimed.
        scratch = Path(configs[0].placements[worker].warehouse).parent.parent / f"process-warmup-{worker}"
        catalog = Catalog.open(scratch)
        writer = ChunkWriter(catalog, create_table(catalog))
        writer.write_table(sample_data(writer.table, ROWS_PER_CHUNK))
        catalog.close()
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        count = 0
        for index in order:
            place = configs[index].placements[worker]
            catalog = Catalog.open(place.warehouse, place.url)
            writer = ChunkWriter(catalog, catalog.table(place.table))
            failures: list[str] = []
            latencies: list[float] = []
            for _ in range(warmup):
                try:
                    _commit(writer, worker, count)
                except Exception as exc:
                    failures.append(_failure(exc))
                count += 1
            barrier.wait(timeout=BARRIER_TIMEOUT_S)
            start = time.monotonic()  # CLOCK_MONOTONIC: comparable across the processes of one host
            for _ in range(n_ops):
                t0 = time.perf_counter()
                try:
                    _commit(writer, worker, count)
                    latencies.append(time.perf_counter() - t0)
                except Exception as exc:
                    failures.append(_failure(exc))
                count += 1
                with done.get_lock():
                    done[index] += 1
            end = time.monotonic()
            barrier.wait(timeout=BARRIER_TIMEOUT_S)
            catalog.close()
            out["phases"].append(
                {"config": index, "latencies": latencies, "failures": failures, "start": start, "end": end}
            )
    except BaseException:
        barrier.abort()
        out["error"] = traceback.format_exc()
    results.put(out)


def run_writers(configs: list[Config], order: list[int], warmup: int, n_ops: int) -> list[dict[str, Any]]:
    """The phases ``order`` (indexes into ``configs``) by one pool of spawned writer processes; per
    configuration the latencies and failures of all its phases, and their wall times added up."""
    n_procs = len(configs[0].placements)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n_procs)
    results = ctx.Queue()
    done = ctx.Array("i", len(configs))
    procs = [
        ctx.Process(
            target=_worker, args=(w, configs, order, warmup, n_ops, barrier, results, done), daemon=True
        )
        for w in range(n_procs)
    ]
    for p in procs:
        p.start()
    with progress() as bar:
        tasks = [
            bar.add_task(f"{c.key}: commits", total=n_procs * n_ops * order.count(i))
            for i, c in enumerate(configs)
        ]

        def refresh() -> None:
            for i, task in enumerate(tasks):
                bar.update(task, completed=done[i])

        collected = collect_results(results, procs, refresh)
    out = []
    for i in range(len(configs)):
        phases = [j for j, index in enumerate(order) if index == i]
        parts = [[r["phases"][j] for r in collected] for j in phases]
        out.append(
            {
                "latencies": [x for ps in parts for p in ps for x in p["latencies"]],
                "failures": [x for ps in parts for p in ps for x in p["failures"]],
                "wall": sum(max(p["end"] for p in ps) - min(p["start"] for p in ps) for ps in parts),
            }
        )
    return out


def _summary(raw: dict[str, Any]) -> dict[str, Any]:
    lat = raw["latencies"] or [float("nan")]
    return {
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "mean_ms": sum(lat) / len(lat) * 1000,
        "max_ms": max(lat) * 1000,
        "per_s": len(raw["latencies"]) / raw["wall"],
        "ok": len(raw["latencies"]),
        "failed": len(raw["failures"]),
        "failures": raw["failures"][:5],
    }


# -- the benchmark -------------------------------------------------------------------------
def _table_name(i: int) -> str:
    return f"ns{i:02d}.events"


def run(scale: dict[str, Any]) -> BenchResult:
    from rich.table import Table as RichTable

    from metastore.catalog import Catalog
    from tests.private_pg import PrivatePostgres

    n_rows: int = scale["federation_rows"]
    writers: int = scale["federation_writers"]
    n_tables: int = scale["federation_tables"]
    n_ops: int = scale["federation_commits"]
    warmup: int = scale["federation_warmup"]
    rounds: int = scale["federation_rounds"]
    # ABC, then CBA, …: a drift over the run (page cache, the Delta logs' growth) weighs on all alike
    order = [i for r in range(rounds) for i in ((0, 1, 2, 3) if r % 2 == 0 else (3, 2, 1, 0))]
    if writers % FEDERATED or n_tables % FEDERATED or n_tables < writers:
        raise ValueError(f"writers and tables must be multiples of {FEDERATED}, tables >= writers")
    result = BenchResult(
        name=NAME,
        title="Chunk commits: one PostgreSQL metastore with N chunk rows vs three with N/3 each",
        method=[
            f"A private PostgreSQL instance (tests/private_pg.py: its own initdb and port, fsync off, "
            f"{PG_SETTINGS['shared_buffers']} shared_buffers) holds every metastore database.",
            f"{n_tables} arrival-mode tables ns00.events … ns{n_tables - 1:02d}.events, made with "
            "Catalog.create_table. '1 metastore': all of them in one database. '3 metastores': "
            f"table i's namespace in database fed{{i % {FEDERATED}}}. '1 empty': only the writers' "
            f"tables, in a database of their own; '{FEDERATED} empty': the writers' tables spread over "
            f"{FEDERATED} empty databases as in '3 metastores' (the split without the data: it tells the "
            "effect of the rows' number from that of spreading the writers).",
            f"Preload: {n_rows:,} committed chunk rows into the one database, {n_rows // FEDERATED:,} into "
            "each of the three, spread evenly over the database's tables (so every table holds the same "
            "history in both), in one INSERT … SELECT … generate_series per database with sp_chunks' "
            "indexes dropped and made again afterwards, then VACUUM ANALYZE.",
            f"{writers} writer processes (spawn), writer w committing into ns{{w:02d}}.events through a "
            "Catalog of the database that holds its namespace (the routing the federation router will "
            f"do); {writers // FEDERATED} writer(s) per database in '3 metastores'.",
            f"Per turn of a configuration each writer does {warmup} untimed warm-up commit(s), then {n_ops} "
            f"timed commits after a barrier: ChunkWriter.write_table(<{ROWS_PER_CHUNK} rows>, key=...), "
            "i.e. reserve, stage one Parquet file, one Delta commit, metastore bookkeeping.",
            "Every configuration has its own warehouse: the Delta logs grow the same way in each, so the "
            f"metastore is the only difference. Turns, one configuration at a time, in {rounds} round(s) "
            "in the order 1 empty, 1, 3, 3 empty, then backwards, …; each configuration's figures pool "
            "its turns.",
            "The three databases of '3 metastores' share one PostgreSQL server (its CPU, shared_buffers, "
            "WAL): this measures the effect of the data's size on each commit, not the extra capacity "
            "of three servers.",
            "p50/p99 over all writers' successful commits; commits/s = successful commits / wall time "
            "from the first writer's start to the last writer's end.",
            "Server side: pg_stat_statements, reset before the writers start, sums the execution time of "
            "every statement the commits ran in each database (warm-up commits included), divided by the "
            "commits attempted: the metastore's own share of a commit, which the wall-clock figures of a "
            "busy 2-core machine (Python, Parquet, Delta on the same cores) can hide.",
        ],
        baseline=(
            "the same writers and commits on one empty metastore database (no chunk rows); in the "
            "'3 vs 1' lines the baseline is the one metastore with the same rows (ratio < 1: three win)"
        ),
        params={
            "rows": n_rows,
            "writers": writers,
            "tables": n_tables,
            "commits_per_writer_per_turn": n_ops,
            "rounds": rounds,
            "warmup": warmup,
            "rows_per_chunk": ROWS_PER_CHUNK,
            "pg_settings": PG_SETTINGS,
        },
    )

    stats = statement_stats_available()
    settings = {**PG_SETTINGS, **({"shared_preload_libraries": "pg_stat_statements"} if stats else {})}
    if not stats:
        result.notes.append("pg_stat_statements is missing: no server-side metastore time per commit")
    with workdir("federation") as tmp, PrivatePostgres(tmp / "pg", settings=settings) as pg:
        console.print(f"  private PostgreSQL at {pg.url('')} (directory {pg.home})")
        fed = [f"fed{i}" for i in range(FEDERATED)]
        split_empty = [f"empty{i}" for i in range(FEDERATED)]
        urls = {db: pg.create_database(db) for db in ("empty", "single", *fed, *split_empty)}
        homes = {db: tmp / db / "warehouse" for db in urls}
        # configuration → the database of table i
        layouts = {
            "empty": lambda i: "empty",
            "single": lambda i: "single",
            "federated": lambda i: fed[i % FEDERATED],
            "split_empty": lambda i: split_empty[i % FEDERATED],
        }

        def home_of(i: int, config: str) -> str:
            return layouts[config](i)

        # tables through the real API; the ids each database's preload spreads its rows over
        table_ids: dict[str, list[int]] = {db: [] for db in urls}
        t0 = time.perf_counter()
        made = (("empty", writers), ("single", n_tables), ("federated", n_tables), ("split_empty", writers))
        for config, count in made:
            for i in range(count):
                db = home_of(i, config)
                catalog = Catalog.open(homes[db], urls[db])
                try:
                    table_ids[db].append(create_table(catalog, _table_name(i)).id)
                finally:
                    catalog.close()
        create_s = time.perf_counter() - t0
        console.print(
            f"  {sum(n for _, n in made)} tables made through Catalog.create_table in {create_s:.1f} s"
        )

        loads = [("single", n_rows)] + [(db, n_rows // FEDERATED) for db in fed]
        preload_steps: dict[str, dict[str, float]] = {}
        t0 = time.perf_counter()
        with progress() as bar:
            task = bar.add_task(
                f"preloading {n_rows:,} + {FEDERATED} x {n_rows // FEDERATED:,} chunk rows", total=len(loads)
            )
            # two at a time: this machine has two cores
            with ThreadPoolExecutor(max_workers=2) as pool:
                futures = {db: pool.submit(preload, urls[db], rows, table_ids[db]) for db, rows in loads}
                for db, future in futures.items():
                    preload_steps[db] = future.result()
                    bar.advance(task)
        preload_s = time.perf_counter() - t0
        sizes = {db: _relation_size(urls[db]) for db, _ in loads}
        for db, rows in loads:
            st = preload_steps[db]
            console.print(
                f"  preload {db}: {rows:,} rows — insert {st['insert']:.1f} s, "
                f"indexes {st['indexes']:.1f} s, "
                f"vacuum analyze {st['vacuum']:.1f} s; sp_chunks {sizes[db] / 2**20:,.0f} MiB with indexes"
            )
        console.print(f"  preload took {preload_s:.1f} s in all (wall, two databases at a time)")

        def placements(config: str) -> tuple[Placement, ...]:
            return tuple(
                Placement(_table_name(w), str(homes[home_of(w, config)]), urls[home_of(w, config)])
                for w in range(writers)
            )

        configs = [
            Config("1 empty metastore", 0, ("empty",), placements("empty")),
            Config(f"1 metastore, {n_rows:,} rows", n_rows, ("single",), placements("single")),
            Config(
                f"{FEDERATED} metastores, {n_rows // FEDERATED:,} rows each",
                n_rows // FEDERATED,
                tuple(fed),
                placements("federated"),
            ),
            Config(f"{FEDERATED} empty metastores", 0, tuple(split_empty), placements("split_empty")),
        ]
        if stats:
            _reset_statement_stats(pg.url())
        t0 = time.perf_counter()
        raw = run_writers(configs, order, warmup, n_ops)
        commits_s = time.perf_counter() - t0
        states = {db: _chunk_states(url) for db, url in urls.items()}
        statements = _statement_time(pg.url()) if stats else {}

    summaries = [_summary(r) for r in raw]
    empty, single, federated, split = summaries
    table = RichTable(title=result.title, title_justify="left")
    columns = ("metastore", "rows each", "ok", "failed", "p50 ms", "p99 ms", "mean ms", "max ms", "commits/s",
               "p50 vs empty", "p99 vs empty", "rate vs empty")  # fmt: skip
    for col in columns:
        table.add_column(col, justify="left" if col == "metastore" else "right")
    for config, s in zip(configs, summaries, strict=True):
        table.add_row(
            config.key,
            f"{config.rows:,}",
            str(s["ok"]),
            str(s["failed"]),
            fmt(s["p50_ms"], "ms").removesuffix(" ms"),
            fmt(s["p99_ms"], "ms").removesuffix(" ms"),
            fmt(s["mean_ms"], "ms").removesuffix(" ms"),
            fmt(s["max_ms"], "ms").removesuffix(" ms"),
            fmt(s["per_s"], "/s").removesuffix(" /s"),
            fmt_ratio(s["p50_ms"] / empty["p50_ms"]),
            fmt_ratio(s["p99_ms"] / empty["p99_ms"]),
            fmt_ratio(s["per_s"] / empty["per_s"]),
        )
    console.print(table)
    attempted = writers * (warmup + n_ops) * rounds
    server: list[dict[str, float]] = []
    if statements:
        per_db = RichTable(
            title="Metastore time per commit, server side (pg_stat_statements: every statement's execution)",
            title_justify="left",
        )
        for col in ("metastore", "statements/commit", "ms/commit", "reserve INSERT ms", "ms/commit vs empty"):
            per_db.add_column(col, justify="left" if col == "metastore" else "right")
        for config in configs:
            got = [statements.get(db, {}) for db in config.databases]
            inserts = sum(g.get("inserts", 0) for g in got)
            server.append(
                {
                    "statements_per_commit": sum(g.get("calls", 0) for g in got) / attempted,
                    "ms_per_commit": sum(g.get("ms", 0) for g in got) / attempted,
                    "insert_ms": sum(g.get("insert_ms", 0) for g in got) / inserts
                    if inserts
                    else float("nan"),
                }
            )
        for config, sv in zip(configs, server, strict=True):
            per_db.add_row(
                config.key,
                f"{sv['statements_per_commit']:.1f}",
                f"{sv['ms_per_commit']:.2f}",
                f"{sv['insert_ms']:.3f}",
                fmt_ratio(sv["ms_per_commit"] / server[0]["ms_per_commit"]),
            )
        console.print(per_db)
    for what, three, one in (("holding the rows", federated, single), ("all empty", split, empty)):
        p50, p99, rate = (fmt_ratio(_ratio(three[k], one[k])) for k in ("p50_ms", "p99_ms", "per_s"))
        console.print(
            f"  {FEDERATED} metastores vs 1, {what}: p50 {p50}, p99 {p99}, "
            f"commits/s {rate} (measured in the same run)"
        )
    console.print(
        f"  preload {preload_s:.1f} s; commits {commits_s:.1f} s ({len(order)} turns, process start included)"
    )

    for config, s in zip(configs, summaries, strict=True):
        if s["failed"]:
            result.notes.append(f"{config.key}: {s['failed']} commits raised, e.g. {s['failures'][0]!r}")
    expected = attempted
    for config in configs:
        committed = sum(states[db].get("committed", 0) for db in config.databases) - config.rows * len(
            config.databases
        )
        if committed != expected:
            result.notes.append(
                f"{config.key}: {committed} new committed chunks in its metastore(s), expected {expected} "
                f"(chunk states {[states[db] for db in config.databases]})"
            )
    for note in result.notes:
        console.print(f"  [yellow]note: {note}[/]")

    for label, s, base in (
        (configs[1].key, single, empty),
        (configs[2].key, federated, empty),
    ):
        result.metrics += [
            Metric(f"{label}: commit p50", s["p50_ms"], "ms", base["p50_ms"]),
            Metric(f"{label}: commit p99", s["p99_ms"], "ms", base["p99_ms"]),
            Metric(f"{label}: commits/s", s["per_s"], "ops/s", base["per_s"], higher_is_better=True),
        ]
    for what, three, one in (("with rows", federated, single), ("empty", split, empty)):
        result.metrics += [
            Metric(f"3 vs 1 metastore, {what}: commit p50", three["p50_ms"], "ms", one["p50_ms"]),
            Metric(f"3 vs 1 metastore, {what}: commit p99", three["p99_ms"], "ms", one["p99_ms"]),
            Metric(
                f"3 vs 1 metastore, {what}: commits/s",
                three["per_s"],
                "ops/s",
                one["per_s"],
                higher_is_better=True,
            ),
        ]
    if server:
        for config, sv in zip(configs[1:3], server[1:3], strict=True):
            result.metrics.append(
                Metric(
                    f"{config.key}: metastore ms/commit (server)",
                    sv["ms_per_commit"],
                    "ms",
                    server[0]["ms_per_commit"],
                )
            )
        result.metrics.append(
            Metric(
                "3 vs 1 metastore, with rows: metastore ms/commit (server)",
                server[2]["ms_per_commit"],
                "ms",
                server[1]["ms_per_commit"],
            )
        )
        result.params["server_side"] = {c.key: sv for c, sv in zip(configs, server, strict=True)}
    result.metrics.append(Metric("preload (all databases, wall)", preload_s, "s"))
    result.params["raw"] = {c.key: s for c, s in zip(configs, summaries, strict=True)}
    result.params["preload_seconds"] = {
        "wall": preload_s,
        "tables_made_s": create_s,
        "steps": preload_steps,
        "sp_chunks_bytes": sizes,
    }
    result.params["commit_phase_seconds"] = commits_s
    return result


def _ratio(a: float, b: float) -> float | None:
    """``a / b``, or None where ``b`` measured nothing (every commit of that configuration failed:
    the notes say why)."""
    return a / b if b and b == b else None
