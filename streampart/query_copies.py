"""Where a statement's tables can be read: each one's primary, and its copies on secondaries.

A statement first pins every table it reads on the table's primary (:func:`locate`): that
snapshot — seen through a link's rule if it is a link — says which partitions the statement
reads. A secondary holds the table **fully** for this statement when every one of those
partitions is standard and present there (a streaming partition holding data lives on the
primary only). With ``--replicated-only`` a secondary serves the table's **cut**: the longest
run of those partitions, oldest first, that are all present there — the table as of the newest
partition replicated there with every one before it, so one consistent cut, never a table with
a hole in its past.

Once :mod:`streampart.query_cluster` chose the cluster, :func:`snapshots_on` pins what the
statement reads there: the primary's snapshot, or the secondary's own Delta table (at
``replica.location``, whose log holds exactly the partitions copied there) at one version of
its own, restricted to the partitions the statement reads. That read is checked against the
secondary's records, not the primary's (:meth:`Catalog.load` checks a primary's log against the
metastore's versions of the primary).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from metastore.catalog import Catalog
from metastore.delta.files import check_files, live_files
from metastore.delta.metadata import columns_of
from metastore.errors import TableIntegrityError
from metastore.links import Resolved
from metastore.models import PartitionState, iso
from metastore.replicas import Replica, replica_table
from streampart.query import Snapshot, identity, pin_snapshots
from streampart.query_cluster import Input
from streampart.query_policy import TableRef


@dataclass(frozen=True)
class Copy:
    """What one secondary holds of what a statement reads of one table."""

    replica: Replica
    cut: tuple[datetime, ...]  # the partitions read, oldest first, while each is present there
    full: bool  # the cut is every partition read
    gap: str  # what is missing there, in words ("" if full)


@dataclass(frozen=True)
class Located:
    """A table (or link) a statement reads: its snapshot on its primary, and its copies elsewhere."""

    ref: TableRef
    resolved: Resolved
    primary: Snapshot  # what the statement reads on the primary (a link's view of it)
    partitions: tuple[datetime, ...]  # the partitions that holds rows in, oldest first
    copies: Mapping[str, Copy]  # per secondary cluster
    time_travel: bool  # VERSION / TIMESTAMP AS OF: the primary's log only

    @property
    def cluster(self) -> str:
        return self.resolved.table.cluster

    def as_input(self) -> Input:
        """The facts :func:`streampart.query_cluster.choose` decides on."""
        full = {self.cluster, *(c for c, copy in self.copies.items() if copy.full and not self.time_travel)}
        if self.time_travel:
            why = "VERSION AS OF / TIMESTAMP AS OF reads its primary's Delta log"
            gaps = dict.fromkeys(self.copies, why)
            return Input(self.ref.name, self.cluster, frozenset(full), frozenset(), gaps)
        gaps = {c: copy.gap for c, copy in self.copies.items() if not copy.full}
        return Input(self.ref.name, self.cluster, frozenset(full), frozenset(self.copies), gaps)


def locate(catalog: Catalog, refs: Iterable[TableRef]) -> dict[TableRef, Located]:
    """Pin each table a statement reads on its primary (:func:`streampart.query.pin_snapshots`), and
    find what each of its secondaries holds of what the statement reads."""
    # per table, by its identity across the federation (row ids repeat across metastores)
    found: dict[str, tuple[dict[datetime, PartitionState], list[Replica], dict[str, set[datetime]]]] = {}
    out = {}
    # the files are checked where they are read (snapshots_on): on the primary, or not at all
    for ref, (resolved, snap) in pin_snapshots(catalog, refs, check=False).items():
        table = resolved.table
        if identity(table) not in found:
            states = {p.value: p.state for p in catalog.partitions(table)}
            replicas = catalog.replicas.list(table)
            present = {r.cluster: catalog.replicas.present_on(table, r.cluster) for r in replicas}
            found[identity(table)] = (states, replicas, present)
        states, replicas, present = found[identity(table)]
        read = tuple(sorted({f.partition for f in snap.files}))
        copies = {r.cluster: _copy(r, read, states, present[r.cluster]) for r in replicas}
        time_travel = ref.version is not None or ref.timestamp is not None
        out[ref] = Located(ref, resolved, snap, read, copies, time_travel)
    return out


def _copy(
    replica: Replica,
    read: tuple[datetime, ...],
    states: Mapping[datetime, PartitionState],
    present: set[datetime],
) -> Copy:
    def there(value: datetime) -> bool:
        return states.get(value) is PartitionState.STANDARD and value in present

    cut: list[datetime] = []
    for value in read:
        if not there(value):
            break
        cut.append(value)
    missing = [v for v in read if not there(v)]
    if not missing:
        return Copy(replica, tuple(cut), True, "")
    unrolled = [v for v in missing if states.get(v) is not PartitionState.STANDARD]
    gap = f"{len(missing)} of the {len(read)} partitions read are not copied there"
    if unrolled:
        gap += f" ({len(unrolled)} not rolled yet: a streaming partition's rows live on the primary only)"
    return Copy(replica, tuple(cut), False, gap)


def snapshots_on(
    catalog: Catalog, located: Mapping[TableRef, Located], cluster: str, cuts: Iterable[str]
) -> dict[TableRef, Snapshot]:
    """What the statement reads on ``cluster``: each table's primary snapshot there, its copy elsewhere.

    Args:
        cuts: The tables (as the statement names them) read as their replicated cut.

    Raises:
        TableIntegrityError: a partition recorded present on ``cluster`` is not in its Delta log.
    """
    cut_names = set(cuts)
    copies: dict[str, tuple[Any, list[Any]]] = {}  # one version of each secondary table
    out = {}
    for ref, loc in located.items():
        if cluster == loc.cluster:
            check_files(loc.primary.table, loc.primary.files)
            out[ref] = loc.primary
            continue
        copy = loc.copies[cluster]
        table = loc.resolved.table
        on = replica_table(table, copy.replica)
        if identity(table) not in copies:
            dt = catalog.warehouse.load(on)
            copies[identity(table)] = (dt, live_files(dt))
        dt, files = copies[identity(table)]
        wanted = set(copy.cut if ref.name in cut_names else loc.partitions)
        mine = tuple(f for f in files if f.partition in wanted)
        lacking = wanted - {f.partition for f in mine}
        if lacking:
            raise TableIntegrityError(
                f"table {table.name}: partition {iso(min(lacking))} is recorded present on cluster {cluster} "
                f"but is not in the Delta log at {copy.replica.location}; run `streampart table replicate "
                f"{table.name} --to {cluster}` again, or read it on {table.cluster} (--cluster)"
            )
        check_files(on, mine)
        out[ref] = Snapshot(on, int(dt.version()), mine, columns_of(dt, f"table {table.name} on {cluster}"))
    return out


def describe_reads(
    located: Mapping[TableRef, Located], snapshots: Mapping[TableRef, Snapshot], cuts: Iterable[str]
) -> list[dict[str, Any]]:
    """What a statement reads, table by table: where, at which version, and any replicated cut."""
    cut_names = set(cuts)
    out = []
    for ref, loc in located.items():
        snap = snapshots[ref]
        item: dict[str, Any] = {
            "table": ref.name,
            "cluster": snap.table.cluster,
            "copy": "primary" if snap.table.cluster == loc.cluster else "replica",
            "location": snap.table.location,
            "version": snap.version,
            "partitions": len({f.partition for f in snap.files}),
        }
        if ref.name in cut_names:
            cut = loc.copies[snap.table.cluster].cut
            item["cut"] = {
                "as_of_partition": iso(cut[-1]) if cut else None,
                "not_read": len(loc.partitions) - len(cut),
            }
        out.append(item)
    return out


def cut_note(read: Mapping[str, Any]) -> str:
    """One line stating a replicated cut a statement read (``--replicated-only``)."""
    cut = read["cut"]
    newest = cut["as_of_partition"]
    when = f"as of partition {newest}" if newest else "before its first partition"
    return (
        f"{read['table']} read on {read['cluster']} {when} (its newest replicated there with every one "
        f"before it; version {read['version']} of the copy); {cut['not_read']} newer partition(s) with "
        "rows not read"
    )
