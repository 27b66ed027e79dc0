"""Replication of standard partitions to secondary clusters (issue 11), on SQLite and PostgreSQL.

A partition is wholly present on a secondary or absent: its files are copied, verified and
committed to the secondary's Delta table (at most once: a Delta application transaction per
partition) before the metastore records it present. Crashes at every step resume; bad input
is one clear error that changes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore import clock
from metastore.catalog import Catalog
from metastore.delta.layout import partition_dir
from metastore.errors import AlreadyExistsError, NotFoundError, UserInputError
from metastore.models import PartitionState, Table, iso
from metastore.replicas import REPLICA_KEY, CopyState, Replica, replica_table
from scheduler.replication import Replicator
from scheduler.roll import Roller
from tests.fixtures import add_clusters, make_table
from tests.helpers import all_ids, downgraded, ids_by_partition, live_adds, records, worker_call


def _table(
    catalog: Catalog, name: str = "ns.events", cluster: str = "c1", replicate_to: tuple[str, ...] = ("c2",)
) -> Table:
    return make_table(catalog, name, cluster=cluster, replicate_to=replicate_to)


def _rolled(catalog: Catalog, table: Table, partitions: int, rows: int = 10) -> list[int]:
    """Write and force-roll ``partitions`` partitions of ``rows`` rows each; the ids written."""
    w, ids = ChunkWriter(catalog, table), []
    for k in range(partitions):
        batch = list(range(k * 1000, k * 1000 + rows))
        w.write(records(batch), Format.JSONL)
        Roller(catalog).roll_table(table, force=True)
        ids += batch
    return ids


def _replica_commits(replica: Replica, table: Table) -> Counter[str]:
    """How often each partition was committed into the secondary's Delta log."""
    log = Path(replica.location) / "_delta_log"
    seen: Counter[str] = Counter()
    for f in sorted(log.glob("*.json")):
        for line in f.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info and REPLICA_KEY in info:
                seen[info[REPLICA_KEY]] += 1
    return seen


def _live_stats(location: str) -> dict[str, str]:
    """Each live file's ``stats`` as the Delta log's commit files hold them (the JSON text)."""
    return {path: add["stats"] for path, add in live_adds(location).items()}


def test_a_table_lives_on_its_primary_and_copies_standard_partitions_to_its_secondary(
    catalog: Catalog, tmp_path: Path
) -> None:
    add_clusters(catalog, tmp_path, "c1", "c2")
    table = _table(catalog)
    assert table.location == str((tmp_path / "c1").resolve() / "ns" / "events")
    [replica] = catalog.replicas.list(table)
    assert replica.location == str((tmp_path / "c2").resolve() / "ns" / "events")
    ids = _rolled(catalog, table, 3)
    ChunkWriter(catalog, table).write(records(range(9000, 9005)), Format.JSONL)  # streaming: never copied
    report = Replicator(catalog).replicate(table)
    assert len(report.copied) == 3 and not report.failed and report.bytes > 0
    copy = replica_table(table, replica)
    # the secondary is a Delta table of exactly the standard partitions, row for row
    primary = ids_by_partition(table)
    standard = {p.value for p in catalog.store.list_partitions(table.id) if p.state.value == "standard"}
    assert ids_by_partition(copy) == {v: primary[v] for v in standard}
    assert sorted(all_ids(copy)) == ids
    assert catalog.replicas.present_on(table, "c2") == standard
    assert catalog.replicas.present_on(table, "c1") == {
        p.value for p in catalog.store.list_partitions(table.id)
    }
    for value in standard:
        assert (Path(replica.location) / partition_dir(table, value) / "_SUCCESS").is_file()
    # each partition once in the secondary's log; a second pass copies nothing
    assert set(_replica_commits(replica, table).values()) == {1}
    assert Replicator(catalog).replicate(table).copied == []
    # the copies' adds carry the same statistics as the primary's (readers there skip files alike)
    copied, original = _live_stats(replica.location), _live_stats(table.location)
    assert copied and copied == {path: original[path] for path in copied}
    assert all("minValues" in json.loads(stats) for stats in copied.values())
    info = catalog.describe(table)
    by_value = {p["value"]: p["clusters"] for p in info["partitions"]}
    assert sorted(v for v, c in by_value.items() if c == ["c1", "c2"]) == sorted(
        p["value"] for p in info["partitions"] if p["state"] == "standard"
    )
    assert [p["clusters"] for p in info["partitions"] if p["state"] == "streaming"] == [["c1"]]
    assert info["replicas"][0]["cluster"] == "c2" and info["replicas"][0]["missing"] == []
    assert {c.checksum for c in catalog.store.list_copies(table.id)} != {None}


