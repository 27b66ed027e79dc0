"""Failed logins: each one logged once, and its answer slowed down — never a lockout.

A *failed login* is a credential that names no live token: an unknown or revoked bearer token on
the HTTP API, a wrong password (or user) on the SQL server. The guard is told of a failure only
after the credential was looked at and found wrong: there is nothing to check before, so a correct
credential is always accepted at once, whatever failed before it, from whatever address.

Why no lockout: a lockout is keyed by something the client sends or shares (a user name, an
address behind a proxy or a NAT), so anyone who knows the key locks its owner out; and it protects
nothing, because a token is 256 random bits and guessing one is hopeless. What is left worth doing:

- **Say who tries.** Each failure is logged once, at WARNING, as the event ``login.failed``: the
  service, the client's address (or what stands for it), the user named if any, what was tried —
  a token's name, or the first characters of a secret (:func:`credential_hint`), never a secret —
  the client's failures within ``window`` and the delay its answer got.
- **Make trying slow.** The answer to a failure waits ``delay`` seconds, doubled for each earlier
  failure of the same client within ``window``, at most ``max_delay``: a person who mistypes a
  token waits a second; a script trying tokens one after another gets one answer per
  ``max_delay``.
- **Never let slowing become the attack.** A waiting answer holds a thread (the SQL server's
  login, the status page's) or a connection (the HTTP API, which waits without a thread): at most
  ``max_delayed`` answers wait at once in one guard; a failure past that is answered at once, and
  its log line says so (``delay_s`` 0, ``slowed`` false). So slowing is no rate limit for a client
  with many connections: it bounds what the guard holds, not what a client may try; the server's
  own limits (connections, threads) bound the rest.

The state is this process's memory (a restart forgets it). Clients are kept only while they have
failures in the window, at most :data:`MAX_CLIENTS` of them.

Use: one guard per server, told of each failure after the credential was checked::

    guard = LoginGuard.of(settings.server, service="SQL server")   # [server] login_* settings
    if refused:
        guard.failed(address, tried=credential_hint(password), user=user)  # logs, then waits
    # an async server: await guard.failed_async(address, tried=...)
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol

from metastore.logs import event

log = logging.getLogger("streampart.auth")

# Why 10,000: an entry is a few hundred bytes; an attacker spraying from many addresses fills the
# table, and then the clients that failed least recently are forgotten first (their next failure
# is answered after the first delay again, which costs nobody anything).
MAX_CLIENTS = 10_000

# How much of a bearer token a log line may show: "spt_" and 4 characters of its 43 random ones
# (24 of 256 bits) — enough to tell a stale token from a mistyped one, nothing to guess with.
HINT_CHARS = 8


def credential_hint(secret: str) -> str:
    """What a log may say of a credential that was tried: its first characters, never all of it."""
    if len(secret) <= 2 * HINT_CHARS:  # too short to show any of it without showing most of it
        return f"({len(secret)} characters)"
    return f"{secret[:HINT_CHARS]}… ({len(secret)} characters)"


class LoginSettings(Protocol):
    """The settings a guard takes (``[server]``: :class:`ingest.api.config.ServerConfig`)."""

    @property
    def login_delay(self) -> timedelta: ...
    @property
    def login_delay_max(self) -> timedelta: ...
    @property
    def login_window(self) -> timedelta: ...
    @property
    def login_max_delayed(self) -> int: ...


class LoginGuard:
    """Failed logins: each logged once, its answer delayed more the more its client failed lately,
    never a refusal of a correct credential (thread-safe; see the module's docstring).

    Args:
        delay_s: How long the answer to a client's first failure (within ``window_s``) waits,
            seconds; each further failure doubles it (0: failures are answered at once).
        max_delay_s: The longest an answer waits, seconds.
        window_s: How long a failure counts towards its client's next delay, seconds.
        max_delayed: How many answers may wait at once; a failure past it is answered at once.
        service: Names the service in log lines (``HTTP API``, ``SQL server``).
        clock: Monotonic seconds (tests give their own).
        sleep: Waits a delay in :meth:`failed` (tests give their own).
        async_sleep: Waits a delay in :meth:`failed_async` (tests give their own).
    """

    def __init__(
        self,
        delay_s: float = 1.0,
        max_delay_s: float = 10.0,
        window_s: float = 60.0,
        max_delayed: int = 32,
        *,
        service: str = "HTTP API",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.delay_s, self.max_delay_s = delay_s, max(delay_s, max_delay_s)
        self.window_s, self.max_delayed = window_s, max_delayed
        self.service = service
        self._clock, self._sleep, self._async_sleep = clock, sleep, async_sleep
        self._clients: OrderedDict[str, deque[float]] = OrderedDict()  # least recently failed first
        self._delayed = 0  # answers waiting now
        self._lock = threading.Lock()

    @classmethod
    def of(cls, config: LoginSettings, service: str = "HTTP API") -> LoginGuard:
        """A guard with the ``[server]`` settings ``login_delay``, ``login_delay_max``,
        ``login_window`` and ``login_max_delayed``."""
        return cls(
            config.login_delay.total_seconds(),
            config.login_delay_max.total_seconds(),
            config.login_window.total_seconds(),
            config.login_max_delayed,
            service=service,
        )

    @property
    def delayed(self) -> int:
        """How many answers to failed logins are waiting now."""
        with self._lock:
            return self._delayed

    def failed(self, client: str, tried: str, user: str | None = None) -> float:
        """Log a failed login of ``client``, then wait before the caller answers it.

        Args:
            client: The client's address (or what stands for it when there is none).
            tried: A token's name or a :func:`credential_hint`, never a secret.
            user: The user name the client gave, if the protocol has one.

        Returns:
            The seconds waited (0: not slowed).
        """
        delay = self._record(client, tried, user)
        if delay <= 0:
            return 0.0
        try:
            self._sleep(delay)
        finally:
            self._release()
        return delay

    async def failed_async(self, client: str, tried: str, user: str | None = None) -> float:
        """:meth:`failed` for an event loop: the wait holds no thread."""
        delay = self._record(client, tried, user)
        if delay <= 0:
            return 0.0
        try:
            await self._async_sleep(delay)
        finally:
            self._release()
        return delay

    def _record(self, client: str, tried: str, user: str | None) -> float:
        """Count and log one failure; the delay its answer takes, a waiting place held if > 0."""
        now = self._clock()
        with self._lock:
            failures = self._clients.pop(client, None) or deque()
            self._clients[client] = failures  # the most recently failed last
            while failures and failures[0] <= now - self.window_s:
                failures.popleft()
            failures.append(now)
            count = len(failures)
            delay = min(self.max_delay_s, self.delay_s * 2.0 ** min(count - 1, 64))
            slowed = delay > 0 and self._delayed < self.max_delayed
            if slowed:
                self._delayed += 1
            self._forget(now)
        why = f"answered after {delay:g} s" if slowed else "answered at once"
        if delay > 0 and not slowed:
            why += f" ({self.max_delayed} answers waiting already)"
        who = f" as user {user!r}" if user is not None else ""
        event(
            log, logging.WARNING, "login.failed",
            f"failed login to the {self.service} from {client}{who}: tried {tried} "
            f"({count} in the last {self.window_s:g} s; {why})",
            client=client, service=self.service, user=user, tried=tried, failures=count,
            delay_s=delay if slowed else 0.0, slowed=slowed,
        )  # fmt: skip
        return delay if slowed else 0.0

    def _release(self) -> None:
        with self._lock:
            self._delayed -= 1

    def _forget(self, now: float) -> None:
        """Drop clients with no failure left in the window, and the oldest past MAX_CLIENTS (lock held)."""
        while self._clients:
            client, failures = next(iter(self._clients.items()))
            stale = all(t <= now - self.window_s for t in failures)
            if not stale and len(self._clients) <= MAX_CLIENTS:
                break
            del self._clients[client]
