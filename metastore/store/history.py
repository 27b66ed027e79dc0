"""History: the roll daemon's attempts, and old chunk rows pruned into per-partition summaries.

Neither is needed to keep the invariants; both keep ``describe``, the monitoring and the
daemon's back-off truthful while the tables of live state stay small. Old attempts go (each
table's newest stays: it carries the current failure streak); old finished chunk rows give
way to :class:`~metastore.models.ChunkSummary` rows that keep their sums.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from metastore import schema as s
from metastore.errors import ConflictError
from metastore.models import Chunk, ChunkState, ChunkSummary, PartitionState, RollAttempt, RollOutcome, utc
from metastore.store.chunks import chunk_from_row
from metastore.store.engine import Database, _db, _new_id, _now, _out

_SUMMED = ("chunks", "rows", "bytes", "dead_letter_rows", "late_rows")


def attempt_from_row(row: Any) -> RollAttempt:
    m = row._mapping
    return RollAttempt(
        id=m["id"],
        table_id=m["table_id"],
        partition_value=_out(m["partition_value"]),
        roll_id=m["roll_id"],
        owner=m["owner"],
        epoch=m["epoch"],
        started_at=_out(m["started_at"]),
        finished_at=_out(m["finished_at"]),
        outcome=RollOutcome(m["outcome"]),
        resumed=m["resumed"],
        rows=m["rows"],
        error=m["error"],
        failures=m["failures"],
        retry_at=_out(m["retry_at"]),
    )


def summarize_chunk(chunk: Chunk) -> dict[tuple[datetime | None, ChunkState], dict[str, int]]:
    """What one chunk adds to the summary of each partition it landed in (see ChunkSummary)."""
    extra = {"dead_letter_rows": chunk.dead_letter_rows, "late_rows": chunk.late_rows}
    if chunk.state is not ChunkState.COMMITTED or not chunk.partitions:
        return {(None, chunk.state): {"chunks": 1, "rows": chunk.rows, "bytes": chunk.bytes, **extra}}
    by_period = any(f.period is not None for f in chunk.files)
    out: dict[tuple[datetime | None, ChunkState], dict[str, int]] = {}
    for n, value in enumerate(sorted(chunk.partitions)):
        files = [f for f in chunk.files if not by_period or (f.period is not None and utc(f.period) == value)]
        out[(value, chunk.state)] = {
            "chunks": 1,
            "rows": sum(f.rows for f in files),
            "bytes": sum(f.bytes for f in files),
            # the companions' rows belong to the chunk, not to a partition: count them once
            **(extra if n == 0 else {"dead_letter_rows": 0, "late_rows": 0}),
        }
    return out


def _newest_attempts() -> sa.ScalarSelect[Any]:
    """The id of each table's newest attempt."""
    return sa.select(sa.func.max(s.roll_attempts.c.id)).group_by(s.roll_attempts.c.table_id).scalar_subquery()