def test_a_replica_added_later_is_backfilled_and_a_dropped_one_leaves_nothing(
    catalog: Catalog, tmp_path: Path
) -> None:
    add_clusters(catalog, tmp_path, "c1", "c2", "c3")
    table = _table(catalog, replicate_to=())
    _rolled(catalog, table, 2)
    replica = catalog.replicas.add(table, "c3")
    values = sorted(p.value for p in catalog.store.list_partitions(table.id) if p.state.value == "standard")
    r = Replicator(catalog)
    assert [p.value for p in r.pending(table, replica)] == values
    from metastore.links import PartitionRange

    report = r.replicate(table, ["c3"], within=PartitionRange(start=values[0], end=values[1]))
    assert [c.partition for c in report.copied] == [values[0].isoformat().replace("+00:00", "Z")]
    assert catalog.replicas.present_on(table, "c3") == {values[0]}
    r.replicate(table)
    assert catalog.replicas.present_on(table, "c3") == set(values)
    catalog.replicas.drop(table, "c3")
    assert not Path(replica.location).exists()
    assert catalog.replicas.list(table) == [] and catalog.store.list_copies(table.id) == []
    catalog.store.remove_cluster("c3")  # nothing holds it now


def test_dropping_a_table_removes_its_replicas(catalog: Catalog, tmp_path: Path) -> None:
    add_clusters(catalog, tmp_path, "c1", "c2")
    table = _table(catalog)
    _rolled(catalog, table, 1)
    Replicator(catalog).replicate(table)
    [replica] = catalog.replicas.list(table)
    catalog.drop_table(table)
    assert not Path(replica.location).exists() and not Path(table.location).exists()
    assert catalog.store.list_replicas() == []


@pytest.mark.parametrize(
    ("make", "says", "error"),
    [
        (lambda c: _table(c, replicate_to=("c1",)), "c1 is the primary cluster of ns.events", UserInputError),
        (lambda c: _table(c, replicate_to=("nope",)), "cluster nope does not exist", NotFoundError),
        (lambda c: _table(c, cluster="nope", replicate_to=()), "cluster nope does not exist", NotFoundError),
        (lambda c: _table(c, replicate_to=("twin",)), "share the storage", UserInputError),
    ],
)
def test_bad_replicas_are_refused_and_nothing_is_made(
    catalog: Catalog, tmp_path: Path, make, says, error
) -> None:
    add_clusters(catalog, tmp_path, "c1")
    catalog.clusters.add("twin", str(tmp_path / "c1"), "local[2]")
    with pytest.raises(error, match=says):
        make(catalog)
    assert catalog.list_tables().merged() == [] and catalog.store.list_replicas() == []
    assert not (tmp_path / "c1" / "ns").exists()


def test_replica_commands_refuse_what_makes_no_sense(catalog: Catalog, tmp_path: Path) -> None:
    add_clusters(catalog, tmp_path, "c1", "c2")
    (tmp_path / "c3").mkdir()
    table = _table(catalog)
    with pytest.raises(AlreadyExistsError, match="replicates to c2 already"):
        catalog.replicas.add(table, "c2")
    with pytest.raises(NotFoundError, match=r"no replica on c1 \(its replicas: c2\)"):
        catalog.replicas.drop(table, "c1")
    with pytest.raises(UserInputError, match=r"cluster c2 is in use: it holds replicas of ns\.events"):
        catalog.store.remove_cluster("c2")
    with pytest.raises(UserInputError, match=r"cluster c1 is in use: tables ns\.events"):
        catalog.store.remove_cluster("c1")
    assert [r.cluster for r in catalog.replicas.list(table)] == ["c2"]
    (tmp_path / "c3" / "ns" / "events").mkdir(parents=True)
    (tmp_path / "c3" / "ns" / "events" / "left-over.parquet").write_bytes(b"x")
    catalog.clusters.add("c3", str(tmp_path / "c3"), "local[2]")
    with pytest.raises(UserInputError, match="exists already and is not empty"):
        catalog.replicas.add(table, "c3")
    assert [r.cluster for r in catalog.replicas.list(table)] == ["c2"]


