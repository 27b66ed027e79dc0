"""Partitions rewritten copy-on-write — by a delete by predicate, or by a keyed table's roll removing
older versions of its keys — recorded: counted anew, one generation on, their copies stale."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from metastore import schema as s
from metastore.models import PartitionState
from metastore.replicas import CopyState
from metastore.store.engine import _db

# Partitions whose rows and files the metastore counts (a roll recorded them)
_COUNTED = (PartitionState.STANDARD.value, PartitionState.EXPIRING.value)


def record_rewritten(
    conn: Connection,
    table_id: int,
    standard: Mapping[datetime, tuple[int, int, int]],
    freed: Mapping[datetime, int],
) -> None:
    """In the caller's transaction, after a commit rewrote partitions copy-on-write (a delete's, a keyed
    roll's): each standard (or expiring) partition of ``standard`` counted anew (rows, bytes, files),
    one generation on and its present copies stale; each other partition's quota ledger less the
    bytes ``freed`` there."""
    p = s.partitions.c
    mine = p.table_id == table_id
    c = s.partition_copies.c
    if standard:  # one statement for all (executemany): a delete may rewrite 1,000s
        conn.execute(
            sa.update(s.partitions)
            .where(
                mine,
                p.value == sa.bindparam("b_value"),
                sa.or_(*(p.state == sa.literal(state) for state in _COUNTED)),  # (no IN: executemany)
            )
            .values(
                rows=sa.bindparam("b_rows"),
                bytes=sa.bindparam("b_bytes"),
                files=sa.bindparam("b_files"),
                generation=p.generation + 1,
            ),
            [
                {"b_value": _db(v), "b_rows": rows, "b_bytes": size, "b_files": files}
                for v, (rows, size, files) in sorted(standard.items())  # (row locks in value order)
            ],
        )
        # their copies on secondaries hold the deleted rows: not read there until copied again
        rewritten = sa.select(p.id).where(
            mine, p.value.in_([_db(v) for v in standard]), p.state.in_(_COUNTED)
        )
        conn.execute(
            sa.update(s.partition_copies)
            .where(c.partition_id.in_(rewritten), c.state == CopyState.PRESENT.value)
            .values(state=CopyState.STALE.value, owner=None, lease_until=None)
        )
    for value, size in freed.items():
        conn.execute(
            sa.update(s.partitions)
            .where(mine, p.value == _db(value), p.state.not_in(_COUNTED))
            .values(staged_bytes=sa.case((p.staged_bytes > size, p.staged_bytes - size), else_=0))
        )
