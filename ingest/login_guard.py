"""Failed logins: each one logged with the client's address, and a lockout per address.

A *failed login* is a credential that names no live token: an unknown or revoked bearer token on
the HTTP API, a wrong password (or user) on the SQL server. Each is logged at WARNING as the
event ``login.failed`` with the client's address, the service and what was tried — a token's
name, or the first characters of a bearer token (:func:`credential_hint`), never a secret. After
``max_failures`` failures from one address within ``window`` the address is *locked out* for
``lockout`` (event ``login.locked``): :meth:`LoginGuard.check` then raises
:class:`LoginLockedError` before any credential is looked at — the HTTP API answers 429 with
``Retry-After`` — so one address tries at most ``max_failures`` credentials per ``window`` plus
``lockout``. A successful login does not clear the count (one valid token must not buy more
guesses); locked-out attempts are not counted (a client waiting out its lockout is not punished
for it).

The state is this process's memory: a per-process limit, which is what a brute-force guard needs
(several servers each allow ``max_failures``); a restart forgets it. Addresses are kept only
while they have failures in the window, at most :data:`MAX_CLIENTS` of them.

Reuse (the SQL server, say): one guard per server, then per login attempt::

    guard = LoginGuard.of(settings.server, service="sql")   # [server] login_* settings
    guard.check(address)            # raises LoginLockedError (.retry_after: seconds) when locked out
    if not valid:
        guard.failed(address, tried=user)   # logs it; returns the lockout in seconds if this one locked
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from metastore.errors import StreampartError
from metastore.logs import event

log = logging.getLogger("streampart.auth")

# Why 10,000: an entry is a few hundred bytes; an attacker spraying from many addresses fills the
# table, and then the addresses that failed least recently are forgotten first (each of them had
# at most max_failures tries in its window anyway).
MAX_CLIENTS = 10_000

# How much of a bearer token a log line may show: "spt_" and 4 characters of its 43 random ones
# (24 of 256 bits) — enough to tell a stale token from a mistyped one, nothing to guess with.
HINT_CHARS = 8


class LoginLockedError(StreampartError):
    """A client address failed too many logins lately: it may try again in ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def retry_after_header(self) -> str:
        """``Retry-After``'s value: whole seconds, at least 1."""
        return str(max(1, math.ceil(self.retry_after)))


def credential_hint(secret: str) -> str:
    """What a log may say of a credential that was tried: its first characters, never all of it."""
    if len(secret) <= 2 * HINT_CHARS:  # too short to show any of it without showing most of it
        return f"({len(secret)} characters)"
    return f"{secret[:HINT_CHARS]}… ({len(secret)} characters)"


class LoginSettings(Protocol):
    """The settings a guard takes (``[server]``: :class:`ingest.api.config.ServerConfig`)."""

    @property
    def login_max_failures(self) -> int: ...
    @property
    def login_window(self) -> timedelta: ...
    @property
    def login_lockout(self) -> timedelta: ...


@dataclass
class _Client:
    failures: deque[float] = field(default_factory=deque)
    locked_until: float = 0.0


class LoginGuard:
    """Failed logins per client address: logged, and locked out after too many (thread-safe).

    Args:
        max_failures: Failures within ``window_s`` that lock an address out (0: never locked).
        window_s: The window failures are counted in, seconds.
        lockout_s: How long a locked-out address is refused, seconds.
        service: Names the service in log lines (``api``, ``sql``).
        clock: Monotonic seconds (tests give their own).
    """

    def __init__(
        self,
        max_failures: int = 10,
        window_s: float = 60.0,
        lockout_s: float = 60.0,
        *,
        service: str = "api",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures, self.window_s, self.lockout_s = max_failures, window_s, lockout_s
        self.service = service
        self._clock = clock
        self._clients: OrderedDict[str, _Client] = OrderedDict()  # least recently failed first
        self._lock = threading.Lock()

    @classmethod
    def of(cls, config: LoginSettings, service: str = "api") -> LoginGuard:
        """A guard with the ``[server]`` settings ``login_max_failures``, ``login_window``,
        ``login_lockout``."""
        return cls(
            config.login_max_failures,
            config.login_window.total_seconds(),
            config.login_lockout.total_seconds(),
            service=service,
        )

    def locked_for(self, client: str) -> float | None:
        """Seconds until ``client`` may log in again, or None: it is not locked out."""
        now = self._clock()
        with self._lock:
            state = self._clients.get(client)
            if state is None or state.locked_until <= now:
                return None
            return state.locked_until - now

    def check(self, client: str) -> None:
        """Raise :class:`LoginLockedError` if ``client`` is locked out (before looking at its credential)."""
        wait = self.locked_for(client)
        if wait is not None:
            raise LoginLockedError(
                f"too many failed logins from {client}: try again in {max(1, math.ceil(wait))} s",
                wait,
            )

    def failed(self, client: str, tried: str) -> float | None:
        """Record and log a failed login of ``client`` (``tried``: a token's name or a
        :func:`credential_hint`, never a secret); returns the lockout, in seconds, if this failure
        locked the address out, else None."""
        now = self._clock()
        with self._lock:
            state = self._clients.pop(client, None) or _Client()
            self._clients[client] = state  # the most recently failed last
            while state.failures and state.failures[0] <= now - self.window_s:
                state.failures.popleft()
            state.failures.append(now)
            count = len(state.failures)
            locked = 0 < self.max_failures <= count
            if locked:
                state.locked_until = now + self.lockout_s
                state.failures.clear()
            self._forget(now)
        event(
            log, logging.WARNING, "login.failed",
            f"failed login to the {self.service} from {client}: tried {tried} "
            f"({count} in the last {self.window_s:g} s)",
            client=client, service=self.service, tried=tried, failures=count,
        )  # fmt: skip
        if not locked:
            return None
        event(
            log, logging.WARNING, "login.locked",
            f"{client} locked out of the {self.service} for {self.lockout_s:g} s after {count} failed "
            f"logins in {self.window_s:g} s",
            client=client, service=self.service, failures=count, lockout_s=self.lockout_s,
        )  # fmt: skip
        return self.lockout_s

    def _forget(self, now: float) -> None:
        """Drop addresses with nothing left to remember, and the oldest past MAX_CLIENTS (lock held)."""
        while self._clients:
            client, state = next(iter(self._clients.items()))
            stale = state.locked_until <= now and all(t <= now - self.window_s for t in state.failures)
            if not stale and len(self._clients) <= MAX_CLIENTS:
                break
            del self._clients[client]