def test_a_failing_copy_is_recorded_retried_after_backoff_and_then_lands(
    catalog: Catalog, tmp_path: Path
) -> None:
    add_clusters(catalog, tmp_path, "c1", "c2")
    table = _table(catalog)
    _rolled(catalog, table, 1)
    [replica] = catalog.replicas.list(table)
    [value] = catalog.replicas.present_on(table, "c1") - {catalog.store.streaming_partition(table.id).value}
    blocker = Path(replica.location) / partition_dir(table, value)
    blocker.write_text("not a directory")  # the copy cannot make its directory
    r = Replicator(catalog, retry_base=timedelta(hours=1))
    report = r.replicate(table)
    assert report.copied == [] and len(report.failed) == 1
    assert "copy of ns.events partition" in str(report.failed[0]) and report.failed[0].cluster == "c2"
    [copy] = catalog.store.list_copies(table.id)
    assert copy.state is CopyState.COPYING and copy.attempts == 1 and copy.error
    assert copy.retry_at is not None and copy.started_at is not None and copy.retry_at > copy.started_at
    assert r.replicate(table).failed == []  # waits for its retry time
    assert catalog.describe(table)["replicas"][0]["failing"][0]["attempts"] == 1
    blocker.unlink()
    assert len(r.replicate(table, include_waiting=True).copied) == 1
    [copy] = catalog.store.list_copies(table.id)
    assert (copy.state, copy.error, copy.retry_at) == (CopyState.PRESENT, None, None)


