"""The roll daemons' heartbeats: every daemon, leader or standby, and housekeeping's last pass.

The leadership lease (``sp_leases``) names only its holder; a standby leaves no trace there. So
each daemon also stamps one row of its own per lease at every heartbeat, and the leader stamps
the outcome of each housekeeping pass on its row. Nothing depends on these rows for correctness
(fencing is the lease's): they are what the status page shows. Rows of daemons silent for a day
are removed by the next heartbeat of any daemon, so the table stays as small as the fleet.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from metastore import schema as s
from metastore.models import DaemonBeat, Lease
from metastore.store.engine import Database, _db, _now, _out
from metastore.store.expiries import extend_expiry_leases
from metastore.store.leases import check_fence
from metastore.store.replicas import extend_copy_leases
from metastore.store.rolls import extend_roll_leases

# Why a day: a daemon that stopped is worth seeing on the page for a while ("the standby on host
# b went away at 03:12"), but not for ever; a day covers a night's incident and its review.
FORGET_SILENT_DAEMONS = timedelta(days=1)


def beat_from_row(row: Any) -> DaemonBeat:
    m = row._mapping
    return DaemonBeat(
        lease=m["lease"],
        holder=m["holder"],
        heartbeat_at=_out(m["heartbeat_at"]),
        info=m["info"] or {},
        housekeeping_at=_out(m["housekeeping_at"]),
        housekeeping_outcome=m["housekeeping_outcome"],
    )


class DaemonStore(Database):
    """The roll daemons' heartbeats and housekeeping passes."""

    def renew_roll_and_copy_leases(
        self, owner: str, lease: timedelta, fence: Lease | None = None, now: datetime | None = None
    ) -> tuple[int, int]:
        """Extend the lease of every unfinished roll, expiry and copy ``owner`` holds (the daemon's
        heartbeat, so a long roll or copy — a large file, a Spark job — keeps its claim), in one
        transaction under one check of ``fence``; returns how many rolls and expiries, and copies.

        Raises:
            LeaseLostError: ``fence`` is no longer held (then nothing is extended, and the rolls
                and copies lapse so the new leader can resume them).
        """
        now = now or _now()
        with self.tx() as conn:
            if fence is not None:
                check_fence(conn, fence, now)
            rolls = extend_roll_leases(conn, owner, now + lease) + extend_expiry_leases(
                conn, owner, now + lease
            )
            return rolls, extend_copy_leases(conn, owner, now, now + lease)

    def record_heartbeat(
        self, lease: str, holder: str, info: dict[str, Any] | None = None, now: datetime | None = None
    ) -> None:
        """Stamp ``holder``'s heartbeat for ``lease`` (an upsert), and forget long-silent daemons."""
        now = now or _now()
        key = (s.daemons.c.lease == lease, s.daemons.c.holder == holder)
        with self.tx() as conn:
            updated = conn.execute(
                sa.update(s.daemons).where(*key).values(heartbeat_at=_db(now), info=info or {})
            ).rowcount
            if not updated:  # the holder's first beat (a holder name is unique per process)
                conn.execute(
                    sa.insert(s.daemons).values(
                        lease=lease, holder=holder, heartbeat_at=_db(now), info=info or {}
                    )
                )
            conn.execute(
                sa.delete(s.daemons).where(s.daemons.c.heartbeat_at < _db(now - FORGET_SILENT_DAEMONS))
            )

    def record_housekeeping(self, lease: str, holder: str, outcome: str, now: datetime | None = None) -> None:
        """Stamp the end of a housekeeping pass (``ok`` or ``failed``) on ``holder``'s row."""
        now = now or _now()
        with self.tx() as conn:
            conn.execute(
                sa.update(s.daemons)
                .where(s.daemons.c.lease == lease, s.daemons.c.holder == holder)
                .values(housekeeping_at=_db(now), housekeeping_outcome=outcome)
            )

    def list_daemons(self, lease: str) -> list[DaemonBeat]:
        """The daemons of ``lease`` heard from in the last day, the most recently heard first."""
        with self.read_tx() as conn:
            rows = conn.execute(
                sa.select(s.daemons)
                .where(s.daemons.c.lease == lease)
                .order_by(s.daemons.c.heartbeat_at.desc())
            ).all()
        return [beat_from_row(r) for r in rows]