class HistoryStore(Database):
    """Roll attempts, and chunk summaries."""

    # -- roll attempts (the roll daemon's history) -------------------------------------------
    def record_roll_attempt(
        self,
        *,
        table_id: int,
        partition_value: datetime | None,
        owner: str,
        started_at: datetime,
        finished_at: datetime,
        outcome: RollOutcome,
        roll_id: str | None = None,
        epoch: int | None = None,
        resumed: bool = False,
        rows: int | None = None,
        error: str | None = None,
        failures: int = 0,
        retry_at: datetime | None = None,
    ) -> RollAttempt:
        with self.tx() as conn:
            attempt_id = _new_id(
                conn.execute(
                    sa.insert(s.roll_attempts).values(
                        table_id=table_id,
                        partition_value=_db(partition_value),
                        roll_id=roll_id,
                        owner=owner,
                        epoch=epoch,
                        started_at=_db(started_at),
                        finished_at=_db(finished_at),
                        outcome=outcome.value,
                        resumed=resumed,
                        rows=rows,
                        error=None if error is None else error[:4000],
                        failures=failures,
                        retry_at=_db(retry_at),
                    )
                )
            )
            row = conn.execute(sa.select(s.roll_attempts).where(s.roll_attempts.c.id == attempt_id)).one()
        return attempt_from_row(row)

    def list_roll_attempts(self, table_id: int | None = None, limit: int = 20) -> list[RollAttempt]:
        """The newest attempts first."""
        q = sa.select(s.roll_attempts)
        if table_id is not None:
            q = q.where(s.roll_attempts.c.table_id == table_id)
        with self.read_tx() as conn:
            rows = conn.execute(q.order_by(s.roll_attempts.c.id.desc()).limit(limit)).all()
        return [attempt_from_row(r) for r in rows]

    def latest_roll_attempts(self) -> dict[int, RollAttempt]:
        """Each table's newest attempt (its current failure streak and retry time)."""
        with self.read_tx() as conn:
            rows = conn.execute(
                sa.select(s.roll_attempts).where(s.roll_attempts.c.id.in_(_newest_attempts()))
            ).all()
        return {r.table_id: attempt_from_row(r) for r in rows}

    def prune_roll_attempts(self, before: datetime) -> int:
        """Forget attempts that finished before ``before``, keeping each table's newest."""
        with self.tx() as conn:
            return int(
                conn.execute(
                    sa.delete(s.roll_attempts).where(
                        s.roll_attempts.c.finished_at < _db(before),
                        s.roll_attempts.c.id.not_in(_newest_attempts()),
                    )
                ).rowcount
            )

    # -- pruning chunk rows into per-partition summaries -------------------------------------
    def prune_chunks(
        self, table_id: int, before: datetime, now: datetime | None = None, batch: int = 1000
    ) -> int:
        """Replace rows of old, finished chunks by per-partition summaries; returns how many went.

        A chunk row goes only when nothing can need it any more:

        - committed: every partition it landed in is standard, rolled before ``before``;
        - aborted or expired: created before ``before``.

        Its idempotency key goes with it: a retry under that key afterwards would be a new
        chunk, so ``before`` must lie further back than any producer retries (the roll
        daemon's default is 7 days). Partition rows (what ``describe`` shows) stay untouched.
        """
        now = now or _now()
        terminal = [ChunkState.COMMITTED.value, ChunkState.ABORTED.value, ChunkState.EXPIRED.value]
        with self.read_tx() as conn:
            rolled = {
                _out(v)
                for v in conn.execute(
                    sa.select(s.partitions.c.value).where(
                        s.partitions.c.table_id == table_id,
                        s.partitions.c.state == PartitionState.STANDARD.value,
                        s.partitions.c.rolled_at < _db(before),
                    )
                ).scalars()
            }
        pruned = 0
        cursor: tuple[datetime, str] | None = None
        c = s.chunks.c
        while True:
            q = sa.select(s.chunks).where(
                c.table_id == table_id, c.state.in_(terminal), c.created_at < _db(before)
            )
            if cursor is not None:
                q = q.where(
                    sa.or_(c.created_at > cursor[0], sa.and_(c.created_at == cursor[0], c.id > cursor[1]))
                )
            with self.read_tx() as conn:
                rows = conn.execute(q.order_by(c.created_at, c.id).limit(batch)).all()
            if not rows:
                return pruned
            cursor = (rows[-1].created_at, rows[-1].id)
            sums: dict[tuple[datetime | None, ChunkState], dict[str, Any]] = {}
            ids: list[str] = []
            for row in rows:
                chunk = chunk_from_row(row)
                if chunk.state is ChunkState.COMMITTED and any(p not in rolled for p in chunk.partitions):
                    continue
                ids.append(chunk.id)
                for key, part in summarize_chunk(chunk).items():
                    acc = sums.setdefault(key, dict.fromkeys(_SUMMED, 0) | {"first": None, "last": None})
                    for k in _SUMMED:
                        acc[k] += part[k]
                    acc["first"] = min(filter(None, (acc["first"], chunk.created_at)))
                    acc["last"] = max(filter(None, (acc["last"], chunk.created_at)))
            if not ids:
                continue
            with self.tx() as conn:
                for (value, state), acc in sums.items():
                    conn.execute(
                        sa.insert(s.chunk_summaries).values(
                            table_id=table_id,
                            partition_value=_db(value),
                            state=state.value,
                            **{k: acc[k] for k in _SUMMED},
                            first_created_at=_db(acc["first"]),
                            last_created_at=_db(acc["last"]),
                            pruned_at=_db(now),
                        )
                    )
                deleted = conn.execute(
                    sa.delete(s.chunks).where(c.id.in_(ids), c.state.in_(terminal))
                ).rowcount
                if deleted != len(ids):  # terminal states never change: someone else pruned them
                    raise ConflictError(f"chunks of table #{table_id} were pruned concurrently")
            pruned += len(ids)

    def chunk_summaries(self, table_id: int) -> list[ChunkSummary]:
        """The summaries of pruned chunks, one per partition and state (oldest partition first)."""
        cs = s.chunk_summaries.c
        with self.read_tx() as conn:
            rows = conn.execute(
                sa.select(
                    cs.partition_value,
                    cs.state,
                    *(sa.func.sum(cs[k]).label(k) for k in _SUMMED),
                    sa.func.min(cs.first_created_at).label("first"),
                    sa.func.max(cs.last_created_at).label("last"),
                )
                .where(cs.table_id == table_id)
                .group_by(cs.partition_value, cs.state)
                .order_by(cs.partition_value, cs.state)
            ).all()
        return [
            ChunkSummary(
                table_id=table_id,
                partition_value=_out(r.partition_value),
                state=ChunkState(r.state),
                **{k: int(getattr(r, k)) for k in _SUMMED},
                first_created_at=_out(r.first),
                last_created_at=_out(r.last),
            )
            for r in rows
        ]
