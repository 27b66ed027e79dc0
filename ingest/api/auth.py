"""Bearer tokens: made at random, stored as SHA-256 digests, checked in constant time.

A token is 256 random bits, so a plain SHA-256 digest (no salt, no slow hash) is enough: the
digest is the lookup key in the metastore, and a stolen metastore reveals no usable token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from ingest.api.ttl_cache import TtlCache
from ingest.login_guard import LoginGuard, credential_hint
from metastore import clock
from metastore.models import ApiToken, Permission
from metastore.store import Metastore

TOKEN_PREFIX = "spt_"


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
    """Finds the token of a bearer credential, with a short cache in front of the metastore.

    A lookup — a known token, and an unknown or revoked one too — is remembered for
    ``ttl_seconds`` (``server.auth_cache_ttl``): a token revoked meanwhile keeps working on this
    server for at most that long, and a token made meanwhile is refused for as long if it was
    tried before it existed. The catalogs other engines read through (Iceberg REST, Delta Sharing)
    look every token up afresh: a revoked token reads nothing more from the moment it is revoked.
    An expired token is refused from the instant it expires, cached or not.
    """

    def __init__(self, store: Metastore, ttl_seconds: float, guard: LoginGuard | None = None) -> None:
        self.store, self.ttl = store, ttl_seconds
        self.guard = guard
        self._cache: TtlCache[str, tuple[ApiToken | None]] = TtlCache(ttl_seconds)

    def authenticate(self, credential: str, fresh: bool = False) -> ApiToken | None:
        """The live token of ``credential``, or None (unknown, revoked or expired); nothing logged or
        slowed: a login attempt goes through :meth:`login`. ``fresh``: read from the metastore now,
        not from the cache (a token revoked a moment ago is refused at once)."""
        digest = hash_token(credential)
        # (a 1-tuple: an unknown token is remembered too, as (None,))
        if fresh:
            found = (self.store.find_token_by_hash(digest),)
            self._cache.put(digest, found)
        else:
            found = self._cache.get(digest, lambda: (self.store.find_token_by_hash(digest),))
        (token,) = found
        # the database compared digests already; this keeps the final check constant-time
        if token is None or not hmac.compare_digest(token.token_hash, digest):
            return None
        if token.expired(clock.now()):
            return None
        return token

    async def login(self, credential: str, client: str, fresh: bool = False) -> ApiToken | None:
        """:meth:`authenticate` as a login from ``client`` (its address): the credential is always
        looked up first, so a live token gets in at once whatever failed before; a failure is logged
        and answered late by the ``guard`` (:class:`~ingest.login_guard.LoginGuard`), waiting
        without holding a thread."""
        token = await run_in_threadpool(self.authenticate, credential, fresh)
        if token is None and self.guard is not None:
            await self.guard.failed_async(client, credential_hint(credential))
        return token