@pytest.mark.process
def test_a_stale_copier_that_lost_its_claim_commits_nothing_twice(catalog: Catalog, tmp_path: Path) -> None:
    """A copier paused past its lease: another copies and commits; the first's commit is refused
    by the partition's Delta application transaction, and it records nothing."""
    add_clusters(catalog, tmp_path, "c1", "c2")
    table = _table(catalog)
    _rolled(catalog, table, 1)
    [replica] = catalog.replicas.list(table)
    stale = subprocess.Popen(
        **worker_call(
            catalog, table, "replicator", "--count", "1", "--lease", "1", pausepoint="replica-before-commit:6"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        from tests.helpers import wait_for

        # its files are copied and its claim renewed after the last (the copier says so at the
        # pause before its commit, where it dwells 6 s); then its lease (1 s) lapses. Waiting on
        # the files alone raced with that last renewal on a busy machine: the claim was live again.
        assert stale.stderr is not None
        for line in stale.stderr:
            if "pausepoint replica-before-commit" in line:
                break

        def lapsed() -> bool:
            copies = catalog.store.list_copies(table.id)
            lease_until = copies[0].lease_until if copies else None
            return lease_until is not None and lease_until < datetime.now(UTC)

        assert list(Path(replica.location).glob("*/part-*.parquet")), "the stale copier copied no file"
        wait_for(lapsed, "the stale copier's lease to lapse", timeout=60)
        report = Replicator(catalog).replicate(table)
        assert len(report.copied) == 1
        out, _ = stale.communicate(timeout=60)
    finally:
        stale.kill()
    lines = [json.loads(x) for x in out.splitlines()]
    assert lines and all("error" in x for x in lines), lines
    assert set(_replica_commits(replica, table).values()) == {1}
    [copy] = catalog.store.list_copies(table.id)
    assert copy.state is CopyState.PRESENT
    assert sorted(all_ids(replica_table(table, replica))) == list(range(10))


@pytest.mark.parametrize(
    "point", ["replica-after-claim", "replica-after-file", "replica-before-commit", "replica-after-commit"]
)
@pytest.mark.process
def test_a_copier_killed_at_each_step_is_resumed_and_copies_once(
    catalog: Catalog, tmp_path: Path, point: str
) -> None:
    add_clusters(catalog, tmp_path, "c1", "c2")
    table = _table(catalog)
    ids = _rolled(catalog, table, 2)
    [replica] = catalog.replicas.list(table)
    killed = subprocess.run(
        **worker_call(catalog, table, "replicator", "--count", "1", "--lease", "1", crashpoint=point),
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    assert catalog.replicas.present_on(table, "c2") == set()  # nothing recorded as present yet
    import time

    time.sleep(1.2)  # the dead copier's lease lapses
    report = Replicator(catalog).replicate(table)
    assert len(report.copied) == 2 and report.copied[0].resumed
    assert sorted(all_ids(replica_table(table, replica))) == ids
    assert set(_replica_commits(replica, table).values()) == {1}
    leftovers = [p for p in Path(replica.location).rglob(".*.tmp")]
    assert leftovers == []
    assert os.listdir(Path(replica.location)) != []


@pytest.mark.process
def test_a_killed_copier_is_taken_over_within_seconds(catalog: Catalog, tmp_path: Path) -> None:
    """A copier SIGKILLed mid-copy held the copy for its whole lease (10 minutes here); its process
    lease now lapses ~8 s after its last renewal, and the next copier, which found the copy busy
    until then, takes it over and copies it once."""
    import time

    add_clusters(catalog, tmp_path, "c1", "c2")
    table = _table(catalog)
    ids = _rolled(catalog, table, 1)
    [replica] = catalog.replicas.list(table)
    killed = subprocess.run(
        **worker_call(catalog, table, "replicator", "--count", "1", "--lease", "600",
                      crashpoint="replica-after-file"),
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    [dead] = catalog.store.list_copies(table.id)
    assert dead.lease_until is not None and dead.lease_until > datetime.now(UTC) + timedelta(minutes=5)
    since, busy = time.monotonic(), 0
    while not (report := Replicator(catalog).replicate(table)).copied:  # busy: left for its holder
        busy += 1
        assert time.monotonic() - since < 60, "the dead copier's copy was never taken over"
        time.sleep(0.5)
    took = time.monotonic() - since
    assert busy > 0, "taken over while its process lease was live"
    assert took < 20, f"taken over after {took:.1f} s"
    assert [c.resumed for c in report.copied] == [True]
    assert sorted(all_ids(replica_table(table, replica))) == ids
    assert set(_replica_commits(replica, table).values()) == {1}


def test_a_copy_failing_while_the_metastore_is_out_is_retriable(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The metastore not answering as a copy finishes is the metastore's outage (retriable, a
    warning), not a failed copy; the next pass copies the partition."""
    from metastore.errors import MetastoreUnavailableError
    from scheduler.errors import ReplicationFailedError

    add_clusters(catalog, tmp_path, "c1", "c2")
    table = _table(catalog)
    ids = _rolled(catalog, table, 1)
    [partition] = catalog.store.list_partitions(table.id, [PartitionState.STANDARD])
    [replica] = catalog.replicas.list(table)
    finish = type(catalog.store).finish_copy

    def out(self, *args, **kwargs):
        raise MetastoreUnavailableError("the metastore at sqlite:///… is locked for too long")

    monkeypatch.setattr(type(catalog.store), "finish_copy", out)
    with pytest.raises(MetastoreUnavailableError) as refused:
        Replicator(catalog).copy(table, partition, replica)
    assert not isinstance(refused.value, ReplicationFailedError)
    assert str(refused.value).startswith(f"copy of ns.events partition {iso(partition.value)} to c2 failed: ")
    monkeypatch.setattr(type(catalog.store), "finish_copy", finish)
    assert len(Replicator(catalog).replicate(table, include_waiting=True).copied) == 1
    assert sorted(all_ids(replica_table(table, replica))) == ids


def test_a_metastore_from_before_replicas_upgrades_unchanged(metastore_url: str, tmp_path: Path) -> None:
    """0006 → 0007: tables and their partitions stay as they were, with no replicas; a replica
    added afterwards receives the partitions rolled before the upgrade."""
    import sqlalchemy as sa

    catalog = Catalog.open(tmp_path / "wh", metastore_url)
    add_clusters(catalog, tmp_path, "c1", "c2")
    table = _table(catalog, replicate_to=())
    ids = _rolled(catalog, table, 2)
    before = catalog.store.list_partitions(table.id)
    catalog.close()
    with downgraded(metastore_url, "0006") as conn:
        assert not sa.inspect(conn).has_table("sp_replicas")
    catalog = Catalog.open(tmp_path / "wh", metastore_url)  # migrates to head
    try:
        table = catalog.table("ns.events")
        assert catalog.store.list_partitions(table.id) == before and catalog.replicas.list(table) == []
        replica = catalog.replicas.add(table, "c2")
        assert len(Replicator(catalog).replicate(table).copied) == 2
        assert sorted(all_ids(replica_table(table, replica))) == ids
    finally:
        catalog.close()


def test_check_finds_a_damaged_or_incomplete_replica(catalog: Catalog, tmp_path: Path) -> None:
    from metastore.integrity import check_table

    add_clusters(catalog, tmp_path, "c1", "c2")
    table = _table(catalog)
    _rolled(catalog, table, 2)
    Replicator(catalog).replicate(table)
    assert check_table(catalog, table) == []
    [replica] = catalog.replicas.list(table)
    first, second = sorted(Path(replica.location).glob("*/part-*.parquet"))
    first.write_bytes(b"garbage")  # a damaged copy
    copies = catalog.store.list_copies(table.id)
    with catalog.store.tx() as conn:  # a copy that stopped between its commit and its record
        from metastore import schema as s

        conn.execute(
            s.partition_copies.update()
            .where(s.partition_copies.c.partition_id == copies[1].partition_id)
            .values(state="copying")
        )
    found = {(p.kind, p.severity) for p in check_table(catalog, table)}
    assert found == {("replica_file_size", "error"), ("replica_unrecorded", "warning")}, found
    assert second.exists()
    Replicator(catalog).replicate(table, include_waiting=True)  # records the unrecorded one
    assert {p.kind for p in check_table(catalog, table)} == {"replica_file_size"}


def test_the_heartbeat_renews_live_claims_only(catalog: Catalog, tmp_path: Path) -> None:
    """The daemon's heartbeat keeps a long copy's claim (renew_roll_and_copy_leases); a copy it let go
    (failed, or released) stays free for another copier."""
    add_clusters(catalog, tmp_path, "c1", "c2")
    table = _table(catalog)
    _rolled(catalog, table, 2)
    first, second = catalog.store.list_partitions(table.id, [PartitionState.STANDARD])
    held = catalog.store.claim_copy(first, "c2", "daemon-a", timedelta(seconds=30))
    released = catalog.store.claim_copy(second, "c2", "daemon-a", timedelta(seconds=30))
    catalog.store.release_copy(released, "daemon-a", error="disk full", retry_at=datetime.now(UTC))
    assert catalog.store.renew_roll_and_copy_leases("daemon-a", timedelta(hours=1)) == (0, 1)
    by_partition = {c.partition_id: c for c in catalog.store.list_copies(table.id)}
    renewed = by_partition[held.partition_id].lease_until
    assert renewed is not None and renewed > datetime.now(UTC) + timedelta(minutes=59)
    not_renewed = by_partition[released.partition_id].lease_until
    assert not_renewed is not None and not_renewed <= datetime.now(UTC)
    assert catalog.store.renew_roll_and_copy_leases("daemon-b", timedelta(hours=1)) == (0, 0)


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[40] ^= 0x10  # inside the first column chunk's data: the footer (and the size) stay as they were
    path.write_bytes(bytes(data))


def _overwrite_64_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[8:72] = bytes(64)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("finder", ["check", "housekeeping"])
@pytest.mark.parametrize("damage", [_flip_a_byte, _overwrite_64_bytes], ids=["one-byte", "64-bytes"])
def test_a_replica_file_changed_in_place_is_found_no_longer_read_and_copied_again(
    catalog: Catalog, tmp_path: Path, damage: Any, finder: str
) -> None:
    """Issue 25: a secondary's file damaged in place (same size, same Parquet footer): sizes and row
    counts agree, so only its SHA-256 — verified when it was copied, kept per file — tells. check
    names it, or the daemon's housekeeping scrub finds it; either makes the partition absent there
    (queries on that secondary stop reading it), and the next copy pass replaces the file with the
    source's bytes."""
    from metastore.integrity import check_table
    from scheduler.housekeeping import Housekeeper

    add_clusters(catalog, tmp_path, "c1", "c2")
    table = _table(catalog)
    _rolled(catalog, table, 2)
    Replicator(catalog).replicate(table)
    copies = catalog.store.list_copies(table.id, "c2")
    assert all(c.file_digests and c.verified_at for c in copies) and len(copies) == 2
    assert check_table(catalog, table) == []
    [replica] = catalog.replicas.list(table)
    damaged = sorted(Path(replica.location).glob("*/part-*.parquet"))[0]
    path = str(damaged.relative_to(replica.location))
    source = Path(table.location) / path
    size = damaged.stat().st_size
    damage(damaged)
    assert damaged.stat().st_size == size and damaged.read_bytes() != source.read_bytes()
    value = next(c.partition_value for c in copies if path in (c.file_digests or {}))
    assert value in catalog.replicas.present_on(table, "c2")
    if finder == "check":
        [problem] = check_table(catalog, table)
        assert (problem.kind, problem.severity, problem.path) == ("replica_file_digest", "error", path)
        assert "replica on c2" in problem.message and "SHA-256" in problem.message
        assert "no longer read there" in problem.message
    else:  # a day later: each copy is read back about daily
        report = Housekeeper(catalog).run(now=clock.now() + timedelta(days=2))
        assert report.replicas_verified == 2 and len(report.replicas_damaged) == 1
        assert path in report.replicas_damaged[0] and report.errors == {}
    assert value not in catalog.replicas.present_on(table, "c2")  # queries on c2 no longer read it
    assert len(catalog.replicas.present_on(table, "c2")) == 1
    again = Replicator(catalog).replicate(table)
    assert [c.partition for c in again.copied] == [iso(value)] and again.copied[0].copied_bytes == size
    assert damaged.read_bytes() == source.read_bytes()
    assert value in catalog.replicas.present_on(table, "c2") and check_table(catalog, table) == []
