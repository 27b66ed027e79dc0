"""The roll daemons of a federation in-process (issue 12, part 5): one per metastore that takes writes.

A federation of the primary (SQLite or PostgreSQL), ``m1`` (a SQLite file, read-write-create),
``wl`` (a SQLite file whose whitelist lets it write ``wl_ok*`` only) and ``ro`` (read-only).
Each writable metastore gets a daemon holding the leadership lease in that metastore; ``ro``
gets none; ``wl`` rolls its whitelisted table and leaves the other alone. A metastore
registered or removed while the daemons run gets its daemon, or loses it, without a restart.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.models import PRIMARY, ChunkState, PartitionState
from metastore.store import Metastore
from scheduler.federation_daemons import FederationDaemons
from scheduler.housekeeping import Housekeeper
from scheduler.status import scheduler_status
from tests.fixtures import make_table
from tests.helpers import records, wait_for
from tests.scheduler.helpers import fast_config, fast_roll_config, metrics_samples


def _standard(catalog: Catalog, name: str) -> int:
    table = catalog.table(name)
    return len(catalog.partitions(table, [PartitionState.STANDARD]))


@pytest.fixture
def federation(catalog: Catalog, tmp_path: Path) -> Iterator[Catalog]:
    catalog.router.refresh_s = 0.5  # registry changes reach the supervisor within half a second
    catalog.federation.add("m1", f"sqlite:///{tmp_path / 'm1.sqlite'}", "read-write-create")
    wl = f"sqlite:///{tmp_path / 'wl.sqlite'}"
    other = Catalog.open(catalog.warehouse.root, wl)  # wl_other was made before wl joined, by its owner
    try:
        make_table(other, "wl_other.t", roll_every="2s")
    finally:
        other.close()
    catalog.federation.add("wl", wl, "read-write-create-whitelist", writable=["wl_ok*"], routes={})
    catalog.federation.set_route("wl_other", "wl")
    catalog.namespaces.create("wl_ok", metastore="wl")
    ro = f"sqlite:///{tmp_path / 'ro.sqlite'}"
    Catalog.open(catalog.warehouse.root, ro).close()
    catalog.federation.add("ro", ro, "read-only", routes={})
    catalog.namespaces.create("ops", metastore="m1")
    for name in ("web.t", "ops.t", "wl_ok.t"):
        table = make_table(catalog, name, roll_every="2s")
        ChunkWriter(catalog, table).write(records(range(5)), Format.JSONL, key=f"{name}-0")
    yield catalog


def test_a_daemon_per_writable_metastore_each_leading_in_its_own(federation: Catalog) -> None:
    catalog = federation
    daemons = FederationDaemons(catalog, fast_config(metrics=True), fast_roll_config())
    daemons.start()
    try:
        assert set(daemons.daemons) == {PRIMARY, "m1", "wl"}  # ro takes no writes: no daemon
        wait_for(lambda: all(daemons.leaders.values()), "every daemon to lead in its metastore")
        for name in (PRIMARY, "m1", "wl"):  # each lease in the metastore it fences
            lease = catalog.on(name).store.get_lease("roll-daemon")
            assert lease is not None and lease.holder == daemons.owner and lease.info["metastore"] == name
        assert catalog.on("ro").store.get_lease("roll-daemon") is None
        wait_for(
            lambda: all(_standard(catalog, t) >= 2 for t in ("web.t", "ops.t", "wl_ok.t")),
            "the tables of every writable metastore to roll",
        )
        # the whitelist lets wl write wl_ok only: wl_other's partitions stay as its owner left them
        assert _standard(catalog, "wl_other.t") == 0

        # one metrics port: each daemon's series labelled by metastore, and the federation's health
        assert daemons.metrics_port is not None
        samples = metrics_samples(daemons.metrics_port)
        for name in (PRIMARY, "m1", "wl"):
            assert samples[("streampart_scheduler_leader", (("metastore", name),))] == 1
        for name in (PRIMARY, "m1", "wl", "ro"):
            assert samples[("streampart_metastore_up", (("metastore", name),))] == 1
        assert samples[("streampart_route_table_version", ())] >= 1
        assert samples[("streampart_metastore_call_seconds_count", (("metastore", "m1"),))] > 0

        # status: each metastore's leader, the tables of all of them
        status = scheduler_status(catalog)
        leaders = {m["metastore"]: m["leader"] for m in status["metastores"]}
        assert {n for n, leader in leaders.items() if leader and leader["live"]} == {PRIMARY, "m1", "wl"}
        assert leaders["ro"] is None
        assert {(t["metastore"], t["table"]) for t in status["tables"]} >= {
            (PRIMARY, "web.t"), ("m1", "ops.t"), ("wl", "wl_ok.t"),
        }  # fmt: skip

        # the registry changes under it: a new metastore gets a daemon, a removed one loses it
        m2 = Path(catalog.warehouse.root).parent / "m2.sqlite"
        catalog.federation.add("m2", f"sqlite:///{m2}", "read-write-create")
        wait_for(lambda: daemons.leaders.get("m2"), "a daemon to lead in the new metastore m2")
        m2_daemon = daemons.daemons["m2"]
        catalog.federation.remove("m2")
        wait_for(lambda: "m2" not in daemons.daemons, "the supervisor to drop the removed metastore m2")
        wait_for(lambda: not m2_daemon.scheduler.running, "the daemon of m2 to stop")
        assert not m2_daemon.is_leader
        left = Metastore(f"sqlite:///{m2}")
        try:  # it let its lease go as it stopped
            lease = left.get_lease("roll-daemon")
            assert lease is not None and lease.holder is None
        finally:
            left.close()
        assert set(daemons.daemons) == {PRIMARY, "m1", "wl"}  # the others never stopped
        assert all(daemons.leaders.values())
    finally:
        daemons.stop()
    for name in (PRIMARY, "m1", "wl"):  # a clean stop releases every lease
        lease = catalog.on(name).store.get_lease("roll-daemon")
        assert lease is not None and lease.holder is None


def test_housekeeping_in_a_whitelisted_metastore_touches_only_its_writable_namespaces(
    federation: Catalog,
) -> None:
    catalog = federation
    wl = catalog.on("wl")
    ok, other = catalog.table("wl_ok.t"), catalog.table("wl_other.t")
    for table in (ok, other):  # reserved, never committed: due to expire once their TTL passed
        wl.store.reserve_chunk(table.id, "stuck", timedelta(seconds=1))
    daemons = FederationDaemons(catalog, fast_config(), fast_roll_config())
    may_touch = daemons._may_roll("wl")
    later = datetime.now(UTC) + timedelta(hours=1)
    report = Housekeeper(wl, may_touch=may_touch).run(now=later)
    assert report.expired == 1 and not report.errors
    expired = wl.store.find_chunk_by_key(ok.id, "stuck")
    assert expired is not None and expired.state is ChunkState.EXPIRED
    kept = wl.store.find_chunk_by_key(other.id, "stuck")
    assert kept is not None and kept.state is ChunkState.RESERVED


def test_a_metastore_dead_at_start_gets_its_daemon_once_it_answers(catalog: Catalog, private_pg: Any) -> None:
    """The others' daemons start at once; the dead one's starts when it comes back, no restart."""
    catalog.router.refresh_s = 0.5
    db = f"fd_dead_{uuid.uuid4().hex[:8]}"
    catalog.federation.add("m_dead", private_pg.create_database(db), "read-write-create")
    catalog.namespaces.create("far", metastore="m_dead")
    far = make_table(catalog, "far.t", roll_every="2s")
    private_pg.stop("immediate")
    # a process of its own, as `scheduler run` is: it has never reached m_dead
    fresh = Catalog.open(catalog.warehouse.root, catalog.store.url, refresh_s=0.5)
    daemons = FederationDaemons(fresh, fast_config(), fast_roll_config())
    try:
        daemons.start()
        assert set(daemons.daemons) == {PRIMARY}  # m_dead's is pending, the primary's runs
        wait_for(lambda: daemons.leaders.get(PRIMARY), "the primary's daemon to lead")
        assert "m_dead" not in daemons.daemons
        private_pg.start()
        wait_for(lambda: daemons.leaders.get("m_dead"), "m_dead's daemon to start and lead", timeout=60)
        wait_for(lambda: _standard(catalog, "far.t") >= 1, "far.t to roll", timeout=60)
        lease = catalog.on("m_dead").store.get_lease("roll-daemon")
        assert lease is not None and lease.holder == daemons.owner and far.metastore == "m_dead"
    finally:
        daemons.stop()
        fresh.close()
        catalog.close()
        private_pg.start()
        private_pg.drop_database(db)
