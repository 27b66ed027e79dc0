"""A small thread-safe cache whose entries expire: what the HTTP server remembers between requests.

The server does per request only what it cannot do once: a token's lookup
(:class:`~ingest.api.auth.Authenticator`) and a table's (:class:`~ingest.api.lookups.TableLookups`)
are remembered for a short, configured time. Entries expire on :func:`metastore.clock.monotonic`,
so a test moves the clock past a TTL instead of sleeping. A TTL of 0 remembers nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from metastore import clock

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# Entries remembered at once; past that the cache starts afresh (keys sent in bulk — unknown
# tokens, say — must not grow it without bound; starting afresh costs one lookup per live key).
MAX_ENTRIES = 10_000


class TtlCache(Generic[K, V]):
    """``key → value``, each remembered for ``ttl_seconds`` after it was loaded."""

    def __init__(self, ttl_seconds: float, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl = ttl_seconds
        self.max_entries = max_entries
        self._entries: dict[K, tuple[float, V]] = {}
        self._lock = threading.Lock()

    def get(self, key: K, load: Callable[[], V]) -> V:
        """The remembered value of ``key``, or ``load()`` (remembered, unless the TTL is 0).

        ``load`` runs outside the lock: a slow metastore holds up no other key. Two requests
        missing the same key at once both load it; the later one's value is kept.
        """
        hit = self.peek(key)
        if hit is not None:
            return hit
        value = load()
        self.put(key, value)
        return value

    def peek(self, key: K) -> V | None:
        """The remembered value of ``key`` if it has not expired, else None."""
        with self._lock:
            hit = self._entries.get(key)
        if hit is None or hit[0] <= clock.monotonic():
            return None
        return hit[1]

    def put(self, key: K, value: V) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            if len(self._entries) >= self.max_entries and key not in self._entries:
                self._entries.clear()
            self._entries[key] = (clock.monotonic() + self.ttl, value)

    def discard(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
