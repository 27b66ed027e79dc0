"""A namespace moved between metastores under continuous writes and rolls, with the mover killed
(SIGKILL, at a named crash point) at each step, then run again (issue 12, part 6; invariants 2, 6
and 12).

Two writer processes commit chunks with idempotency keys into ``shop.orders`` and a roller process
force-rolls it, all the time; ``streampart namespace move shop --to m2`` runs as its own process
and kills itself at the step under test. While it lies dead the namespace must be wholly in one
metastore, the one its route names; after the rerun (or ``--abort``) the writers stop, and every
acknowledged chunk is in the table exactly once (read by delta-rs), with its id and key, in the
namespace's one metastore, and the links into and out of the namespace still resolve.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.federation import PRIMARY
from metastore.links import LinkSpec
from metastore.models import ChunkState, Table, TableName
from tests.fixtures import make_table, mixed_federation
from tests.helpers import ROOT, all_ids, duplicates, records, wait_for, worker_call

ROWS = 10


@pytest.fixture
def federation(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    """The primary of the backend ``request.param`` names, ``m2`` of the other."""
    with mixed_federation(request.param, tmp_path) as catalog:
        yield catalog


def mover(catalog: Catalog, *args: str, crashpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    """``streampart namespace move …`` as its own process (SIGKILLed at ``crashpoint``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("STREAMPART_CRASHPOINT", None)
    if crashpoint:
        env["STREAMPART_CRASHPOINT"] = crashpoint
    argv = [sys.executable, "-m", "streampart", "--warehouse", str(catalog.warehouse.root),
            "--metastore", catalog.store.url, "namespace", "move", *args, "--json"]  # fmt: skip
    return subprocess.run(argv, cwd=ROOT, env=env, text=True, capture_output=True, timeout=180)


def whole_in_one_metastore(catalog: Catalog, home: str) -> None:
    """The namespace is wholly in ``home``, which its route names, and nothing of it elsewhere shows."""
    catalog.router.refresh(force=True)
    assert catalog.router.metastore_of("shop") == home
    there = catalog.home("shop").store
    assert sorted(str(t.name) for t in there.list_tables() if t.name.namespace == "shop") == [
        "shop.orders", "shop.orders__dead_letter"
    ]  # fmt: skip
    assert [str(x.name) for x in there.list_links("shop")] == ["shop.src"]
    listed = [str(t.name) for t in catalog.list_tables().merged() if t.name.namespace == "shop"]
    assert sorted(listed) == ["shop.orders", "shop.orders__dead_letter"]  # listed once, from its home


# Where the mover dies, the backend of the primary (m2 is the other), how the move is finished,
# and where the namespace lives while the mover lies dead.
MOVE_CRASHES = [
    # fenced in the primary, nothing copied: writers wait (retriable errors); the rerun drains, copies
    ("move-after-fence", "sqlite", "rerun", PRIMARY),
    # one table copied to m2, not the other: m2's partial copy is invisible and cleared by the rerun
    ("move-mid-copy", "postgresql", "rerun", PRIMARY),
    # the same crash rolled back: m2's partial copy goes, the primary is unfenced, writes carry on there
    ("move-mid-copy", "sqlite", "abort", PRIMARY),
    # a whole copy in m2, route not flipped: the rerun flips and cleans up
    ("move-before-flip", "postgresql", "rerun", PRIMARY),
    # flipped: m2 is the home (fenced until the rerun lifts it), the primary's rows left to remove
    ("move-after-flip", "sqlite", "rerun", "m2"),
    # one table's rows removed from the primary: the route names m2, where all of it is
    ("move-mid-cleanup", "postgresql", "rerun", "m2"),
]


def spawn_load(catalog: Catalog, table: Table, stop: Path) -> list[subprocess.Popen[str]]:
    """Two writer processes and a roller process on ``table``, until ``stop`` exists."""
    procs = [
        subprocess.Popen(
            **worker_call(catalog, table, "writer", "--writer", str(k), "--count", "100000",
                          "--rows", str(ROWS), "--until", str(stop)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for k in range(2)
    ]  # fmt: skip
    roller = subprocess.Popen(
        **worker_call(catalog, table, "roller", "--count", "100000", "--interval", "0.3", "--force",
                      "--until", str(stop)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    return [*procs, roller]


def setup_namespace(catalog: Catalog) -> tuple[Table, Table]:
    """``shop.orders`` (with its dead-letter table), ``other.src``, and a link each way."""
    table = make_table(catalog, "shop.orders", dead_letter=True)
    src = make_table(catalog, "other.src")
    catalog.links.create(LinkSpec(name=TableName.parse("shop.src"), source=src.name))
    catalog.links.create(LinkSpec(name=TableName.parse("other.orders"), source=table.name))
    ChunkWriter(catalog, src).write(records(range(5)), Format.JSONL, key="src-0")
    return table, src


def commits_go_on(catalog: Catalog, table: Table, home: str) -> None:
    """The writers commit more chunks into the namespace's home (they carry on after the move)."""
    moved = catalog.rebound(table)
    assert moved.metastore == home
    store = catalog.on(home).store
    committed = len(store.list_chunks(moved.id, [ChunkState.COMMITTED]))
    wait_for(
        lambda: len(store.list_chunks(moved.id, [ChunkState.COMMITTED])) >= committed + 4,
        "commits after the move",
        timeout=60,
    )


def stop_and_check(
    catalog: Catalog, table: Table, src: Table, stop: Path, procs: list[subprocess.Popen[str]], final: str
) -> None:
    """Stop the load; then every acknowledged chunk once, the namespace in ``final`` only, links resolve."""
    stop.touch()
    outputs = [p.communicate(timeout=120) for p in procs]
    for (_out, err), p in zip(outputs, procs, strict=True):
        assert p.returncode == 0, err
    acks = [json.loads(line) for out, _ in outputs[:-1] for line in out.splitlines() if line.startswith("{")]
    rolls = [json.loads(line) for line in outputs[-1][0].splitlines() if line.startswith("{")]
    assert acks and rolls
    # the namespace in exactly one metastore: the route's, with nothing of it left in the other
    whole_in_one_metastore(catalog, final)
    other = "m2" if final == PRIMARY else PRIMARY
    assert not catalog.on(other).store.holds_namespace("shop")
    assert catalog.primary.list_moves() == [] and catalog.namespaces.get("shop").moving_to is None
    # every acknowledged chunk exactly once (delta-rs reads the table), with its id and key there
    moved = catalog.table("shop.orders")
    assert moved.metastore == final and moved.uid == table.uid and moved.location == table.location
    ids = all_ids(moved)
    assert not duplicates(ids)
    assert sorted(ids) == sorted(i for a in acks for i in range(a["first"], a["first"] + ROWS))
    store = catalog.on(final).store
    for a in acks:
        chunk = store.find_chunk_by_key(moved.id, a["token"])
        assert chunk is not None and chunk.id == a["chunk"] and chunk.state is ChunkState.COMMITTED
    # the links out of the namespace and into it still resolve
    link = catalog.resolve("shop.src").link
    assert link is not None and catalog.links.source(link).uid == src.uid
    assert catalog.resolve("other.orders").table.metastore == final
    assert sorted(all_ids(catalog.resolve("other.orders").table)) == sorted(ids)


# One move, killed at every step in turn, each rerun resuming where the last one died; then a move
# back, killed mid-copy and rolled back. (move NS --to M, the crash point, where it lives meanwhile)
CHAIN = [
    (("shop", "--to", "m2"), "move-after-fence", PRIMARY),
    (("shop", "--to", "m2"), "move-mid-copy", PRIMARY),  # resumed at fencing
    (("shop", "--to", "m2"), "move-before-flip", PRIMARY),  # resumed at copying: copies afresh
    (("shop", "--to", "m2"), "move-after-flip", "m2"),  # resumed at copied: flips
    (("shop", "--to", "m2"), "move-mid-cleanup", "m2"),  # resumed at flipped
    (("shop", "--to", "m2"), None, "m2"),  # resumed at flipped: done
    (("shop", "--to", PRIMARY), "move-mid-copy", "m2"),  # back again …
    (("--abort", "shop"), None, "m2"),  # … rolled back: it stays in m2
]


@pytest.mark.process
@pytest.mark.parametrize("federation", ["sqlite"], indirect=True)
def test_a_move_killed_at_every_step_in_turn_under_writes_and_rolls(
    federation: Catalog, tmp_path: Path
) -> None:
    catalog = federation
    table, src = setup_namespace(catalog)
    stop = tmp_path / "stop"
    procs = spawn_load(catalog, table, stop)
    try:
        wait_for(lambda: len(all_ids(table)) >= 4 * ROWS, "the writers' first commits", timeout=90)
        for args, point, home in CHAIN:
            run = mover(catalog, *args, *(("--grace", "0.5") if "--to" in args else ()), crashpoint=point)
            if point is None:
                assert run.returncode == 0, run.stderr
            else:
                assert run.returncode == -signal.SIGKILL, run.stderr
            whole_in_one_metastore(catalog, home)  # no half-moved namespace, whatever step it died at
        commits_go_on(catalog, table, "m2")
    finally:
        stop.touch()
    stop_and_check(catalog, table, src, stop, procs, "m2")


@pytest.mark.soak  # about 45 s a case: the chain above covers every step in the default suite
@pytest.mark.parametrize(
    ("point", "federation", "finish", "home"),
    MOVE_CRASHES,
    indirect=["federation"],
    ids=[f"{p}-{f}-{b}" for p, b, f, _ in MOVE_CRASHES],
)
def test_a_move_killed_at_each_step_then_finished_loses_and_doubles_nothing(
    federation: Catalog, tmp_path: Path, point: str, finish: str, home: str
) -> None:
    catalog = federation
    table, src = setup_namespace(catalog)
    stop = tmp_path / "stop"
    procs = spawn_load(catalog, table, stop)
    try:
        wait_for(lambda: len(all_ids(table)) >= 4 * ROWS, "the writers' first commits", timeout=90)
        crashed = mover(catalog, "shop", "--to", "m2", "--grace", "0.5", crashpoint=point)
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        whole_in_one_metastore(catalog, home)  # no half-moved namespace while the mover lies dead
        if finish == "abort":
            done = mover(catalog, "--abort", "shop")
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["aborted"] is True
        else:
            done = mover(catalog, "shop", "--to", "m2", "--grace", "0.5")
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["resumed_at"] is not None
        final = PRIMARY if finish == "abort" else "m2"
        commits_go_on(catalog, table, final)
    finally:
        stop.touch()
    stop_and_check(catalog, table, src, stop, procs, final)


@pytest.mark.process
@pytest.mark.parametrize("federation", ["sqlite"], indirect=True)
def test_a_mover_dead_on_another_host_is_taken_over_within_seconds(federation: Catalog) -> None:
    """A mover that died on another host (its process cannot be looked up from here) held the move
    until its heartbeat was 60 s stale; it beats every second from a thread of its own now, so 10 s
    without one is enough, and the next mover takes the move over and finishes it."""
    catalog = federation
    table, _ = setup_namespace(catalog)
    ChunkWriter(catalog, table).write(records(range(ROWS)), Format.JSONL, key="before")
    crashed = mover(catalog, "shop", "--to", "m2", "--grace", "0", crashpoint="move-mid-copy")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    # as a mover on another host leaves it: its owner names that host, last seen just now
    [move] = catalog.primary.list_moves()
    assert move.heartbeat_at is not None
    elsewhere = catalog.primary.claim_move(
        move, "elsewhere:4242:0badf00d", stale_before=move.heartbeat_at + timedelta(seconds=1)
    )
    assert elsewhere.owner == "elsewhere:4242:0badf00d"
    since, busy = time.monotonic(), []
    while (done := mover(catalog, "shop", "--to", "m2", "--grace", "0")).returncode != 0:
        assert "elsewhere:4242:0badf00d" in done.stderr and done.stderr.count("\n") == 1, done.stderr
        busy.append(time.monotonic() - since)
        assert time.monotonic() - since < 60, "the dead mover's move was never taken over"
        time.sleep(0.5)
    took = time.monotonic() - since
    assert busy, "taken over while its heartbeat was fresh"
    assert took < 25, f"taken over after {took:.1f} s"
    assert json.loads(done.stdout)["resumed_at"] == "copying"
    whole_in_one_metastore(catalog, "m2")
    assert sorted(all_ids(catalog.rebound(table))) == list(range(ROWS))
