"""Group commit: commits of one table that arrive together are made by one thread, as one.

Many threads of a process (the HTTP server's request threads, a program's writer threads, the
Kafka ingest's micro-batches) commit chunks of the same table. Each Delta commit costs a log
write and, when two race, a conflict check and a retry; so instead of racing, the threads of a
process queue up per table. The first to arrive *leads*: it takes everything queued at that
moment as one group, commits it (``commit(group, context)``: see ``ingest/chunks.py``), hands
each member its own outcome, and passes the lead to the first member that queued meanwhile.
Under load a group is everything that arrived during the previous group's commit; a lone
writer leads a group of one at once, so its latency does not grow.

``linger``: after a group of more than one, the next leader waits up to this long for company
before it takes the queue (0: never). A table that sees one commit at a time never lingers.

This module knows nothing of chunks: a member carries an item, and ``commit`` must settle every
member of its group (``resolve`` or ``fail``); an exception out of ``commit`` fails the members
it left unsettled with that exception. Processes do not group with each other: across
processes, Delta's optimistic concurrency orders the groups (appends do not conflict).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class UnsettledError(RuntimeError):
    """A group's commit returned without settling this member (a bug in ``commit``)."""


@dataclass(eq=False)
class Member(Generic[T, R]):
    """One caller's item in a group, and what became of it."""

    item: T
    _wake: threading.Event = field(default_factory=threading.Event, repr=False)
    _settled: bool = False
    _result: R | None = None
    _error: BaseException | None = None

    @property
    def settled(self) -> bool:
        return self._settled

    def resolve(self, result: R) -> None:
        if not self._settled:
            self._settled, self._result = True, result
            self._wake.set()

    def fail(self, error: BaseException) -> None:
        if not self._settled:
            self._settled, self._error = True, error
            self._wake.set()

    def outcome(self) -> R:
        assert self._settled
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]


@dataclass
class _Queue(Generic[T, R]):
    pending: list[Member[T, R]] = field(default_factory=list)
    leader: Member[T, R] | None = None
    last_size: int = 0
    # what leaders keep between groups (the table's Delta snapshot): only the leader touches it
    context: dict[str, Any] = field(default_factory=dict)


class CommitGroups(Generic[T, R]):
    """Per key, callers' items committed in groups by one leader at a time (see the module doc)."""

    def __init__(self, linger: float = 0.0) -> None:
        self.linger = linger
        self._lock = threading.Lock()
        self._queues: dict[Hashable, _Queue[T, R]] = {}

    def context(self, key: Hashable) -> dict[str, Any]:
        """What the leaders of ``key`` keep (read-only outside a leader; empty if none yet)."""
        queue = self._queues.get(key)
        return queue.context if queue is not None else {}

    def submit(
        self,
        key: Hashable,
        item: T,
        commit: Callable[[list[Member[T, R]], dict[str, Any]], None],
        linger: float | None = None,
    ) -> R:
        """Queue ``item`` under ``key``; return its outcome once a group holding it is committed.

        ``commit`` is the caller's, used if this caller comes to lead a group.
        """
        member: Member[T, R] = Member(item)
        with self._lock:
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _Queue()
            queue.pending.append(member)
            leads = queue.leader is None
            if leads:
                queue.leader = member
        if not leads:
            member._wake.wait()
            if member.settled:
                return member.outcome()
        self._lead(queue, key, commit, self.linger if linger is None else linger)
        return member.outcome()

    def _lead(
        self,
        queue: _Queue[T, R],
        key: Hashable,
        commit: Callable[[list[Member[T, R]], dict[str, Any]], None],
        linger: float,
    ) -> None:
        if linger > 0 and queue.last_size > 1:
            time.sleep(linger)  # a busy table: let the writers now staging catch this group
        with self._lock:
            group, queue.pending = queue.pending, []
        try:
            commit(group, queue.context)
        except BaseException as exc:
            for m in group:
                m.fail(exc)
            raise
        finally:
            for m in group:
                m.fail(UnsettledError("the group's commit left this chunk's outcome unknown; retry"))
            with self._lock:
                queue.last_size = len(group)
                if queue.pending:
                    queue.leader = queue.pending[0]
                    queue.leader._wake.set()  # not settled: it wakes to lead the next group
                else:
                    queue.leader = None
                    if not queue.context:
                        del self._queues[key]
