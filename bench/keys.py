"""Benchmark ``keys``: keyed tables (upserts, merge on read, keyed rolls) against tables of appends.

Three measurements, each against a table of appends holding the same rows, measured in the same run:

1. **Ingest.** The same records (about 30% of them updating a key written before) committed in chunks
   with ``ChunkWriter.write_table`` to a keyed table and to an identical table without keys: rows/s of
   each (a keyed chunk stages its newest version of each key: ``ingest/keys.py``). Goal: ≥ 0.5x.
2. **Query.** A keyed table whose keys sit in rolled (standard) partitions, 10% of them then updated
   in its open streaming partition, against a table of appends holding the same live rows in the
   same layout (the rolled partitions without the updated keys' old rows, the same update chunks
   open). The same SQL through Spark (``streampart.query.run_sql``, one shared session; a keyed
   table is merged on read: ``streampart/merge_on_read.py``) and the same read without Spark
   (``streampart.snapshots.read_batches``); best of the reps, results checked equal. Goal: ≤ 2x.
3. **Roll.** A keyed table of many rolled partitions (forced rolls, one per chunk) and a partition
   updating one key in each of them, rolled (``scheduler/keyed_rolls.py``: the key columns read of
   every other live file whose key range in the log may hold one of its keys, each file holding an
   older version rewritten without it), against the roll of the
   same rows in a table of appends with the same rolled partitions. Two more keyed partitions of the
   same size show what the cost is made of: one updating every key of 10 partitions (the rest new
   keys), one of new keys only (outside every file's range: reads and rewrites nothing). The sweep's
   counts are taken from the
   ``KeyedSweep`` the roll made (a ``Roller`` subclass keeps it) and checked against its commit.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from bench.common import BenchResult, Metric, console, fmt, fmt_ratio, timed, warm_spark, workdir

NAME = "keys"
SCHEMA = "id BIGINT, ts TIMESTAMP, v BIGINT, cat STRING, op STRING"
CATEGORIES = 16
UPDATE_SHARE = 0.3  # of the ingest's records: a key written before
QUERY_UPDATE_SHARE = 0.1  # of the query table's keys: updated in the open partition
QUERY_ROLLED_PARTITIONS = 4
QUERY_UPDATE_CHUNKS = 5
FEW_PARTITIONS = 10  # the roll variant updating every key of this many partitions

QUERIES = {
    "count(*)": "SELECT count(*) AS n FROM {t}",
    "sum(v)": "SELECT sum(v) AS s FROM {t}",
    "filter + group by": (
        "SELECT cat, count(*) AS n, sum(v) AS s FROM {t} WHERE v % 10 < 3 GROUP BY cat ORDER BY cat"
    ),
    "point lookup": "SELECT id, v, op FROM {t} WHERE id = {key}",
}


# -- tables and data -----------------------------------------------------------------------
def create(catalog: Any, name: str, keyed: bool) -> Any:
    """An arrival-mode table of SCHEMA; keyed on ``id`` (newest by arrival, op column ``op``) or not."""
    from metastore.durations import parse_duration
    from metastore.models import Keys, Mode, TableName, TableSpec, parse_schema

    return catalog.create_table(
        TableSpec(
            name=TableName.parse(name),
            columns=parse_schema(SCHEMA),
            time_column="ts",
            mode=Mode.ARRIVAL,
            roll_every=parse_duration("1d"),
            keys=Keys(columns=("id",), sequence_by=None, op_column="op") if keyed else None,
        )
    )


def records(ids: Any, values: Any, ops: Any) -> Any:
    """Records of SCHEMA (ts: now; cat: one of CATEGORIES by id) as an Arrow table, schema not fixed yet."""
    import numpy as np
    import pyarrow as pa

    ids = np.asarray(ids, dtype=np.int64)
    now = np.datetime64(datetime.now(UTC).replace(tzinfo=None), "us")
    names = pa.array([f"c{i:02d}" for i in range(CATEGORIES)])
    op = pa.array([ops] * len(ids), pa.string()) if isinstance(ops, str) else pa.array(ops, pa.string())
    return pa.table(
        {
            "id": pa.array(ids),
            "ts": pa.array(np.full(len(ids), now)),
            "v": pa.array(np.asarray(values, dtype=np.int64)),
            "cat": names.take(pa.array(ids % CATEGORIES)),
            "op": op,
        }
    )


def fitted(data: Any, table: Any) -> Any:
    """``data`` in ``table``'s exact Arrow schema (a keyed table's key is NOT NULL)."""
    from metastore.delta.arrow import data_schema

    return data.cast(data_schema(table.columns))


def upsert_log(rows: int, chunk_rows: int, seed: int = 17) -> tuple[list[Any], int, int]:
    """``rows`` records in chunks of ``chunk_rows``: each, with probability UPDATE_SHARE, a version of a
    key drawn uniformly from those written before (op ``u``), else a new key (op ``c``).

    Returns the chunks (Arrow, schema not fixed), the records updating a key, and the distinct keys.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    update = rng.random(rows) < UPDATE_SHARE
    update[0] = False
    ids = np.empty(rows, dtype=np.int64)
    fresh = 0
    draws = rng.random(rows)
    for i in range(rows):
        if update[i]:
            ids[i] = int(draws[i] * fresh)  # keys 0..fresh-1 are the ones written so far
        else:
            ids[i] = fresh
            fresh += 1
    values = rng.integers(0, 1_000_000, rows)
    ops = np.where(update, "u", "c")
    chunks = [
        records(ids[s : s + chunk_rows], values[s : s + chunk_rows], ops[s : s + chunk_rows].tolist())
        for s in range(0, rows, chunk_rows)
    ]
    return chunks, int(update.sum()), fresh


