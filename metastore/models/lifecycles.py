"""Lifecycles: partitions, chunks, rolls, namespace moves and schema changes, each an enum with an
explicit table of allowed transitions; every state change in the metastore is a conditional update
guarded by :func:`check_transition`.
"""

from __future__ import annotations

from enum import StrEnum

from metastore.errors import IllegalTransitionError


class PartitionState(StrEnum):
    STREAMING = "streaming"
    ROLLING = "rolling"
    STANDARD = "standard"
    # retention (metastore/retention.py, scheduler/expiry.py): being removed, then removed; the row
    # stays, so the period stays sealed (a late row for it is late, never a new partition)
    EXPIRING = "expiring"
    EXPIRED = "expired"


class ChunkState(StrEnum):
    RESERVED = "reserved"
    COMMITTING = "committing"
    COMMITTED = "committed"
    ABORTED = "aborted"
    EXPIRED = "expired"


class RollState(StrEnum):
    SEALING = "sealing"
    SWEEPING = "sweeping"
    DONE = "done"


class ExpiryState(StrEnum):
    """An expiry pass (scheduler/expiry.py): begun, its removes committed, finished."""

    PENDING = "pending"  # its partitions EXPIRING, the commit removing their files maybe not landed
    COMMITTED = "committed"  # the Delta commit removing their files landed (commit_version)
    DONE = "done"  # its partitions EXPIRED


class DeleteState(StrEnum):
    """A delete by predicate (ingest/deletes/deleter.py): begun, its rewrite committed, finished."""

    PENDING = "pending"  # the table sealed; its rewrite planned and written, maybe not committed
    COMMITTED = "committed"  # the Delta commit removing the matching rows landed (commit_version)
    DONE = "done"  # the partitions' rows, bytes and files counted anew


class MoveStep(StrEnum):
    """How far a namespace move has come (see metastore/moves.py); recorded before each step."""

    FENCING = "fencing"  # recorded; the source is being fenced and drained
    COPYING = "copying"  # fenced and drained; rows being copied to the target
    COPIED = "copied"  # the target holds a whole copy; the route not flipped yet
    FLIPPED = "flipped"  # the route names the target; the source's rows being removed


class SchemaChangeState(StrEnum):
    """A recorded schema change (see metastore/store/schemas.py): its Delta commit in flight, or landed."""

    PENDING = "pending"  # recorded; its metaData commit may or may not have landed
    DONE = "done"  # landed at its version, and the table's columns are its ``after``


_TRANSITIONS: dict[type[StrEnum], set[tuple[StrEnum, StrEnum]]] = {
    PartitionState: {
        (PartitionState.STREAMING, PartitionState.ROLLING),
        (PartitionState.ROLLING, PartitionState.STANDARD),
        (PartitionState.STANDARD, PartitionState.EXPIRING),
        (PartitionState.EXPIRING, PartitionState.EXPIRED),
    },
    ExpiryState: {
        (ExpiryState.PENDING, ExpiryState.COMMITTED),
        (ExpiryState.COMMITTED, ExpiryState.DONE),
    },
    DeleteState: {
        (DeleteState.PENDING, DeleteState.COMMITTED),
        (DeleteState.COMMITTED, DeleteState.DONE),
    },
    ChunkState: {
        (ChunkState.RESERVED, ChunkState.COMMITTING),
        (ChunkState.RESERVED, ChunkState.ABORTED),
        (ChunkState.RESERVED, ChunkState.EXPIRED),
        # a commit found not to have landed, whose writer gave up (rejected late data, or
        # malformed content): the chunk is aborted and its files removed.
        (ChunkState.COMMITTING, ChunkState.ABORTED),
        (ChunkState.COMMITTING, ChunkState.COMMITTED),
        # an attempt that failed knowing it committed nothing (a full disk, a damaged log, the
        # metastore unreachable before its Delta commit) releases the chunk: a retry begins anew
        (ChunkState.COMMITTING, ChunkState.RESERVED),
    },
    RollState: {
        (RollState.SEALING, RollState.SWEEPING),
        (RollState.SWEEPING, RollState.DONE),
    },
    MoveStep: {
        (MoveStep.FENCING, MoveStep.COPYING),
        # a rerun after a crash mid-copy clears the partial copy and copies again
        (MoveStep.COPYING, MoveStep.COPYING),
        (MoveStep.COPYING, MoveStep.COPIED),
        (MoveStep.COPIED, MoveStep.FLIPPED),
    },
    SchemaChangeState: {
        (SchemaChangeState.PENDING, SchemaChangeState.DONE),
    },
}


def check_transition(current: StrEnum, target: StrEnum) -> None:
    """Raise :class:`IllegalTransitionError` unless ``current → target`` is allowed."""
    allowed = _TRANSITIONS[type(current)]
    if (current, target) not in allowed:
        kind = type(current).__name__.removesuffix("State").lower()
        raise IllegalTransitionError(f"a {kind} cannot go from {current.value} to {target.value}")
