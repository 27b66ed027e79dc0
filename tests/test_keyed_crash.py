"""Keyed tables under crashes and concurrency (invariants 2, 3, 4 and 6 for tables with a primary key).

A keyed table shows one row per live key: the newest version by its sequence column (if it has
one), then by arrival. Here real processes are SIGKILLed at every crash point of a keyed roll (whose
sweep also rewrites other partitions' files) and of a keyed chunk commit, then resumed or retried;
and several writer processes upsert overlapping keys while a roller process rolls again and again.
Every readable version of the table is then compared with a truth computed in plain Python from the
change log and the Delta version each chunk landed at, and after the last rolls with what delta-rs
(a plain Delta reader) shows.

This module is also the keyed writer worker the tests start: ``python -m tests.test_keyed_crash``
(see :func:`main`); ``tests/workers.py`` writes tables of appends only.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_script, worker_call

PROCESS_ROLL_CRASHES = [
    "roll-after-begin",  # partition ROLLING, table not sealed
    "roll-after-seal",  # sealed, nothing swept
    "roll-after-compact",  # the partition's and the other partitions' rewritten files written, not committed
    "roll-after-sweep",  # sweep committed (older versions gone elsewhere); partition still ROLLING
    "roll-before-finish",  # _SUCCESS written, partition still ROLLING, other partitions not counted anew
]

CHUNK_CRASHES = [
    "chunk-after-write",  # staged, commit never begun
    "chunk-before-delta-commit",  # COMMITTING recorded, no Delta commit
    "chunk-after-delta-commit",  # Delta commit landed, metastore not told
]

KEYS = 12  # keys of the crash tests: few, so every key has versions in several partitions


# --- the truth, in plain Python ------------------------------------------------------------------


@dataclass
class History:
    """The chunks a test knows landed, each with the Delta version it landed at: the truth at any version.

    A key's newest version is the greatest by the sequence column (``lsn``, on a table with
    ``sequence_by``), then by arrival: the version it landed at, then its place in its chunk (one chunk
    per commit here: each writer commits alone).
    """

    sequence: bool
    chunks: list[tuple[int, list[dict[str, Any]]]] = field(default_factory=list)

    def add(self, version: int, records: list[dict[str, Any]]) -> None:
        assert all(v != version for v, _ in self.chunks), f"two chunks landed at version {version}"
        self.chunks.append((version, records))

    def live_at(self, version: int | None = None) -> dict[int, tuple[int, str]]:
        rows: dict[int, tuple[tuple[int, int, int], dict[str, Any]]] = {}
        for v, records in sorted(self.chunks, key=lambda c: c[0]):
            if version is not None and v > version:
                break
            for place, r in enumerate(records):
                rank = (r["lsn"] if self.sequence else 0, v, place)
                old = rows.get(r["id"])
                if old is None or rank > old[0]:
                    rows[r["id"]] = (rank, r)
        return {k: (r["v"], r["op"]) for k, (_, r) in rows.items() if r["op"] != "d"}


def shown(rows: list[dict[str, Any]], where: str = "") -> dict[int, tuple[int, str]]:
    out: dict[int, tuple[int, str]] = {}
    for r in rows:
        assert r["id"] not in out, f"key {r['id']} shown twice {where}"
        out[r["id"]] = (r["v"], r["op"])
    return out


def read_at(catalog: Any, table: Any, version: int | None = None) -> dict[int, tuple[int, str]]:
    from metastore.snapshots import pin
    from streampart.snapshots import read_batches

    snap = pin(catalog, table, version)
    return shown([row for b in read_batches(snap) for row in b.to_pylist()], f"at version {snap.version}")


def newest_version(catalog: Any, table: Any) -> int:
    return int(catalog.load(table).version())


def assert_every_version(catalog: Any, table: Any, history: History, since: int = 0) -> int:
    """Every version of the table from ``since`` reads exactly as the truth at that version; the newest."""
    latest = newest_version(catalog, table)
    for v in range(since, latest + 1):
        assert read_at(catalog, table, v) == history.live_at(v), f"version {v} of {latest}"
    return latest


def delta_rs_rows(table: Any) -> dict[int, tuple[int, str]]:
    """What delta-rs, a plain Delta reader, shows of the table's newest version."""
    import deltalake

    from metastore.storage import delta_options

    dt = deltalake.DeltaTable(table.location, storage_options=delta_options(table.location))
    return shown(dt.to_pyarrow_table().to_pylist(), "by delta-rs")


