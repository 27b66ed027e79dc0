"""Replicas: whole copies of a table's rolled partitions on its secondary clusters (HIVE's seed).

A table's **primary** cluster holds all its data and takes every write. Each **secondary**
(a :class:`Replica`) holds a standard Delta table at ``<cluster storage>/<ns>/<table>`` whose
log lists exactly the standard partitions copied there. A partition is either wholly present
on a secondary or absent, never partial: its copy (a :class:`PartitionCopy`) becomes
``present`` only after its files were copied, verified against the source and committed to the
secondary's Delta log, in that order.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from metastore.models import Partition, PartitionState, Table

# The Delta ``txn`` application id of a partition's commit into a secondary table: Delta records
# the newest version of each application id in the table's snapshot and refuses a concurrent
# commit with the same one, so a partition is committed into a secondary's log at most once.
REPLICA_APP = "streampart.replica"
REPLICA_KEY = "streampart.replica"  # commit info: which partition a secondary's commit added


class CopyState(StrEnum):
    COPYING = "copying"  # claimed: files may be on their way; not visible to queries
    PRESENT = "present"  # copied, verified, committed to the secondary's Delta log
    # its partition expired by retention: its files removed from the secondary's log (app
    # transaction version 2, so a stale copier's version-1 commit can never land after it)
    EXPIRED = "expired"
    # a delete by predicate rewrote its partition since it was copied: not read there, copied again
    STALE = "stale"


class Replica(BaseModel):
    """A secondary cluster of a table, and where its copy of the table lives."""

    model_config = ConfigDict(frozen=True)

    table_id: int
    cluster: str
    location: str
    added_at: datetime


class PartitionCopy(BaseModel):
    """One standard partition's copy on one secondary cluster."""

    model_config = ConfigDict(frozen=True)

    table_id: int
    partition_id: int
    partition_value: datetime
    cluster: str
    state: CopyState
    owner: str | None = None
    lease_until: datetime | None = None
    attempts: int = 0
    error: str | None = None
    retry_at: datetime | None = None
    files: int | None = None
    bytes: int | None = None
    checksum: str | None = None
    delta_version: int | None = None
    started_at: datetime | None = None
    copied_at: datetime | None = None
    # each file's SHA-256 (hex) as verified when it was copied, by path (None: copied before 0.x
    # recorded them); when the files on disk were last found to match
    file_digests: dict[str, str] | None = None
    verified_at: datetime | None = None
    generation: int | None = None  # the partition's generation it was claimed at


def not_present(partitions: Iterable[Partition], copies: Iterable[PartitionCopy]) -> list[Partition]:
    """The standard ones of ``partitions`` not yet present on a secondary whose copies are
    ``copies``, in the order given: what replication still owes it (copying, failed or not begun)."""
    present = {c.partition_value for c in copies if c.state is CopyState.PRESENT}
    return [p for p in partitions if p.state is PartitionState.STANDARD and p.value not in present]


def app_id(partition_dir: str) -> str:
    """The Delta application id of one partition's commit into a secondary table."""
    return f"{REPLICA_APP}/{partition_dir}"


def backoff(attempts: int, first: timedelta, longest: timedelta) -> timedelta:
    """How long a copy that failed ``attempts`` times in a row waits before it is tried again."""
    return min(first * (2 ** max(attempts - 1, 0)), longest)


def replica_table(table: Table, replica: Replica) -> Table:
    """``table`` as its copy on ``replica``'s cluster: the same spec, the secondary's location."""
    return table.model_copy(update={"location": replica.location, "cluster": replica.cluster})
