"""Commit holders: which processes are committing chunks right now, known through the metastore.

A COMMITTING chunk names the process whose attempt holds it (``sp_chunks.holder``, host:pid:nonce).
While a process has a commit attempt in flight in a metastore, it keeps the lease
``commit-holder/<holder>`` there (``sp_leases``), renewed every :data:`HEARTBEAT` by a thread and
lapsing :data:`TTL` after its last renewal; the thread stops once no attempt is in flight, and the
lease lapses with it.

A retry that finds its chunk COMMITTING may take the attempt over at once (instead of after twice
``chunk.commit_timeout``) when the attempt is known to be over (:meth:`CommitHolder.attempt_over`):

- it is this process's own attempt, and no attempt on the chunk is in flight here (it failed and
  returned);
- another process holds it, and that process's lease lapsed more than :data:`GRACE` ago (or was
  released): it died — SIGKILL, a crashed host — or has had no commit in flight since.

The fence that makes this safe is the holder's own: a process publishes a Delta commit only while
its lease is live by its own clock (:meth:`CommitHolder.require_live`: the start of its last
successful renewal plus :data:`TTL`, less :data:`MARGIN`), so a process that stalls past its lease
never commits after a successor took its chunk over; the successor waits :data:`GRACE` more, for
clocks that disagree a little. (The deadline of an attempt, ``chunk.commit_timeout``, still fences
as before; twice it is still when any retry may take over.)

Deletes and expiry passes use the same lease (:meth:`CommitHolder.holding` under their owner,
``<holder>/<nonce>``): while one runs the lease is renewed, ~10 s after the process died another
process takes the work over (:func:`metastore.store.leases.holder_gone`), and the work checks
:meth:`CommitHolder.require_live` before each commit it makes, so a frozen process that wakes
after its work was taken over never commits it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Collection, Iterator
from datetime import datetime, timedelta
from typing import Any

from ingest.errors import CommitTimeoutError
from metastore import clock
from metastore.errors import StreampartError
from metastore.models import Chunk
from metastore.store.leases import HOLDER_GRACE, HOLDER_PREFIX

log = logging.getLogger("streampart.commits")

PREFIX = HOLDER_PREFIX
HEARTBEAT = 1.0  # seconds between renewals while commits are in flight
TTL = timedelta(seconds=8)  # a lease lapses this long after its last renewal
GRACE = HOLDER_GRACE  # a successor waits this much longer (clocks of two hosts may differ)
# A holder id leaves room for ``/<nonce>`` (WORK_NONCE characters) within a delete's or an expiry's
# owner column (64).
WORK_NONCE = 6
HOLDER_MAX = 64 - 1 - WORK_NONCE
MARGIN = 1.0  # seconds: a holder stops publishing this long before its lease would lapse

_ids: dict[int, str] = {}

# Chunk id → commit attempts on it in flight in this process, whichever catalog or store object
# made them (two stores of one metastore in one process share the holder's name and lease row).
_IN_FLIGHT: dict[str, int] = {}
_IN_FLIGHT_LOCK = threading.Lock()


def holder_id() -> str:
    """This process's name as a commit holder (a new one after a fork)."""
    pid = os.getpid()
    if pid not in _ids:
        suffix = f":{pid}:{uuid.uuid4().hex[:8]}"  # the host name is cut to fit: pid and nonce stay
        _ids[pid] = socket.gethostname()[: HOLDER_MAX - len(suffix)] + suffix
    return _ids[pid]


def work_owner() -> str:
    """A new owner for a delete or an expiry pass carried by this process: ``<holder id>/<nonce>``
    (its own, so two carried by one process never take each other's for theirs)."""
    return f"{holder_id()}/{uuid.uuid4().hex[:WORK_NONCE]}"


