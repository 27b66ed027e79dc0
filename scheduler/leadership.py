"""Leadership of the roll daemon: one lease in the metastore, with expiry and a fencing epoch.

Every daemon calls :meth:`Leadership.tick` at each heartbeat. A standby tries to take the
lease (it succeeds once the leader's lease has lapsed or was released); the leader renews it.
A leader counts itself leader only until its *local* deadline — the moment its last successful
renewal started plus the lease's TTL — so a leader whose renewals stall (metastore
unreachable, process paused) stops starting rolls before any standby can take over.

That alone does not protect against a process that stalls *between* checking and acting, so
every metastore write that matters (beginning or claiming a roll, extending roll leases) is
fenced: it carries the lease and succeeds only if that lease is still held at its epoch, in
the same transaction. Lease expiry compares the clocks of different hosts: keep them
synchronised (NTP) to well within the lease TTL.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from metastore import clock
from metastore.errors import LeaseLostError, MetastoreUnavailableError
from metastore.logs import event
from metastore.models import Lease
from metastore.store import Metastore

log = logging.getLogger("streampart.scheduler")


@dataclass
class Leadership:
    """The lease ``name`` as seen by one daemon (``holder``)."""

    store: Metastore
    name: str
    holder: str
    ttl: timedelta
    info: dict[str, Any] = field(default_factory=dict)
    on_elected: Callable[[Lease], None] | None = None
    on_deposed: Callable[[str], None] | None = None
    _lease: Lease | None = None
    _deadline: float = 0.0  # clock.monotonic() until which we may act as leader
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def lease(self) -> Lease | None:
        """The lease we hold, if we are the leader right now (else ``None``)."""
        lease = self._lease
        return lease if lease is not None and clock.monotonic() < self._deadline else None

    @property
    def is_leader(self) -> bool:
        return self.lease is not None

    def tick(self, acquire: bool = True) -> Lease | None:
        """Renew our lease, or (with ``acquire``) try to take it; returns it if we lead."""
        with self._lock:
            started = clock.monotonic()
            now = clock.now()
            if self._lease is not None:
                try:
                    self._lease = self.store.renew_lease(self._lease, self.ttl, now=now)
                    self._deadline = started + self.ttl.total_seconds()
                except LeaseLostError as exc:
                    self._depose(str(exc))
                except MetastoreUnavailableError as exc:
                    if clock.monotonic() >= self._deadline:
                        self._depose(f"could not renew the lease in time: {exc}")
                    else:
                        event(
                            log,
                            logging.WARNING,
                            "lease.renew_failed",
                            "lease renewal failed; retrying",
                            lease=self.name,
                            error=str(exc),
                        )
            if self._lease is None and acquire:
                try:
                    lease = self.store.acquire_lease(
                        self.name, self.holder, self.ttl, info=self.info, now=now
                    )
                except MetastoreUnavailableError as exc:
                    event(
                        log,
                        logging.WARNING,
                        "lease.acquire_failed",
                        "cannot reach the metastore",
                        lease=self.name,
                        error=str(exc),
                    )
                    lease = None
                if lease is not None:
                    self._lease, self._deadline = lease, started + self.ttl.total_seconds()
                    event(
                        log,
                        logging.INFO,
                        "leader.elected",
                        "this daemon is the leader",
                        lease=self.name,
                        epoch=lease.epoch,
                        holder=self.holder,
                    )
                    if self.on_elected is not None:
                        self.on_elected(lease)
            return self.lease

    def _depose(self, reason: str) -> None:
        lease, self._lease, self._deadline = self._lease, None, 0.0
        event(
            log,
            logging.WARNING,
            "leader.deposed",
            "this daemon is no longer the leader",
            lease=self.name,
            epoch=lease.epoch if lease else None,
            reason=reason,
        )
        if self.on_deposed is not None:
            self.on_deposed(reason)

    def step_down(self, reason: str) -> None:
        """Stop leading (a fenced write failed): the next tick may try to take the lease again."""
        with self._lock:
            if self._lease is not None:
                self._depose(reason)

    def release(self) -> None:
        """Give the lease up (clean shutdown) so a standby takes over at its next heartbeat."""
        with self._lock:
            lease, self._lease, self._deadline = self._lease, None, 0.0
            if lease is None:
                return
            try:
                self.store.release_lease(lease)
                event(
                    log,
                    logging.INFO,
                    "leader.released",
                    "leadership released",
                    lease=self.name,
                    epoch=lease.epoch,
                )
            except MetastoreUnavailableError as exc:
                event(
                    log,
                    logging.WARNING,
                    "leader.release_failed",
                    "could not release the lease; it lapses by itself",
                    lease=self.name,
                    error=str(exc),
                )