def collect(spark: Any, catalog: Any, sql: str) -> list[Any]:
    """The rows of ``sql`` run through streampart (pinned snapshots, merge on read), fetched."""
    from streampart.query import run_sql

    return run_sql(spark, catalog, sql).collect()


def live_rows(catalog: Any, table: Any) -> int:
    """The rows a read without Spark shows now (a keyed table: its live keys)."""
    from metastore.snapshots import pin
    from streampart.snapshots import read_batches

    return sum(b.num_rows for b in read_batches(pin(catalog, table)))


# -- 1. ingest -----------------------------------------------------------------------------
def measure_ingest(scale: dict[str, Any], result: BenchResult, tmp: Path) -> None:
    from rich.table import Table as RichTable

    from ingest.chunks import ChunkWriter
    from metastore.catalog import Catalog

    rows, chunk_rows, reps = scale["keys_ingest_rows"], scale["keys_ingest_chunk"], scale["keys_ingest_reps"]
    chunks, updates, distinct = upsert_log(rows, chunk_rows)
    catalog = Catalog.open(tmp / "ingest")
    runs: dict[str, list[float]] = {"keyed": [], "append": []}
    staged: dict[str, int] = {}
    last_keyed = None
    try:
        for rep in range(reps):
            sides = ["keyed", "append"] if rep % 2 == 0 else ["append", "keyed"]
            for side in sides:
                table = create(catalog, f"bench.ingest_{side}_{rep}", side == "keyed")
                data = [fitted(c, table) for c in chunks]  # not timed: the records as a producer has them
                writer = ChunkWriter(catalog, table)
                t0 = time.perf_counter()
                committed = [writer.write_table(c) for c in data]
                runs[side].append(time.perf_counter() - t0)
                staged[side] = sum(r.rows for r in committed)
                if side == "keyed":
                    last_keyed = table
            console.print(
                f"  ingest rep {rep + 1}/{reps}: keyed {rows / runs['keyed'][-1]:,.0f} rows/s, "
                f"append {rows / runs['append'][-1]:,.0f} rows/s"
            )
        shown = live_rows(catalog, last_keyed)
    finally:
        catalog.close()
    if shown != distinct:
        result.notes.append(f"check failed (ingest): the keyed table shows {shown:,} rows, {distinct:,} keys")
    if staged["append"] != rows:
        result.notes.append(f"check failed (ingest): the append table staged {staged['append']:,} rows")
    keyed_s, append_s = min(runs["keyed"]), min(runs["append"])
    ratio = append_s / keyed_s
    result.metrics.append(
        Metric("ingest rows/s (keyed vs append)", rows / keyed_s, "rows/s", rows / append_s, True)
    )
    result.params["ingest"] = {
        "records": rows,
        "chunk_rows": chunk_rows,
        "updating_records": updates,
        "distinct_keys": distinct,
        "rows_staged": staged,
        "runs_s": runs,
    }
    t = RichTable(title=f"1. Ingest of {rows:,} records in chunks of {chunk_rows:,}", title_justify="left")
    for col in ("metric", "keyed table", "append table", "keyed / append"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    keyed_rate, append_rate = fmt(rows / keyed_s, "rows/s"), fmt(rows / append_s, "rows/s")
    t.add_row("rows/s (goal ≥ 0.5x)", keyed_rate, append_rate, fmt_ratio(ratio))
    t.add_row("seconds (best of reps)", fmt(keyed_s, "s"), fmt(append_s, "s"), fmt_ratio(keyed_s / append_s))
    t.add_row("rows staged", f"{staged['keyed']:,}", f"{staged['append']:,}", "")
    t.add_row("records updating a key / distinct keys", f"{updates:,} / {distinct:,}", "", "")
    console.print(t)
    console.print(
        f"  upsert ingest at {ratio:.2f}x the rows/s of append ingest "
        f"(goal ≥ 0.5x: {'met' if ratio >= 0.5 else 'NOT met'})"
    )


# -- 2. query ------------------------------------------------------------------------------
def build_query_tables(catalog: Any, keys: int, seed: int = 23) -> tuple[Any, Any, int]:
    """The keyed and the append table of the query measurement; returns them and an updated key."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from ingest.chunks import ChunkWriter
    from scheduler.roll import Roller

    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1_000_000, keys)
    updated = np.sort(rng.choice(keys, int(keys * QUERY_UPDATE_SHARE), replace=False))
    new_values = rng.integers(0, 1_000_000, len(updated))
    gone = pa.array(updated)
    keyed, plain = create(catalog, "bench.kv", True), create(catalog, "bench.plain", False)
    quarter = -(-keys // QUERY_ROLLED_PARTITIONS)
    for table in (keyed, plain):
        writer, roller = ChunkWriter(catalog, table), Roller(catalog)
        for start in range(0, keys, quarter):
            ids = np.arange(start, min(start + quarter, keys))
            data = records(ids, values[start : start + len(ids)], "c")
            if table is plain:  # the same live rows: not the old versions of the updated keys
                data = data.filter(pc.invert(pc.is_in(data.column("id"), value_set=gone)))
            writer.write_table(fitted(data, table))
            roller.roll_table(table, force=True)
        step = -(-len(updated) // QUERY_UPDATE_CHUNKS)
        for start in range(0, len(updated), step):
            ids = updated[start : start + step]
            writer.write_table(fitted(records(ids, new_values[start : start + step], "u"), table))
    return keyed, plain, int(updated[len(updated) // 2])


@dataclass
class Prepared:
    """What the measurements of queries and rolls start from, made while no measurement runs."""

    catalog: Any  # the query tables'
    keyed: Any
    plain: Any
    key: int  # an updated key: the point lookup's
    spark: Any
    rolled: dict[str, Path]  # the rolled tables' warehouses, by side
    built: dict[str, dict[str, Any]]  # how their builds went
    seconds: dict[str, float]


def prepare(scale: dict[str, Any], tmp: Path) -> Prepared:
    """At once (nothing is measured meanwhile): Spark starts, the query tables are built, and the two
    tables of rolled partitions are built, each in a process of its own."""
    from metastore.catalog import Catalog
    from streampart.query import spark_session

    keys, n, per = scale["keys_query_rows"], scale["keys_roll_partitions"], scale["keys_roll_rows"]
    rolled = {side: tmp / f"roll-{side}" for side in ("keyed", "append")}
    console.print(
        f"  preparing at once: Spark, the query tables, and two tables of {n:,} rolled partitions × {per} "
        "keys (one process each) …"
    )
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=spawn) as procs, ThreadPoolExecutor(1) as threads:
        builds = {
            side: procs.submit(build_rolled, str(home), side == "keyed", n, per)
            for side, home in rolled.items()
        }
        spark_future = threads.submit(timed, lambda: warm_spark(spark_session(), tmp))
        catalog = Catalog.open(tmp / "query")
        (keyed, plain, key), build_s = timed(partial(build_query_tables, catalog, keys))
        console.print(f"  query tables built in {build_s:.1f} s")
        spark, spark_s = spark_future.result()
        console.print(f"  Spark started in {spark_s:.1f} s")
        built = {side: f.result() for side, f in builds.items()}
    for side, b in built.items():
        console.print(
            f"  {side}: {n:,} partitions built in {b['seconds']:.1f} s; a build roll took "
            f"{b['first_rolls_s']:.3f} s on average over the first tenth, "
            f"{b['last_rolls_s']:.3f} s over the last"
        )
    seconds = {"query_tables": build_s, "spark_start": spark_s}
    seconds.update({f"{side}_partitions": b["seconds"] for side, b in built.items()})
    return Prepared(catalog, keyed, plain, key, spark, rolled, built, seconds)


def collect_counting_jobs(spark: Any, catalog: Any, sql: str, group: str) -> tuple[list[Any], int]:
    """:func:`collect`, and how many Spark jobs it ran."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        rows = collect(spark, catalog, sql)
    finally:
        sc.setJobGroup("", "")
    return rows, len(sc.statusTracker().getJobIdsForGroup(group))


def measure_queries(scale: dict[str, Any], result: BenchResult, prepared: Prepared) -> None:
    from rich.table import Table as RichTable

    keys, reps = scale["keys_query_rows"], scale["keys_query_reps"]
    queries = {q: QUERIES[q] for q in scale["keys_queries"]}
    catalog, keyed, plain, key = prepared.catalog, prepared.keyed, prepared.plain, prepared.key
    spark = prepared.spark
    names = {"keyed": str(keyed.name), "append": str(plain.name)}
    runs: dict[tuple[str, str], list[float]] = {}
    answers: dict[tuple[str, str], Any] = {}
    jobs: dict[tuple[str, str], int] = {}
    for side in ("keyed", "append"):  # warm-up, not counted: the first query of each side
        collect(spark, catalog, next(iter(queries.values())).format(t=names[side], key=key))
    for query, sql in queries.items():
        for rep in range(reps):
            sides = ["keyed", "append"] if rep % 2 == 0 else ["append", "keyed"]
            for side in sides:
                text = sql.format(t=names[side], key=key)
                group = f"bench-keys-{query}-{side}-{rep}"
                (rows, jobs[query, side]), seconds = timed(
                    partial(collect_counting_jobs, spark, catalog, text, group)
                )
                answer = [tuple(r) for r in rows]
                if answers.setdefault((query, side), answer) != answer:
                    result.notes.append(f"check failed ({query}, {side}): answers differ between reps")
                runs.setdefault((query, side), []).append(seconds)
        best = {side: min(runs[query, side]) for side in ("keyed", "append")}
        console.print(f"  {query}: keyed {best['keyed']:.3f} s, append {best['append']:.3f} s")
    for rep in range(1 + reps):
        for side, table in (("keyed", keyed), ("append", plain))[:: 1 if rep % 2 == 0 else -1]:
            shown, seconds = timed(partial(live_rows, catalog, table))
            answers.setdefault(("read_batches", side), [(shown,)])
            if rep:
                runs.setdefault(("read_batches", side), []).append(seconds)
    for query in [*queries, "read_batches"]:
        if answers[query, "keyed"] != answers[query, "append"]:
            result.notes.append(
                f"check failed ({query}): keyed {answers[query, 'keyed'][:3]} ≠ append "
                f"{answers[query, 'append'][:3]}"
            )
    live = answers["count(*)", "keyed"][0][0]
    t = RichTable(
        title=(
            f"2. Query of {keys:,} keys in {QUERY_ROLLED_PARTITIONS} rolled partitions, "
            f"{int(keys * QUERY_UPDATE_SHARE):,} of them updated in the open partition "
            f"({QUERY_UPDATE_CHUNKS} chunks): best of {reps}"
        ),
        title_justify="left",
    )
    for col in ("query", "keyed table", "append table", "keyed / append", "Spark jobs"):
        t.add_column(col, justify="left" if col == "query" else "right")
    worst = 0.0
    for query in [*queries, "read_batches"]:
        k, a = min(runs[query, "keyed"]), min(runs[query, "append"])
        label = f"SQL {query}" if query in queries else "read_batches (no Spark)"
        result.metrics.append(Metric(label, k, "s", a))
        counted = f"{jobs[query, 'keyed']} / {jobs[query, 'append']}" if query in queries else ""
        t.add_row(label, fmt(k, "s"), fmt(a, "s"), fmt_ratio(k / a), counted)
        if query in queries:
            worst = max(worst, k / a)
    console.print(t)
    differ = any(n.startswith("check failed (") for n in result.notes)
    console.print(
        f"  {live:,} live rows each side, answers {'NOT equal' if differ else 'equal'}; "
        f"worst SQL ratio {worst:.2f}x (goal ≤ 2x: {'met' if worst <= 2 else 'NOT met'})"
    )
    result.params["query"] = {
        "keys": keys,
        "rolled_partitions": QUERY_ROLLED_PARTITIONS,
        "updated_keys": int(keys * QUERY_UPDATE_SHARE),
        "update_chunks": QUERY_UPDATE_CHUNKS,
        "reps": reps,
        "queries": queries,
        "runs_s": {f"{q} / {s}": v for (q, s), v in runs.items()},
        "spark_jobs": {f"{q} / {s}": v for (q, s), v in jobs.items()},
    }


# -- 3. roll -------------------------------------------------------------------------------
ROLL_TABLE = "bench.rolled"


def build_rolled(warehouse: str, keyed: bool, partitions: int, per: int) -> dict[str, Any]:
    """``partitions`` rolled partitions of ``per`` keys each (partition k: keys k*per … k*per+per-1),
    one chunk and one forced roll each, in a fresh warehouse. Runs in a process of its own."""
    from ingest.chunks import ChunkWriter
    from metastore.catalog import Catalog
    from scheduler.roll import Roller

    catalog = Catalog.open(Path(warehouse))
    side = "keyed" if keyed else "append"
    try:
        table = create(catalog, ROLL_TABLE, keyed)
        writer, roller = ChunkWriter(catalog, table), Roller(catalog)
        rolls: list[float] = []
        t0 = time.perf_counter()
        for k in range(partitions):
            ids = list(range(k * per, (k + 1) * per))
            writer.write_table(fitted(records(ids, ids, "c"), table))
            rolls.append(timed(lambda: roller.roll_table(table, force=True))[1])
            if (k + 1) % max(1, partitions // 5) == 0:
                done = f"{k + 1:,}/{partitions:,} partitions rolled ({time.perf_counter() - t0:.0f} s)"
                print(f"  building {side}: {done}", flush=True)
        tenth = max(1, partitions // 10)
        return {
            "seconds": time.perf_counter() - t0,
            "first_rolls_s": sum(rolls[:tenth]) / tenth,
            "last_rolls_s": sum(rolls[-tenth:]) / tenth,
            "partitions": len(catalog.partitions(table)),
        }
    finally:
        catalog.close()


def sweep_roller(catalog: Any) -> Any:
    """A :class:`~scheduler.roll.Roller` that keeps the ``KeyedSweep`` it made and times the sweep
    (``sweep_seconds``: a keyed table's ``_keyed_sweep``, an append table's ``_compact``)."""
    from scheduler.roll import Roller

    class SweepRoller(Roller):
        sweep: Any = None
        sweep_seconds: float = 0.0

        def _keyed_sweep(self, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                self.sweep = super()._keyed_sweep(*args, **kwargs)
                return self.sweep
            finally:
                self.sweep_seconds += time.perf_counter() - t0

        def _compact(self, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return super()._compact(*args, **kwargs)
            finally:
                self.sweep_seconds += time.perf_counter() - t0

    return SweepRoller(catalog)


def roll_variants(partitions: int, per: int) -> dict[str, list[int]]:
    """The keys of the partition rolled in each case (``partitions`` keys each)."""
    total = partitions * per
    few = max(1, min(FEW_PARTITIONS, partitions // per))  # every key of these: at most ``partitions`` keys
    every = [p * partitions // few for p in range(few)]  # evenly spread
    few_keys = [p * per + r for p in every for r in range(per)]
    few_case = f"keys in {few} partition{'s' if few != 1 else ''}"
    return {
        "append": [p * per + p % per for p in range(partitions)],
        f"keys in all {partitions:,} partitions": [p * per + p % per for p in range(partitions)],
        few_case: few_keys + list(range(total, total + partitions - len(few_keys))),
        "new keys only": list(range(total, total + partitions)),
    }


def roll_once(warehouse: Path, saved: Path, ids: list[int]) -> dict[str, Any]:
    """Restore ``warehouse`` from ``saved``, commit one chunk of ``ids`` (new values, op ``u``) and time
    its forced roll; what the roll did, and the live rows after it (the metastore's counts)."""
    from ingest.chunks import ChunkWriter
    from metastore.catalog import Catalog
    from metastore.delta import arrivals
    from metastore.delta.layout import parse_partition_value
    from metastore.delta.log import commit_actions

    shutil.rmtree(warehouse, ignore_errors=True)
    shutil.copytree(saved, warehouse)
    # This process keeps the arrival tags it read from each commit file, by path, as commit files never
    # change; here they do: the log was rewound, and the next commit file, of the same name, is another.
    arrivals._cache.clear()
    catalog = Catalog.open(warehouse)
    try:
        table = catalog.table(ROLL_TABLE)
        ChunkWriter(catalog, table).write_table(fitted(records(ids, [i + 1 for i in ids], "u"), table))
        roller = sweep_roller(catalog)
        t0 = time.perf_counter()
        [done] = roller.roll_table(table, force=True)
        seconds = time.perf_counter() - t0
        roll = catalog.store.get_roll(done.roll)
        removed_elsewhere = 0
        assert roll.sweep_version is not None
        for action in commit_actions(table, roll.sweep_version) or []:
            a = action.get("remove")
            if a is not None:
                value = parse_partition_value(a["partitionValues"][table.partition_column])
                removed_elsewhere += value != roll.partition_value
        counted = sum(p.rows or 0 for p in catalog.partitions(table))
    finally:
        catalog.close()
    sweep = roller.sweep
    return {
        "seconds": seconds,
        "sweep_seconds": roller.sweep_seconds,
        "rows": done.rows,
        "files_scanned": sweep.files_scanned if sweep else 0,
        "files_skipped": sweep.files_skipped if sweep else 0,
        "files_rewritten": sweep.files_rewritten if sweep else 0,
        "versions_removed": sweep.versions_removed if sweep else 0,
        "removed_in_commit": removed_elsewhere,
        "rows_after": counted,
    }


def measure_roll(scale: dict[str, Any], result: BenchResult, tmp: Path, prepared: Prepared) -> None:
    from rich.table import Table as RichTable

    n, per, reps = scale["keys_roll_partitions"], scale["keys_roll_rows"], scale["keys_roll_reps"]
    homes, built = prepared.rolled, prepared.built
    saved = {side: tmp / f"saved-{side}" for side in homes}
    for side in homes:
        shutil.copytree(homes[side], saved[side])
    variants = roll_variants(n, per)
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    order = list(variants)
    for rep in range(reps):
        for case in order if rep % 2 == 0 else order[::-1]:
            side = "append" if case == "append" else "keyed"
            runs[case].append(roll_once(homes[side], saved[side], variants[case]))
        console.print(f"  roll rep {rep + 1}/{reps} done")
    old_keys = set(range(n * per))
    expected = {case: n * per + len(set(ids) - old_keys) for case, ids in variants.items()}
    expected["append"] = n * per + n  # every row stays
    for case, case_runs in runs.items():
        for r in case_runs:
            if r["rows_after"] != expected[case]:
                result.notes.append(
                    f"check failed (roll, {case}): {r['rows_after']:,} rows counted after it, "
                    f"{expected[case]:,} expected"
                )
            if r["removed_in_commit"] != r["files_rewritten"]:
                result.notes.append(
                    f"check failed (roll, {case}): the sweep rewrote {r['files_rewritten']} files, its "
                    f"commit removes {r['removed_in_commit']} of other partitions"
                )

    def best(case: str, key: str = "seconds") -> float:
        return min(r[key] for r in runs[case])

    base = best("append")
    t = RichTable(
        title=f"3. Roll of a partition of {n:,} rows with {n:,} standard partitions of {per} keys beside it "
        f"(best of {reps})",
        title_justify="left",
    )
    for col in ("partition rolled", "roll", "sweep / compact", "files scanned", "skipped by key range",
                "files rewritten", "versions removed", "roll / append roll"):  # fmt: skip
        t.add_column(col, justify="left" if col == "partition rolled" else "right")
    for case in variants:
        r = runs[case][-1]
        seconds = best(case)
        t.add_row(
            case if case != "append" else "append table (baseline)",
            fmt(seconds, "s"),
            fmt(best(case, "sweep_seconds"), "s"),
            f"{r['files_scanned']:,}",
            f"{r.get('files_skipped', 0):,}",
            f"{r['files_rewritten']:,}",
            f"{r['versions_removed']:,}",
            fmt_ratio(seconds / base),
        )
        if case != "append":
            result.metrics.append(Metric(f"roll: {case}", seconds, "s", base))
    console.print(t)
    spread = next(iter(c for c in variants if c.startswith("keys in all")))
    s = runs[spread][-1]
    result.metrics += [
        Metric("roll: files scanned", s["files_scanned"], "files"),
        Metric("roll: files rewritten", s["files_rewritten"], "files"),
        Metric("roll: versions removed", s["versions_removed"], ""),
    ]
    scan_ms = 1000 * best("new keys only", "sweep_seconds") / max(1, s["files_scanned"])
    console.print(
        f"  keyed roll touching all {n:,} partitions: {best(spread):.2f} s, {best(spread) / base:.1f}x the "
        f"append roll ({base:.3f} s); its sweep alone {best(spread, 'sweep_seconds'):.2f} s. Scanning the "
        f"other {s['files_scanned']:,} files costs about {scan_ms:.2f} ms a file (the sweep of new keys only)"
    )
    result.params["roll"] = {
        "partitions": n,
        "keys_per_partition": per,
        "reps": reps,
        "build": built,
        "runs": runs,
    }


# -- the benchmark -------------------------------------------------------------------------
def run(scale: dict[str, Any]) -> BenchResult:
    ingest_rows, chunk = scale["keys_ingest_rows"], scale["keys_ingest_chunk"]
    keys, n = scale["keys_query_rows"], scale["keys_roll_partitions"]
    result = BenchResult(
        name=NAME,
        title="Keyed tables: upsert ingest, merge on read, keyed rolls (against tables of appends)",
        method=[
            f"Tables: arrival mode, columns {SCHEMA}; keyed ones Keys(columns=('id',), sequence_by=None, "
            "op_column='op') (newest by arrival), upserts only; SQLite metastore in the warehouse.",
            f"Ingest: {ingest_rows:,} records (about {UPDATE_SHARE:.0%} updating a key written before, "
            f"drawn uniformly) in chunks of {chunk:,}, ChunkWriter.write_table, into a fresh keyed table and "
            f"a fresh table without keys; sides alternate, best of {scale['keys_ingest_reps']} reps; rows/s "
            "= records / seconds. The keyed table's live rows are checked against the distinct keys.",
            f"Query: {keys:,} keys in {QUERY_ROLLED_PARTITIONS} chunks, each rolled (forced); then "
            f"{QUERY_UPDATE_SHARE:.0%} of the keys updated in {QUERY_UPDATE_CHUNKS} chunks left in the open "
            "partition. The append table holds the same live rows in the same layout. Each query through "
            "streampart.query.run_sql(...).collect() on one SparkSession (default SparkConfig, local[2]), "
            "pin and planning included; the first query run once on each side to warm up, then best of "
            f"{scale['keys_query_reps']}, sides alternating; answers compared. read_batches: every row of "
            "streampart.snapshots.read_batches(pin(…)).",
            f"Roll: {n:,} partitions of {scale['keys_roll_rows']} keys built by one chunk + "
            "Roller.roll_table(force=True) each, the keyed and the append table built at once in two "
            "processes (while Spark starts and the query tables are built, before any query is timed); "
            "then, Spark stopped, restored from a copy before each roll, one chunk of "
            f"{n:,} rows and its forced roll timed (Roller.roll_table, wall clock), best of "
            f"{scale['keys_roll_reps']}. Sweep counts from the KeyedSweep the roll made, checked against "
            "its commit's removes; the rows the metastore counts afterwards checked.",
        ],
        baseline="the same records / rows in a table without keys, same layout, same run",
        params={
            "ingest_records": ingest_rows,
            "ingest_chunk": chunk,
            "query_keys": keys,
            "roll_partitions": n,
        },
    )
    result.notes.append(f"load average at start: {os.getloadavg()[0]:.1f}")
    with workdir("keys") as tmp:
        _, seconds = timed(partial(measure_ingest, scale, result, tmp))
        result.params["ingest_seconds"] = round(seconds, 1)
        console.print(f"  (ingest took {seconds:.1f} s)")
        prepared, seconds = timed(partial(prepare, scale, tmp))
        result.params["prepare_seconds"] = {"all": round(seconds, 1), **prepared.seconds}
        console.print(f"  (preparing took {seconds:.1f} s)")
        try:
            _, seconds = timed(partial(measure_queries, scale, result, prepared))
            result.params["query_seconds"] = round(seconds, 1)
            console.print(f"  (queries took {seconds:.1f} s)")
        finally:
            prepared.spark.stop()
            prepared.catalog.close()
        _, seconds = timed(partial(measure_roll, scale, result, tmp, prepared))
        result.params["roll_seconds"] = round(seconds, 1)
        console.print(f"  (rolls took {seconds:.1f} s)")
    result.notes.append(f"load average at end: {os.getloadavg()[0]:.1f}")
    return result