class CommitHolder:
    """This process's commit-holder lease in one metastore, and its attempts in flight there."""

    def __init__(self, store: Any) -> None:
        self._store = weakref.ref(store)
        self.id = holder_id()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._valid_until = 0.0  # time.monotonic() at which the lease may have lapsed
        self._expires_at: datetime | None = None  # when it lapses in the metastore (by clock.now())
        self._epoch: int | None = None  # the lease's epoch: it rises when a lapsed lease is taken again
        self._entered: dict[str, tuple[int | None, int]] = {}  # chunk id → (epoch at entry, depth)
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return PREFIX + self.id

    # -- this process's side ------------------------------------------------------------------
    @contextlib.contextmanager
    def holding(self, chunk_id: str) -> Iterator[None]:
        """While inside, this process has a commit attempt on ``chunk_id`` in flight: its lease is
        kept live, and a retry of the chunk in this process is busy. Enter before the attempt is
        recorded (``begin_commit``, ``take_over_commit``), leave once it is answered.

        Raises:
            MetastoreUnavailableError (or another StreampartError): the lease could not be taken.
        """
        with self._lock:
            self._in_flight += 1
        with _IN_FLIGHT_LOCK:
            _IN_FLIGHT[chunk_id] = _IN_FLIGHT.get(chunk_id, 0) + 1
        try:
            if time.monotonic() > self._valid_until - TTL.total_seconds() / 2 or self._lapsing():
                self._renew()
            with self._lock:
                epoch, depth = self._entered.get(chunk_id, (self._epoch, 0))
                self._entered[chunk_id] = (epoch, depth + 1)
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._renew_loop, name="commit-holder", daemon=True
                    )
                    self._thread.start()
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                if chunk_id in self._entered:
                    epoch, depth = self._entered.pop(chunk_id)
                    if depth > 1:
                        self._entered[chunk_id] = (epoch, depth - 1)
            with _IN_FLIGHT_LOCK:
                n = _IN_FLIGHT.pop(chunk_id, 0) - 1
                if n > 0:
                    _IN_FLIGHT[chunk_id] = n

    def require_live(self, chunk_ids: Collection[str] = ()) -> None:
        """Before a Delta commit of ``chunk_ids``: fail unless this process's lease is live for a
        while yet, and has been all along since their attempts began (the same epoch: a lease that
        lapsed — the process stalled, a frozen VM — and was taken again does not vouch for them,
        since another process may have taken their commits over meanwhile).

        Raises:
            CommitTimeoutError: the lease lapsed, or could not be renewed in time; nothing was
                committed.
        """
        if time.monotonic() > self._valid_until - MARGIN:
            with contextlib.suppress(StreampartError):
                self._renew()
        if time.monotonic() > self._valid_until - MARGIN:
            raise CommitTimeoutError(
                "this process could not keep its commit lease in the metastore alive, so another "
                "process may take its commits over; nothing was committed: retry with the same "
                "idempotency key"
            )
        with self._lock:
            lapsed = [c for c in chunk_ids if c in self._entered and self._entered[c][0] != self._epoch]
        if lapsed:
            raise CommitTimeoutError(
                f"this process's commit lease lapsed while chunk {lapsed[0]} was being committed (the "
                "process stalled), so another process may have taken it over; nothing was committed: "
                "retry with the same idempotency key"
            )

    def holds(self, key: str) -> bool:
        """Whether this process's lease is live for a while yet and has been all along since the
        work ``key`` (a delete's or an expiry's owner) entered :meth:`holding`: checked before each
        commit the work makes, as :meth:`require_live` before a chunk's."""
        try:
            self.require_live([key])
        except CommitTimeoutError:
            return False
        return True

    def _lapsing(self) -> bool:
        """Whether the lease lapses soon, or has lapsed, by the clock the metastore's leases are
        compared against (``clock.now()``). Its monotonic deadline says when it lapses if that clock
        runs as time does; one that jumps (an NTP step, a test's moved clock) lapses it sooner, and
        an attempt entering then would take the old epoch for its own: the renewal that takes the
        lapsed lease again, a new epoch, would then count the attempt as overtaken."""
        with self._lock:
            expires = self._expires_at
        return expires is None or clock.now() > expires - timedelta(seconds=MARGIN)

    def _renew(self) -> None:
        store = self._store()
        if store is None:
            return
        started = time.monotonic()
        lease = None
        for _ in range(3):  # None: another thread of this process created or moved the row just now
            lease = store.acquire_lease(self.name, self.id, TTL, info={"pid": os.getpid()})
            if lease is not None:
                break
        if lease is not None:
            with self._lock:  # a lease that had lapsed in the metastore was taken again: a new epoch
                self._epoch = lease.epoch
                self._valid_until = max(self._valid_until, started + TTL.total_seconds())
                self._expires_at = lease.expires_at

    def _renew_loop(self) -> None:
        while True:
            time.sleep(HEARTBEAT)
            with self._lock:
                if self._in_flight == 0:
                    self._thread = None
                    return
            try:
                self._renew()
            except Exception as exc:  # the metastore is down: commits stop when the lease runs out
                log.warning("commit-holder lease %s not renewed: %s", self.name, exc)

    # -- another attempt's side ---------------------------------------------------------------
    def attempt_over(self, chunk: Chunk) -> bool:
        """Whether ``chunk``'s COMMITTING attempt is known to be over (see the module doc)."""
        if chunk.holder is None or chunk.attempt is None:
            return False  # begun before holders were recorded: its deadline decides
        if chunk.holder == self.id:
            with _IN_FLIGHT_LOCK:
                return chunk.id not in _IN_FLIGHT
        store = self._store()
        if store is None:
            return False
        lease = store.get_lease(PREFIX + chunk.holder)
        if lease is None:
            return True
        return lease.holder is None or lease.expires_at + GRACE < clock.now()


_HOLDERS: weakref.WeakKeyDictionary[Any, CommitHolder] = weakref.WeakKeyDictionary()
_HOLDERS_LOCK = threading.Lock()


def commit_holder(store: Any) -> CommitHolder:
    """This process's commit holder in ``store``'s metastore (one per store object)."""
    with _HOLDERS_LOCK:
        holder = _HOLDERS.get(store)
        if holder is None or holder.id != holder_id():
            holder = _HOLDERS[store] = CommitHolder(store)
        return holder
