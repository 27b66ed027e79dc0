"""What the SQL server lets a client's statement do, decided on Spark's own reading of it.

Every statement a HiveServer2 client sends (``streampart sql-server``) is read by Spark's lexer
and parser in the JVM (``Reading`` in ``streampart/java/``): the text is split at the semicolons
Spark finds, leading ``USE ns;`` statements are taken off, and the last statement is parsed into
the plan Spark will run. Anything but one query, ``USE``, ``SHOW SCHEMAS``, ``SHOW TABLES`` or
``DESCRIBE`` — a script, a command, DML, DDL, ``SET`` — is refused there, before analysis. That
reading reaches :meth:`SqlGate.decide`:

- names resolve as in ``streampart query`` (``NS.T``; inside a namespace set by ``USE NS`` also
  ``T`` and ``T@SRC``); every namespace a statement reads needs ``read`` in the client's token
  (the client logs in with the token's name as user and the token as password), asked before
  the name is looked up; ``SHOW SCHEMAS``, ``SHOW TABLES`` and ``DESCRIBE`` list what the token
  may read (:mod:`streampart.sql_catalog`);
- each table it names is read at one pinned Delta version (one snapshot per table per
  statement, shared by a link to it in the same statement). A pinned snapshot is reused by the
  statements of the next ``freshness`` seconds, then pinned again: a commit or a roll is visible
  to a statement that starts at most ``freshness`` after it;
- the session runs with the server's Spark settings: connection settings are refused when the
  session opens (``Gate``), ``SET`` is refused, the server's settings are put back in the
  session at its first statement, and ``${…}`` is never substituted.

A snapshot is a DataFrame over the fixed file list of its version, made once per version in the
server's own session; its analyzed plan is staged for the statement (``Statements``), Spark's
analyzer puts it where the statement names the table, and ``Policy`` checks what the statement
resolved to; in a client session it refuses any plan that was not staged so. What a roll sweeps
stays on disk until housekeeping removes it past its retention (days), so a pinned version never
loses a file while a statement reads it — the protection ``streampart query`` has.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ingest.login_guard import LoginGuard
from metastore import clock as metastore_clock
from metastore.catalog import Catalog
from metastore.errors import StreampartError, UserInputError
from metastore.links import Resolved
from metastore.models import ApiToken, Permission, TableName, check_identifier
from metastore.namespaces import check_namespace
from streampart.errors import QueryRefusedError
from streampart.query import (
    Snapshot,
    catalog_resolver,
    identity,
    pin,
    version_of,
    view_of,
)
from streampart.query_policy import Read, TableRef, versioned
from streampart.sql_catalog import NO_ROWS, describe, refuse_unreadable, schemas, tables
from streampart.sql_endpoint import LOCAL_USER

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_FORGET_EVERY = 64  # statements between two looks for closed client sessions

_USER_SHOWN = 64  # characters of a refused login's user name told back to its client

# Why 4: a table's frames (file index and analyzed plan) of the versions statements still read; a
# statement stages its plan at once, so only a statement between staging and analysis needs an
# older one.
_FRAMES_KEPT = 4


@dataclass
class _Pinned:
    snapshot: Snapshot
    at: float  # time.monotonic() of the pin that found this version


@dataclass(frozen=True)
class Client:
    """A client session, as the Thrift server knows it (``Hooks.clientOf``)."""

    session: str
    user: str
    token_hash: str  # SHA-256 of the password it logged in with
    address: str

    @classmethod
    def of(cls, fields: Any) -> Client:
        session, user, token_hash, address = (str(f) for f in fields)
        return cls(session, user, token_hash, address)


class SqlGate:
    """Checks, authorises and pins what a client session runs (see the module's docstring).

    Args:
        catalog: The warehouse's catalog.
        spark: The server's own SparkSession (not a client's): it holds the snapshot frames.
        freshness: How long a pinned snapshot serves new statements.
        secret: The password of :data:`LOCAL_USER` (the server file's secret).
        token_ttl: How long a token looked up is remembered (``server.auth_cache_ttl``).
    """

    def __init__(
        self,
        catalog: Catalog,
        spark: SparkSession,
        freshness: timedelta,
        secret: str,
        token_ttl: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        guard: LoginGuard | None = None,
    ) -> None:
        self.catalog, self.spark, self.secret = catalog, spark, secret
        # Thrift's SASL handshake hides the client's address from the login check: failures are
        # counted (and slowed) per user name, a token's name
        self.guard = guard or LoginGuard(service="SQL server", clock=clock)
        self.freshness = freshness.total_seconds()
        self.token_ttl, self.clock = token_ttl, clock
        self._lock = threading.Lock()
        self._pinned: dict[tuple[str, int | None], _Pinned] = {}
        self._frames: dict[tuple[str, int, float | None], Any] = {}  # (uid, version, pin) → analyzed plan
        self._namespaces: dict[str, str | None] = {}  # client session id → namespace of its USE
        self._tokens: dict[str, tuple[float, ApiToken | None]] = {}  # token digest → (when, token)
        self._settled: set[str] = set()  # client sessions whose settings were put back
        self._statements = 0

    def _forget_closed(self) -> None:
        """Forget the ``USE`` of client sessions that have closed; without it a long-running server
        keeps one entry per session it ever served."""
        jvm = self.spark._jvm
        assert jvm is not None
        open_now = set(jvm.streampart.sqlserver.Hooks.openSessions())
        with self._lock:
            for session in [s for s in self._namespaces if s not in open_now]:
                del self._namespaces[session]
            self._settled &= open_now

    # -- who ------------------------------------------------------------------------------------
    def authenticate(self, user: str, password: str) -> str | None:
        """None if ``user``/``password`` may connect, else the line the client is told (``login
        refused: …``; it reaches a client that has not logged in, so it says nothing a wrong token
        should learn). The credential is always checked first: a correct one is accepted at once,
        whatever failed before. Each failure is logged once (``login.failed``: the user and the
        password's first characters; Thrift's SASL handshake does not give the client's address)
        and its answer slowed (:mod:`ingest.login_guard`); nothing locks a user out."""
        from ingest.login_guard import credential_hint

        refused = self._refusal(user, password)
        if refused is None:
            return None
        self.guard.failed(f"user {user!r}", tried=credential_hint(password), user=user)
        shown = user if len(user) <= _USER_SHOWN else user[:_USER_SHOWN] + "…"
        return f"login refused: {refused} (user {shown!r})"

    def _refusal(self, user: str, password: str) -> str | None:
        if user == LOCAL_USER:
            ok = hmac.compare_digest(password.encode(), self.secret.encode())
            return None if ok else "wrong password for the local user"
        from ingest.api.auth import hash_token

        digest = hash_token(password)
        token = self.catalog.store.find_token_by_hash(digest)
        # one answer for a token that is not (or no longer) one, as the HTTP API gives: whoever
        # tries a token learns neither that it existed nor what became of it
        if (
            token is None
            or not hmac.compare_digest(token.token_hash, digest)
            or token.expired(metastore_clock.now())
        ):
            return "unknown, revoked or expired token"
        if token.name != user:  # (told to whoever holds the live token only)
            return f"the token's name is {token.name!r}: log in with it as user"
        self._tokens[digest] = (self.clock(), token)
        return None

    def _token(self, client: Client) -> ApiToken | None:
        """The token ``client`` logged in with, if it is still valid (revoked: None), looked up by its
        digest at most every ``token_ttl``: a token revoked and made again under the same name is
        another token, and does not serve sessions opened with the old one."""
        seen = self._tokens.get(client.token_hash)
        if seen is not None and self.clock() - seen[0] < self.token_ttl:
            return seen[1]
        token = self.catalog.store.find_token_by_hash(client.token_hash)
        if token is not None and token.name != client.user:
            token = None
        self._tokens[client.token_hash] = (self.clock(), token)
        return token

    def _live(self, client: Client) -> ApiToken | None:
        """:meth:`_token`, and None once it has expired (checked on every statement)."""
        token = self._token(client)
        return None if token is None or token.expired(metastore_clock.now()) else token

    def _may_read(self, client: Client) -> Callable[[str], bool]:
        if client.user == LOCAL_USER:
            if not hmac.compare_digest(client.token_hash, hashlib.sha256(self.secret.encode()).hexdigest()):
                raise UserInputError("the local user's session was opened with another secret: reconnect")
            return lambda namespace: True
        token = self._live(client)
        if token is None:
            raise UserInputError(
                f"token {client.user!r} was revoked or has expired: reconnect with a valid token"
            )
        return lambda namespace: token.allows(Permission.READ, namespace)

    def _settle(self, client: Client, session: Any) -> None:
        """Put back the server's Spark settings in a client's session, once: what a client sends when
        it connects (``set:hiveconf:k=v``, ``#var=v`` in a JDBC URL) becomes session settings, and
        ``SET`` is refused for the same reason — a statement is checked under the server's settings."""
        with self._lock:
            if client.session in self._settled:
                return
        jvm = self.spark._jvm
        assert jvm is not None
        jvm.streampart.sqlserver.Hooks.settle(session, self.spark._jsparkSession)
        with self._lock:
            self._settled.add(client.session)

    # -- what -----------------------------------------------------------------------------------
    def decide(self, fields: Any, kind: str, used: Any, args: Any, session: Any) -> str:
        """Decide one statement of the client session ``fields`` (``Hooks.clientOf``), whose Spark
        session (a py4j object) is ``session``, as Spark's parser read it (``Reading.java``):

        - ``use`` (``args``: the namespace): the session's namespace from now on;
        - ``show_schemas``, ``show_tables`` (``args``: the namespace, or none), ``describe``
          (``args``: the name parts): what the token may read, as literal rows;
        - ``query`` (``args``: its table references, ``Reading.refs``): every name resolved and
          authorised, its snapshot pinned and staged.

        ``used`` are the namespaces of the statement's leading ``USE ns;`` statements, each checked;
        the last one is the statement's namespace (none: the session's).

        Returns:
            The id of the statement's staged snapshots, a colon, and — for all but a query — the
            statement Spark runs instead.

        Raises:
            StreampartError: the statement is refused, naming why (one line).
        """
        client = Client.of(fields)
        self._note_statement()
        may_read = self._may_read(client)
        self._settle(client, session)
        names = [str(a) for a in args]
        if kind == "use":
            named = ".".join(names)
            # ``default``: what JDBC clients USE on connect; it means no namespace
            chosen = None if named.lower() == "default" else self._namespace(named, may_read)
            with self._lock:
                self._namespaces[client.session] = chosen
            return self._answer(NO_ROWS)
        with self._lock:
            namespace = self._namespaces.get(client.session)
        for use in [str(u) for u in used]:
            namespace = None if use.lower() == "default" else self._namespace(use, may_read)
        if kind == "show_schemas":
            return self._answer(schemas(self.catalog, may_read))
        if kind == "show_tables":
            return self._answer(tables(self.catalog, may_read, ".".join(names) if names else namespace))
        if kind == "describe":
            return self._answer(describe(self.catalog, ".".join(names), namespace, may_read))
        if kind != "query":
            raise QueryRefusedError(f"{kind}: the SQL server only reads (SELECT, WITH …)")
        return f"{self._stage(self._reads(client, namespace, may_read, names))}:"

    def check(self, fields: Any) -> None:
        """Raise if the client session ``fields`` may not go on (its token was revoked)."""
        self._may_read(Client.of(fields))

    def _note_statement(self) -> None:
        with self._lock:
            self._statements += 1
            forget = self._statements % _FORGET_EVERY == 1  # the first statement too: a fault shows at once
        if forget:
            self._forget_closed()

    def _answer(self, text: str) -> str:
        """A statement that reads no table: staged with none (in a client session every analysed
        plan must belong to a staged statement), answering ``text``."""
        return f"{self._stage([])}:{text}"

    def _reads(
        self, client: Client, namespace: str | None, may_read: Callable[[str], bool], refs: list[str]
    ) -> list[Read]:
        """Each table reference of a query (``Reading.refs``), resolved and authorised."""
        readable = self._readable(client, namespace, may_read)
        reads: dict[str, Read] = {}
        for encoded in refs:
            key, written_parts, version, timestamp, cte = encoded.split("\x03")
            if key in reads:
                continue
            parts = written_parts.split("\x01")
            try:
                written = _written(parts)
                resolved = readable(written)
            except StreampartError:
                if cte:  # a common table expression's name: Spark reads the CTE where it is in scope
                    continue
                raise
            ref = versioned(resolved, version[1:] if version else None, timestamp[1:] if timestamp else None)
            alias = parts[-1].split("@")[0] if "@" in parts[-1] else TableName.parse(resolved).table
            reads[key] = Read(key, ref, alias)
        return list(reads.values())

    def _namespace(self, namespace: str, may_read: Callable[[str], bool]) -> str:
        """``USE namespace``: a namespace the client may read (as it is named in the catalog)."""
        name = self.catalog.namespaces.named(check_namespace(namespace))
        if not may_read(name):
            raise QueryRefusedError(f"the token may not read namespace {name!r} (needs read:{name})")
        return name

    def _readable(
        self, client: Client, namespace: str | None, may_read: Callable[[str], bool]
    ) -> Callable[[str], str]:
        """How the client's statement resolves a name: as ``streampart query`` does, and only in
        namespaces its token may read — asked before the name is looked up, so a namespace it may
        not read answers the same whether the table exists or not."""
        resolve = catalog_resolver(self.catalog, namespace)

        def readable(written: str) -> str:
            refuse_unreadable(self.catalog, written, namespace, may_read, f"token {client.user!r}")
            name = resolve(written)
            ns = TableName.parse(name).namespace
            if not may_read(ns):
                raise QueryRefusedError(
                    f"token {client.user!r} may not read namespace {ns!r} (needs read:{ns})"
                )
            return name

        return readable

    def _stage(self, reads: list[Read]) -> str:
        """Stage the snapshot of each table the statement reads; the id they were staged under."""
        jvm = self.spark._jvm
        assert jvm is not None
        statements = jvm.streampart.sqlserver.Statements
        statement = statements.open()
        try:
            pinned = self._pin(tuple(dict.fromkeys(read.ref for read in reads)))
            for read in reads:
                resolved, snap, at = pinned[read.ref]
                plan = self._plan(read.ref, resolved, snap, at)
                statements.put(
                    statement, read.key, TableName.parse(read.ref.name).namespace, read.alias, plan
                )
        except BaseException:
            statements.discard(statement)
            raise
        return str(statement)

    def _pin(self, refs: tuple[TableRef, ...]) -> dict[TableRef, tuple[Resolved, Snapshot, float]]:
        """Each reference's snapshot, and when it was pinned: one per table (and version asked
        for) in this statement, so a table and a link to it are read at one version."""
        now = self.clock()
        out = {}
        for ref in refs:
            resolved = self.catalog.resolve(ref.name)
            table = resolved.table
            version = version_of(self.catalog, table, ref)
            key = (identity(table), version)
            pinned = self._pinned.get(key)
            # a named version is pinned again too: the pin checks its files are still on disk
            if pinned is None or now - pinned.at >= self.freshness:
                snap = pin(self.catalog, table, version)
                if pinned is not None and pinned.snapshot.version == snap.version:
                    snap = pinned.snapshot  # the same version: keep its frames
                pinned = self._pinned[key] = _Pinned(snap, now)
            out[ref] = (resolved, view_of(resolved, pinned.snapshot), pinned.at)
        return out

    def _plan(self, ref: TableRef, resolved: Resolved, snap: Snapshot, pinned_at: float) -> Any:
        """The analyzed plan (in the server's session) of what ``ref`` reads of ``snap``: made once
        per version, and shared by every client session's statements that read it."""
        from streampart.query import snapshot_frame

        newest = ref.version is None and ref.timestamp is None
        # a link admits partitions by the time too: its frame of the newest version is made per pin
        at = pinned_at if newest and resolved.link is not None else None
        key = (f"{identity(snap.table)}/{resolved.name}", snap.version, at)
        with self._lock:
            plan = self._frames.get(key)
        if plan is None:  # made outside the lock: other sessions' statements go on meanwhile
            plan = snapshot_frame(self.spark, snap)._jdf.queryExecution().analyzed()
            with self._lock:
                plan = self._frames.setdefault(key, plan)
                same = [k for k in self._frames if k[0] == key[0]]
                for old in same[:-_FRAMES_KEPT]:
                    del self._frames[old]
        return plan


def _written(parts: list[str]) -> str:
    """A table reference's name parts as ``NAMESPACE.TABLE`` (or ``TABLE``, ``TABLE@SOURCE``).

    Raises:
        QueryRefusedError: more than two parts (a catalog, a path), or a part that is no
            streampart name (a quoted name holding a dot, a slash, a space, …).
    """
    if len(parts) > 2:
        raise QueryRefusedError(
            f"{'.'.join(parts)}: queries read streampart tables as NAMESPACE.TABLE, not through a "
            "catalog or a path"
        )
    for piece in [p for part in parts for p in part.split("@", 1)]:
        try:
            check_identifier(piece, "name")
        except UserInputError:
            raise QueryRefusedError(
                f"{'.'.join(parts)}: queries read streampart tables (NAMESPACE.TABLE, or inside a "
                "namespace TABLE and TABLE@SOURCE), not files or other names"
            ) from None
    return ".".join(parts)


def refusal(exc: Exception) -> str:
    """The one line a client sees for a refused statement."""
    if isinstance(exc, StreampartError):
        return str(exc)
    log.exception("sql-server: statement check failed")
    return f"the SQL server could not check the statement: {type(exc).__name__}: {exc}"