def assert_standard_plain(catalog: Any, table: Any) -> None:
    """The standard partitions' files at the newest version, read plainly: at most one version of each
    key between them, and never a delete (after every roll, whatever is still streaming)."""
    import pyarrow.parquet as pq

    from metastore import storage
    from metastore.delta.files import live_files
    from metastore.models import PartitionState

    standard = {p.value for p in catalog.partitions(table, [PartitionState.STANDARD])}
    ids: list[int] = []
    for f in live_files(catalog.warehouse.load(table)):
        if f.partition in standard:
            with storage.open_input(storage.join(table.location, f.path)) as handle:
                rows = pq.read_table(handle, columns=["id", "op"]).to_pylist()
            assert all(r["op"] != "d" for r in rows), (
                f"a delete in standard partition {f.partition}: {f.path}"
            )
            ids += [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"a key twice in the standard partitions: {sorted(ids)}"


def assert_table_sound(catalog: Any, table: Any, history: History) -> list[str]:
    """After every partition rolled: plain readers see the truth, the metastore's counts are the log's
    and the check finds no error. Returns the stray files: those in a standard partition's directory
    that no version lists (a plain Parquet reader of the directory reads them); the orphan_file
    warnings of the check must name exactly those."""
    from metastore.delta.files import live_files, partition_dir_entries
    from metastore.integrity import check_table
    from metastore.models import PartitionState

    truth = history.live_at()
    assert read_at(catalog, table) == truth
    assert delta_rs_rows(table) == truth
    files = live_files(catalog.warehouse.load(table))
    live_rows: dict[datetime, int] = {}
    for f in files:
        live_rows[f.partition] = live_rows.get(f.partition, 0) + f.rows
    everything = catalog.partitions(table)
    parts = [p for p in everything if p.state is PartitionState.STANDARD]
    # what is not standard: the partition an arrival-mode table opened as it rolled last, empty
    others = [(p.value, p.state, live_rows.get(p.value)) for p in everything if p not in parts]
    assert len(others) <= 1 and all(s is PartitionState.STREAMING and n is None for _, s, n in others), others
    recorded = {p.value: p.rows for p in parts}
    assert recorded == {p.value: live_rows.get(p.value, 0) for p in parts}, "recorded rows != the log's"
    assert sum(live_rows.values()) == len(truth), "standard partitions hold exactly the live keys"
    replaced = {path for r in catalog.store.list_rolls(table.id, limit=1_000_000) for path in r.removed_files}
    known = {f.path for f in files} | replaced
    strays = [x for p in parts for x in partition_dir_entries(table, p.value) if x not in known]
    problems = check_table(catalog, table)
    assert [x for x in problems if x.severity == "error"] == [], problems
    assert sorted(x.path or "" for x in problems if x.kind == "orphan_file") == sorted(strays), problems
    return strays


# --- writing -------------------------------------------------------------------------------------


def jsonl(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def version_record(rng: random.Random, key: int, ts: datetime, lsn: int) -> dict[str, Any]:
    return {
        "id": key,
        "ts": (ts + timedelta(minutes=rng.randrange(60))).isoformat(),
        "v": rng.randrange(1000),
        "op": rng.choice(["c", "u", "u", "r", "d"]),
        "lsn": lsn,
    }


def some_versions(
    rng: random.Random, hours: list[datetime], keys: Sequence[int], n: int = 5, lsn: range = range(40)
) -> list[dict[str, Any]]:
    """A chunk of ``n`` versions of keys among ``keys``, each in one of ``hours`` (event time), lsn
    among ``lsn``: out of order, with ties; a key may appear twice in it (the chunk stages its newest)."""
    return [version_record(rng, rng.choice(keys), rng.choice(hours), rng.choice(lsn)) for _ in range(n)]


def write(catalog: Any, table: Any, history: History, records: list[dict[str, Any]], key: str | None = None):
    from ingest.chunks import ChunkWriter
    from ingest.formats import Format

    result = ChunkWriter(catalog, table).write(jsonl(records), Format.JSONL, key=key)
    assert result.version is not None
    history.add(result.version, records)
    return result


def keyed_table(catalog: Any, sequence: bool, event_time: bool) -> Any:
    from metastore.durations import parse_duration
    from metastore.models import Keys, Mode, TableName, TableSpec, parse_schema

    return catalog.create_table(
        TableSpec(
            name=TableName.parse("ns.kv"),
            columns=parse_schema("id BIGINT, ts TIMESTAMP, v BIGINT, op STRING, lsn BIGINT"),
            time_column="ts",
            mode=Mode.EVENT_TIME if event_time else Mode.ARRIVAL,
            roll_every=parse_duration("1h"),
            max_future=parse_duration("3650d"),
            keys=Keys(columns=("id",), sequence_by="lsn" if sequence else None, op_column="op"),
        )
    )


def future_hours(n: int) -> list[datetime]:
    """``n`` whole hours a month ahead: event-time partitions that are never due while a test runs."""
    from metastore.models.periods import period_start

    start = period_start(datetime.now(UTC) + timedelta(days=30), timedelta(hours=1))
    return [start + timedelta(hours=k) for k in range(n)]


def keyed_worker_call(catalog: Any, table: Any, *args: str, crashpoint: str | None = None) -> dict[str, Any]:
    """Arguments for ``subprocess.run``/``Popen`` of this module as a keyed writer (see :func:`main`)."""
    call = worker_call(catalog, table, *args, crashpoint=crashpoint)
    argv = call["args"]
    call["args"] = [argv[0], "-m", "tests.test_keyed_crash", *argv[3:]]
    return call


def acks_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def take_over(catalog: Any, table: Any) -> Any:
    """A roller that owns the dead roller's unfinished roll (its lease let lapse in the metastore's clock)."""
    from scheduler.roll import Roller

    [roll] = catalog.store.list_rolls(table.id, unfinished=True)
    resumed = Roller(catalog)
    catalog.store.claim_roll(
        roll, resumed.owner, timedelta(minutes=1), now=roll.lease_until + timedelta(seconds=1)
    )
    return resumed, roll


# --- 1. a keyed roll killed at each of its steps ---------------------------------------------------

# Each crash point on event time with a sequence column (deletes kept after the roll) on SQLite; those
# from the compaction on on event time by arrival on PostgreSQL; two on arrival mode (the next
# partition opens as the roll begins); every other pairing, and a bucket, in the soak run.
ROLL_LAYOUTS = [
    ("event-time+sequence", "sqlite", set(PROCESS_ROLL_CRASHES)),
    ("event-time+arrival", "postgresql", set(PROCESS_ROLL_CRASHES[2:])),
    ("arrival+sequence", "sqlite", {"roll-after-compact", "roll-after-sweep"}),
    ("event-time+sequence", "bucket", set()),
    ("event-time+arrival", "sqlite", set()),
    ("arrival+sequence", "postgresql", set()),
    ("arrival+sequence", "bucket", set()),
]
ROLL_CASES = [
    pytest.param(
        layout,
        backend,
        point,
        id=f"{layout}-{backend}-{point}",
        marks=() if point in quick else pytest.mark.soak,
    )
    for layout, backend, quick in ROLL_LAYOUTS
    for point in PROCESS_ROLL_CRASHES
]


@pytest.mark.process
@pytest.mark.parametrize(("layout", "storage_catalog", "point"), ROLL_CASES, indirect=["storage_catalog"])
def test_a_keyed_roll_killed_at_each_step_then_resumed_reads_the_truth_at_every_version(
    storage_catalog, layout: str, point: str
) -> None:
    """The rolled partition P's keys have older versions in an earlier standard partition S and in
    another open partition Q, so its sweep rewrites their files in its commit. A roller process is
    SIGKILLed at ``point`` of P's roll; right then, as writers carry on (older and newer versions of
    P's keys into Q; nothing into P), after the roll is resumed and after every partition rolled,
    every version reads exactly as the truth, one row per key; then delta-rs shows the truth, the
    counts are the log's, the check finds no error and no stray file is left."""
    from metastore.models import PartitionState
    from scheduler.roll import Roller

    catalog = storage_catalog
    started = datetime.now(UTC)  # "nothing else is due" is asked as of then: an hour may turn meanwhile
    sequence = layout.endswith("+sequence")
    event_time = layout.startswith("event-time")
    table = keyed_table(catalog, sequence, event_time)
    history = History(sequence)
    rng = random.Random(f"{layout}-{point}")
    keys = range(KEYS)
    hours = future_hours(4)
    s, p, q, later = hours if event_time else [hours[0]] * 4  # (arrival mode: by when they land)

    def upserts(ks: range, ts: datetime, lsn: range) -> list[dict[str, Any]]:
        return [version_record(rng, k, ts, rng.choice(lsn)) | {"op": rng.choice("cur")} for k in ks]

    # S: versions of every key (the newest, so it keeps them all when it rolls), after a few chunks
    # spanning S, P and Q (split at commit; a key may appear twice in a chunk)
    for _ in range(4):
        write(catalog, table, history, some_versions(rng, [s, p, q], keys, lsn=range(20)))
    write(catalog, table, history, upserts(keys, s, range(20, 30)))
    [s_part] = [x for x in catalog.partitions(table) if x.value == s or not event_time]
    Roller(catalog).roll_partition(table, s_part, datetime.now(UTC))
    s = s_part.value
    if not event_time:
        p = q = catalog.store.streaming_partition(table.id).value
    for _ in range(4):
        write(catalog, table, history, some_versions(rng, [p, q], keys, lsn=range(40)))
    if event_time:  # Q: versions of every key, older than P's newest below
        write(catalog, table, history, upserts(keys, q, range(30, 40)))
    # P: the newest versions of most keys (deletes too): S's and Q's are removed by P's sweep
    write(catalog, table, history, [version_record(rng, k, p, 40 + rng.randrange(5)) for k in keys[:9]])
    rolled = p
    checked = assert_every_version(catalog, table, history) + 1

    proc = subprocess.run(
        **worker_call(
            catalog, table, "roller", "--count", "1", "--interval", "0", "--force", crashpoint=point
        ),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert catalog.store.get_partition(table.id, rolled).state is PartitionState.ROLLING
    assert read_at(catalog, table) == history.live_at()  # read right after the kill
    checked = assert_every_version(catalog, table, history, since=checked) + 1

    # writers carry on while the roll is stuck: nothing lands in P; older versions (by lsn) of some
    # of P's keys, newer ones by arrival, and others land in Q (arrival mode: the partition that
    # opened as the roll began)
    if event_time:
        from ingest.errors import LateDataError

        with pytest.raises(LateDataError):
            write(catalog, table, history, [version_record(rng, 0, p, 49)])
    else:
        q = catalog.store.streaming_partition(table.id).value
        assert q > rolled
    write(catalog, table, history, upserts(range(5), q, range(40)))
    for _ in range(3):  # (keys 5..8 stay P's newest: by arrival too)
        write(catalog, table, history, some_versions(rng, [q], [*range(5), *range(9, KEYS)], lsn=range(40)))
    assert read_at(catalog, table) == history.live_at()

    resumed, dead = take_over(catalog, table)
    results = resumed.roll_table(table, now=started)  # P's roll only: the other partitions are not due
    assert [(r.roll, r.resumed) for r in results] == [(dead.id, True)]
    assert Roller(catalog).roll_table(table, now=started) == []  # rolled exactly once
    assert catalog.store.get_partition(table.id, rolled).state is PartitionState.STANDARD
    roll = catalog.store.get_roll(dead.id)
    assert roll.sweep_version is not None
    rewritten = {
        _partition_of(table, a["remove"]) for a in commit_actions(table, roll.sweep_version) if "remove" in a
    }
    assert rewritten >= ({rolled, s, q} if event_time else {rolled, s}), f"P's sweep rewrote only {rewritten}"
    assert_standard_plain(catalog, table)
    checked = assert_every_version(catalog, table, history, since=checked) + 1

    # more versions after it, into a partition of their own, then every partition rolled
    for _ in range(3):
        write(catalog, table, history, some_versions(rng, [later], keys, lsn=range(40)))
    Roller(catalog).roll_table(table, force=True)
    assert_every_version(catalog, table, history)  # every version again: kept deletes are in force
    strays = assert_table_sound(catalog, table, history)  # from their arrival only
    # (the resumed roll deleted what the dead attempt wrote into other partitions' directories)
    assert strays == [], "files no version lists in a standard partition's directory"


def commit_actions(table: Any, version: int) -> list[dict[str, Any]]:
    from metastore.delta.log import commit_actions as actions

    return actions(table, version) or []


def _partition_of(table: Any, action: dict[str, Any]) -> datetime:
    from metastore.delta.layout import parse_partition_value

    return parse_partition_value(action["partitionValues"][table.partition_column])


# --- 2. a keyed chunk commit killed at each of its steps --------------------------------------------

CHUNK_CASES = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.soak),
    pytest.param("bucket", id="bucket", marks=pytest.mark.soak),
]


@pytest.mark.process
@pytest.mark.parametrize("point", CHUNK_CRASHES)
@pytest.mark.parametrize("storage_catalog", CHUNK_CASES, indirect=True)
def test_a_keyed_chunk_killed_at_each_step_then_retried_lands_its_versions_once(
    storage_catalog, tmp_path: Path, point: str
) -> None:
    """A writer process dies at ``point`` of a chunk of versions of keys that have older versions in a
    standard and in the streaming partition (and, twice, in the chunk itself). Meanwhile another
    chunk writes newer versions of some of those keys. The retry with the same idempotency key lands
    the chunk exactly once — at the version it had landed at, if it had, so the other chunk's newer
    versions still win — and every version reads as the truth of the order the chunks landed in."""
    from ingest.chunks import ChunkWriter
    from ingest.config import ChunkConfig
    from metastore import clock
    from metastore.delta.log import commit_chunks, commit_info
    from metastore.models import ChunkState
    from scheduler.roll import Roller
    from tests.workers import write_retrying

    catalog = storage_catalog
    table = keyed_table(catalog, sequence=False, event_time=False)  # newest by arrival: order matters
    history = History(sequence=False)
    rng = random.Random(point)
    ts = future_hours(1)[0]
    write(catalog, table, history, [version_record(rng, k, ts, 0) | {"op": "c"} for k in range(KEYS)])
    Roller(catalog).roll_table(table, force=True)  # a standard partition holds every key
    write(catalog, table, history, some_versions(rng, [ts], range(KEYS), 8))
    crashed = [version_record(rng, k, ts, 0) for k in range(KEYS)]
    crashed += [version_record(rng, 3, ts, 0) | {"op": "u"}, version_record(rng, 5, ts, 0) | {"op": "d"}]
    content = tmp_path / "crashed.jsonl"
    content.write_bytes(jsonl(crashed))
    args = ("write", "--file", str(content), "--key", "kc-0", "--commit-timeout", "0.3")
    proc = subprocess.run(
        **keyed_worker_call(catalog, table, *args, crashpoint=point), capture_output=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL and acks_of(proc.stdout) == [], proc.stderr
    chunk = catalog.store.find_chunk_by_key(table.id, "kc-0")
    landed = catalog.warehouse.find_chunk_commit(table, chunk.id, 0)
    if point == "chunk-after-delta-commit":
        assert landed is not None  # landed, though never acknowledged: visible whole at once
        history.add(landed, crashed)
    else:
        assert landed is None  # invariant 1: nothing of it visible
    assert_every_version(catalog, table, history)

    # another producer writes newer versions of some of the keys meanwhile
    newer = [version_record(rng, k, ts, 0) | {"op": "u"} for k in (0, 3, 5, 7)]
    other = write(catalog, table, history, newer)

    # the retry runs where the takeover deadline (2 × commit timeout) has passed: no sleeping
    config = ChunkConfig(commit_timeout=timedelta(seconds=0.3))
    with clock.use(clock.SystemClock(timedelta(seconds=0.7))):  # (a slow store: it may time out, retried)
        result = write_retrying(ChunkWriter(catalog, table, config), jsonl(crashed), "kc-0")
    assert result.chunk == chunk.id
    if landed is not None:
        assert result.version == landed < other.version  # answered its commit, not made again
    else:
        assert result.version is not None and result.version > other.version
        history.add(result.version, crashed)
    assert catalog.store.get_chunk(chunk.id).state is ChunkState.COMMITTED
    latest = newest_version(catalog, table)
    naming = [v for v in range(1, latest + 1) if chunk.id in commit_chunks(commit_info(table, v) or {})]
    assert naming == [result.version], "the chunk landed once"
    # its versions: one of each key it holds (its newest), from its one commit
    assert _rows_of_chunk(catalog, table, chunk.id) == len({r["id"] for r in crashed})
    assert_every_version(catalog, table, history)
    Roller(catalog).roll_table(table, force=True)
    assert_every_version(catalog, table, history)
    assert assert_table_sound(catalog, table, history) == []


def _rows_of_chunk(catalog: Any, table: Any, chunk_id: str) -> int:
    from metastore.delta.files import live_files

    return sum(f.rows for f in live_files(catalog.warehouse.load(table)) if f.chunk == chunk_id)


# --- 3. writers and a roller at once ------------------------------------------------------------


def concurrent_chunk(
    seed: int, writer: int, i: int, keys: int, hours: list[datetime]
) -> list[dict[str, Any]]:
    """The ``i``-th chunk of writer ``writer``: versions of overlapping keys, each with an lsn no other
    version has (so the truth of a table ordered by lsn does not depend on the order chunks land in)."""
    rng = random.Random(f"{seed}-{writer}-{i}")
    return [
        version_record(
            rng,
            rng.randrange(keys),
            rng.choice(hours),
            rng.randrange(1000) * 100_000 + writer * 10_000 + i * 10 + j,
        )
        for j in range(rng.randint(1, 6))
    ]


CONCURRENT_CASES = [
    pytest.param(True, "sqlite", id="sequence-by-sqlite"),
    pytest.param(False, "postgresql", id="arrival-postgresql"),
    pytest.param(True, "postgresql", id="sequence-by-postgresql", marks=pytest.mark.soak),
    pytest.param(False, "sqlite", id="arrival-sqlite", marks=pytest.mark.soak),
    pytest.param(True, "bucket", id="sequence-by-bucket", marks=pytest.mark.soak),
    pytest.param(False, "bucket", id="arrival-bucket", marks=pytest.mark.soak),
]


@pytest.mark.process
@pytest.mark.parametrize(("sequence", "storage_catalog"), CONCURRENT_CASES, indirect=["storage_catalog"])
def test_writers_upserting_overlapping_keys_while_a_roller_rolls_read_one_row_per_key_at_every_version(
    storage_catalog, tmp_path: Path, sequence: bool
) -> None:
    """Three writer processes upsert (and delete) overlapping keys while a roller process force-rolls
    the table again and again; this process reads the newest version meanwhile. Afterwards each
    chunk's version is taken from the log (its commit names it) and must be the one its writer was
    answered; every version then reads as the truth of that order — one row per live key — as every
    read made meanwhile did; and once every partition rolled, delta-rs shows exactly the truth.

    With ``sequence_by`` every version has an lsn of its own, so the truth does not depend on the
    order the chunks landed in; by arrival, it is the order of their commits in the log."""
    from metastore.delta.log import ROLL_KEY, SEAL_PROPERTY, SWEEP_KEY, commit_chunks, commit_info
    from metastore.snapshots import pin
    from scheduler.roll import Roller
    from streampart.snapshots import read_batches

    catalog = storage_catalog
    table = keyed_table(catalog, sequence, event_time=False)
    writers, count, keys, seed = 3, 10, 16, 5
    hours = future_hours(1)
    stop = tmp_path / "stop"
    roller = subprocess.Popen(
        **worker_call(
            catalog,
            table,
            "roller",
            "--count",
            "100000",
            "--interval",
            "0.5",
            "--force",
            "--until",
            str(stop),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    procs: list[subprocess.Popen[str]] = []
    seen: list[tuple[int, dict[int, tuple[int, str]]]] = []
    try:
        assert roller.stdout is not None
        first_roll = roller.stdout.readline()  # it is rolling: now the writers start
        assert first_roll.startswith("{"), roller.communicate(timeout=60)
        for w in range(writers):
            args = ["upsert", "--writer", str(w), "--count", str(count), "--keys", str(keys)]
            args += ["--seed", str(seed), "--interval", "0.2"]
            procs.append(
                subprocess.Popen(
                    **keyed_worker_call(catalog, table, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE
                )
            )
        deadline = time.monotonic() + 150
        while any(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, "the writers did not finish"
            snap = pin(catalog, table)
            rows = shown([r for b in read_batches(snap) for r in b.to_pylist()], f"at version {snap.version}")
            seen.append((snap.version, rows))
            time.sleep(0.4)
        outputs = [p.communicate(timeout=60) for p in procs]
    finally:
        stop.touch()
        try:
            roller_out, roller_err = roller.communicate(timeout=60)
        finally:
            roller.kill()
            for p in procs:
                p.kill()
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    assert roller.returncode == 0, roller_err
    rolled = [json.loads(first_roll), *acks_of(roller_out)]

    history = History(sequence)
    answered: dict[str, int] = {}
    for w, (out, _) in enumerate(outputs):
        acks = acks_of(out)
        assert [a["token"] for a in acks] == [f"k{w}-{i}" for i in range(count)]
        for i, a in enumerate(acks):
            answered[a["chunk"]] = a["version"]
            history.chunks.append((a["version"], concurrent_chunk(seed, w, i, keys, hours)))
    assert_standard_plain(catalog, table)
    Roller(catalog).roll_table(table, force=True)  # the last partition written to
    latest = newest_version(catalog, table)
    in_log: dict[str, int] = {}
    seals: list[int] = []
    rewrote_others = False
    for v in range(1, latest + 1):
        info = commit_info(table, v) or {}
        named = commit_chunks(info)
        assert len(named) <= 1, f"version {v} holds several chunks: {named}"  # one writer thread each
        for c in named:
            assert c not in in_log, f"chunk {c} landed twice"
            in_log[c] = v
        if ROLL_KEY in info and SEAL_PROPERTY in info:
            seals.append(v)
        if SWEEP_KEY in info:
            removed = {_partition_of(table, a["remove"]) for a in commit_actions(table, v) if "remove" in a}
            rewrote_others |= len(removed) > 1
    assert in_log == answered, "each chunk landed once, at the version its writer was answered"
    first, last = min(answered.values()), max(answered.values())
    assert any(first < v < last for v in seals), f"no roll began while the writers wrote: {rolled}"
    assert any(r["chunks"] for r in rolled), f"the roller swept no chunk: {rolled}"
    assert rewrote_others, "no sweep removed older versions from another partition"
    for version, rows in seen:  # what was read while they ran
        assert rows == history.live_at(version), f"read at version {version}"
    assert_every_version(catalog, table, history)
    assert assert_table_sound(catalog, table, history) == []


# --- the worker ----------------------------------------------------------------------------------


def main() -> None:
    """``python -m tests.test_keyed_crash write|upsert …``: a keyed writer, a JSON line per chunk it landed.

    ``write --file F --key K``: one chunk, F's bytes (JSON lines), idempotency key K.
    ``upsert --writer W --count N --keys K --seed S``: the chunks :func:`concurrent_chunk` makes,
    keys ``k<W>-<i>``, each retried with its key until it lands.
    """
    from ingest.chunks import ChunkWriter
    from ingest.config import ChunkConfig
    from ingest.formats import Format
    from metastore import clock
    from metastore.catalog import Catalog
    from tests.workers import say, write_retrying

    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["write", "upsert"])
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--metastore", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--file")
    ap.add_argument("--key")
    ap.add_argument("--writer", type=int, default=0)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--keys", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--interval", type=float, default=0.0)
    ap.add_argument("--commit-timeout", type=float, default=60.0)
    ap.add_argument("--clock-offset", type=float, default=0.0)
    args = ap.parse_args()
    cat = Catalog.open(args.warehouse, args.metastore)
    table = cat.table(args.table)
    config = ChunkConfig(commit_timeout=timedelta(seconds=args.commit_timeout))
    w = ChunkWriter(cat, table, config)
    with clock.use(clock.SystemClock(timedelta(seconds=args.clock_offset))):
        if args.kind == "write":
            r = w.write(Path(args.file).read_bytes(), Format.JSONL, key=args.key)
            say(token=args.key, chunk=r.chunk, rows=r.rows, version=r.version)
            return
        hours = future_hours(1)
        for i in range(args.count):
            token = f"k{args.writer}-{i}"
            content = jsonl(concurrent_chunk(args.seed, args.writer, i, args.keys, hours))
            r = write_retrying(w, content, token)
            say(token=token, chunk=r.chunk, rows=r.rows, version=r.version)
            time.sleep(args.interval)


if __name__ == "__main__":
    run_script(main)
