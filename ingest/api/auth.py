"""Bearer tokens: made at random, stored as SHA-256 digests, checked in constant time.

A token is 256 random bits, so a plain SHA-256 digest (no salt, no slow hash) is enough: the
digest is the lookup key in the metastore, and a stolen metastore reveals no usable token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from metastore.models import ApiToken, Permission
from metastore.store import Metastore

TOKEN_PREFIX = "spt_"
# Lookups remembered at once; past that the cache starts afresh (unknown tokens sent in bulk
# must not grow it without bound).
_CACHE_MAX = 10_000


def new_token() -> str:
    """A fresh token: ``spt_`` and 43 URL-safe characters (256 random bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token, or anyone when the server runs with ``--insecure-no-auth``."""

    token: ApiToken | None
    insecure: bool = False

    @property
    def name(self) -> str:
        return "anonymous (auth off)" if self.token is None else self.token.name

    def allows(self, permission: Permission, namespace: str) -> bool:
        return self.insecure or (self.token is not None and self.token.allows(permission, namespace))


class Authenticator:
    """Finds the token of a bearer credential, with a short cache in front of the metastore."""

    def __init__(self, store: Metastore, ttl_seconds: float) -> None:
        self.store, self.ttl = store, ttl_seconds
        self._cache: dict[str, tuple[float, ApiToken | None]] = {}
        self._lock = threading.Lock()

    def authenticate(self, credential: str) -> ApiToken | None:
        digest = hash_token(credential)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(digest)
        if hit is not None and hit[0] > now:
            token = hit[1]
        else:
            token = self.store.find_token_by_hash(digest)
            if self.ttl > 0:
                with self._lock:
                    if len(self._cache) >= _CACHE_MAX:
                        self._cache.clear()
                    self._cache[digest] = (now + self.ttl, token)
        # the database compared digests already; this keeps the final check constant-time
        if token is None or not hmac.compare_digest(token.token_hash, digest):
            return None
        return token
