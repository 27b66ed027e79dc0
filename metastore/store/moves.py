"""Namespace moves in progress (in the primary): one ``sp_moves`` row per move, and the flip.

The row is written before the move's first step and advanced, by a guarded update, before each
later one, so a rerun after a crash knows where to resume (see ``metastore/moves.py``). The flip —
the namespace's route now names the target — and the row's step ``flipped`` are one transaction,
with the route-table version bumped in it: there is no instant at which the route names the
target and the move does not know it, or the other way round.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from metastore import schema as s
from metastore.errors import AlreadyExistsError, NotFoundError
from metastore.models import Move, MoveStep, check_transition
from metastore.store.engine import _db, _now, _out
from metastore.store.federation import FederationStore, _lock_registry, bump_route_version
from metastore.store.preconditions import Precondition, at, equals, guarded_update, state_in


def move_from_row(row: Any) -> Move:
    m = row._mapping
    return Move(
        namespace=m["namespace"],
        source=m["source"],
        target=m["target"],
        step=MoveStep(m["step"]),
        started_at=_out(m["started_at"]),
        updated_at=_out(m["updated_at"]),
        owner=m["owner"],
        heartbeat_at=_out(m["heartbeat_at"]),
    )


def _owned_by(owner: str) -> Precondition:
    return equals(
        s.moves.c.owner,
        owner,
        lambda m: (
            f"is run by another mover now ({m['owner']}, last seen {at(m['heartbeat_at'])}), not {owner}"
        ),
    )


class MoveStore(FederationStore):
    """The primary's record of namespace moves in progress."""

    def begin_move(
        self, namespace: str, source: str, target: str, owner: str, now: datetime | None = None
    ) -> Move:
        """Record a new move at step ``fencing``, run by the mover ``owner``.

        Raises:
            AlreadyExistsError: a move of ``namespace`` is recorded already (naming its target).
        """
        now = now or _now()
        try:
            with self.tx() as conn:
                conn.execute(
                    sa.insert(s.moves).values(
                        namespace=namespace,
                        source=source,
                        target=target,
                        step=MoveStep.FENCING.value,
                        started_at=_db(now),
                        updated_at=_db(now),
                        owner=owner,
                        heartbeat_at=_db(now),
                    )
                )
        except IntegrityError:
            found = self.find_move(namespace)
            raise AlreadyExistsError(
                f"a move of namespace {namespace} is in progress already"
                + (f" (to {found.target}, step {found.step.value})" if found else "")
            ) from None
        found = self.find_move(namespace)
        assert found is not None
        return found

    def find_move(self, namespace: str) -> Move | None:
        with self.read_tx() as conn:
            row = conn.execute(sa.select(s.moves).where(s.moves.c.namespace == namespace)).first()
        return None if row is None else move_from_row(row)

    def list_moves(self) -> list[Move]:
        with self.read_tx() as conn:
            rows = conn.execute(sa.select(s.moves).order_by(s.moves.c.namespace)).all()
        return [move_from_row(r) for r in rows]

    def claim_move(
        self,
        move: Move,
        owner: str,
        *,
        stale_before: datetime,
        dead: str | None = None,
        now: datetime | None = None,
    ) -> Move:
        """Make ``owner`` the mover of ``move``: if it is ours or unowned, if its mover was last seen
        before ``stale_before``, or if its mover is ``dead`` (known to have died).

        Raises:
            ConflictError: another mover runs it and was seen since (naming it).
        """
        m = s.moves.c
        free = sa.or_(m.owner.is_(None), m.owner == owner, m.heartbeat_at < _db(stale_before))
        alive = Precondition(
            free if dead is None else sa.or_(free, m.owner == dead),
            lambda r: r["owner"] in (None, owner, dead) or r["heartbeat_at"] < _db(stale_before),
            lambda r: f"is run by another mover ({r['owner']}, last seen {at(r['heartbeat_at'])})",
        )
        with self.tx() as conn:
            row = guarded_update(
                conn,
                s.moves,
                m.namespace == move.namespace,
                f"the move of namespace {move.namespace}",
                [alive],
                {"owner": owner, "heartbeat_at": _db(now or _now())},
            )
        return move_from_row(row)

    def touch_move(self, move: Move, owner: str, now: datetime | None = None) -> Move:
        """The mover ``owner`` is alive (its heartbeat); ConflictError if another took the move over."""
        with self.tx() as conn:
            row = guarded_update(
                conn,
                s.moves,
                s.moves.c.namespace == move.namespace,
                f"the move of namespace {move.namespace}",
                [_owned_by(owner)],
                {"heartbeat_at": _db(now or _now())},
            )
        return move_from_row(row)

    def advance_move(self, move: Move, step: MoveStep, now: datetime | None = None) -> Move:
        """``move`` one step on (guarded by the step it is at and by its mover); ConflictError names
        what it found."""
        check_transition(move.step, step)
        with self.tx() as conn:
            row = guarded_update(
                conn,
                s.moves,
                s.moves.c.namespace == move.namespace,
                f"move of namespace {move.namespace}",
                [state_in(s.moves.c.step, [move.step]), *([_owned_by(move.owner)] if move.owner else [])],
                {"step": step.value, "updated_at": _db(now or _now()), "heartbeat_at": _db(now or _now())},
            )
        return move_from_row(row)

    def flip_move(self, move: Move, now: datetime | None = None) -> Move:
        """Route the namespace to the move's target and record the step ``flipped``, in one transaction."""
        check_transition(move.step, MoveStep.FLIPPED)
        now = now or _now()
        with self.tx() as conn:
            _lock_registry(conn)
            row = guarded_update(
                conn,
                s.moves,
                s.moves.c.namespace == move.namespace,
                f"move of namespace {move.namespace}",
                [
                    state_in(s.moves.c.step, [MoveStep.COPIED]),
                    *([_owned_by(move.owner)] if move.owner else []),
                ],
                {"step": MoveStep.FLIPPED.value, "updated_at": _db(now), "heartbeat_at": _db(now)},
            )
            self._route(conn, move.namespace, move.target, now)
            bump_route_version(conn)
        return move_from_row(row)

    def end_move(self, move: Move) -> None:
        """Forget a finished (or rolled back) move (only by its mover)."""
        m = s.moves.c
        with self.tx() as conn:
            where = [m.namespace == move.namespace] + ([m.owner == move.owner] if move.owner else [])
            if not conn.execute(sa.delete(s.moves).where(*where)).rowcount:
                raise NotFoundError(f"no move of namespace {move.namespace} is in progress (by {move.owner})")
