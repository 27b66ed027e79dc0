"""What the SQL server does with a client's statement before Spark sees it.

Every statement a HiveServer2 client sends (``streampart sql-server``) reaches :meth:`SqlGate.rewrite`
first (through the JVM's parser hook, :mod:`streampart.sql_server`), which treats it as
``streampart query`` treats a read:

- it is checked by the same query policy (:mod:`streampart.query_policy`): names resolve as in
  ``streampart query`` (``NS.T``; inside a namespace set by ``USE NS`` also ``T`` and ``T@SRC``),
  and the statement is regenerated from the checked tree. Statements that write (INSERT INTO,
  CREATE TABLE … AS) are refused, pointing at ``streampart query``; any other DDL or DML too;
- every namespace a statement reads needs ``read`` in the client's token (the client logs in
  with the token's name as user and the token as password); ``SHOW SCHEMAS``, ``SHOW TABLES``
  and ``DESCRIBE`` list what the token may read (:mod:`streampart.sql_catalog`);
- each table it names is read at one pinned Delta version (one snapshot per table per
  statement, shared by a link to it in the same statement). A pinned snapshot is reused by the
  statements of the next ``freshness`` seconds, then pinned again: a commit or a roll is visible
  to a statement that starts at most ``freshness`` after it.

A snapshot is a Spark temporary view (in the client's session) over the fixed file list of its
version, made once per version in the server's own session and shared by plan: what a
roll sweeps stays on disk until housekeeping removes it past its retention (days), so a pinned
version never loses a file while a statement reads it — the protection ``streampart query`` has.
"""

from __future__ import annotations

import hmac
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from metastore.catalog import Catalog
from metastore.errors import StreampartError, UserInputError
from metastore.links import Resolved
from metastore.models import ApiToken, Permission, TableName
from metastore.namespaces import check_namespace
from streampart.errors import QueryRefusedError
from streampart.query import Snapshot, catalog_resolver, pin, prepare, split_use, version_of, view_of
from streampart.query_policy import TableRef
from streampart.sql_catalog import listing
from streampart.sql_endpoint import LOCAL_USER

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_FORGET_EVERY = 64  # statements between two looks for closed client sessions

# Why 4: a session's statement resolves its views while Spark analyses it, right after the
# rewrite; a few older views of a table stay for statements of the same session still analysing.
_VIEWS_KEPT = 4

_BARE_USE = re.compile(r"^\s*USE\s+(`?[A-Za-z_][A-Za-z0-9_]*`?)\s*;?\s*$", re.IGNORECASE)


@dataclass
class _Pinned:
    snapshot: Snapshot
    at: float  # time.monotonic() of the pin that found this version


@dataclass
class _Views:
    """The snapshot DataFrames of one table or link (in the server's session), by version."""

    frames: dict[tuple[object, ...], tuple[str, Any]] = field(default_factory=dict)  # key → (view, df)
    newest: tuple[object, ...] | None = None  # the key of the newest pin's


class SqlGate:
    """Checks, authorises and pins what a client session runs (see the module's docstring).

    Args:
        catalog: The warehouse's catalog.
        spark: The server's own SparkSession (not a client's): it holds the snapshot views.
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
    ) -> None:
        self.catalog, self.spark, self.secret = catalog, spark, secret
        self.freshness = freshness.total_seconds()
        self.token_ttl, self.clock = token_ttl, clock
        self._lock = threading.Lock()
        self._pinned: dict[tuple[str, int, int | None], _Pinned] = {}
        self._views: dict[str, _Views] = {}
        self._namespaces: dict[str, str | None] = {}  # client session id → namespace of its USE
        self._tokens: dict[str, tuple[float, ApiToken | None]] = {}
        self._shown: dict[str, list[str]] = {}  # client session id → its views, oldest first
        self._serial = 0
        self._statements = 0

    def _forget_closed(self) -> None:
        """Forget the ``USE`` and the view names of client sessions that have closed (their views
        went with their Spark sessions); without it a long-running server keeps one entry per
        session it ever served."""
        jvm = self.spark._jvm
        assert jvm is not None
        open_now = set(jvm.streampart.sqlserver.Hooks.openSessions())
        for remembered in (self._namespaces, self._shown):
            for session in [s for s in remembered if s not in open_now]:
                del remembered[session]

    # -- who ------------------------------------------------------------------------------------
    def authenticate(self, user: str, password: str) -> str | None:
        """None if ``user``/``password`` may connect, else why not (one line)."""
        if user == LOCAL_USER:
            ok = hmac.compare_digest(password.encode(), self.secret.encode())
            return None if ok else "wrong password for the local user"
        from ingest.api.auth import hash_token

        token = self.catalog.store.find_token_by_hash(hash_token(password))
        if token is None or not hmac.compare_digest(token.token_hash, hash_token(password)):
            return "the password is not a valid streampart token (streampart token create)"
        if token.name != user:
            return f"log in with the token's name as user ({token.name})"
        self._tokens[user] = (self.clock(), token)
        return None

    def _token(self, user: str) -> ApiToken | None:
        """The token named ``user`` now (revoked: None), looked up at most every ``token_ttl``."""
        seen = self._tokens.get(user)
        if seen is not None and self.clock() - seen[0] < self.token_ttl:
            return seen[1]
        token = next((t for t in self.catalog.store.list_tokens() if t.name == user), None)
        self._tokens[user] = (self.clock(), token)
        return token

    def _may_read(self, user: str) -> Callable[[str], bool]:
        if user == LOCAL_USER:
            return lambda namespace: True
        token = self._token(user)
        if token is None:
            raise UserInputError(f"token {user!r} was revoked: reconnect with a valid token")
        return lambda namespace: token.allows(Permission.READ, namespace)

    # -- what -----------------------------------------------------------------------------------
    def rewrite(self, session: str, user: str, sql: str, client: Any) -> str:
        """The statement Spark runs for ``sql`` from client session ``session`` of ``user``, whose
        Spark session (a py4j object) is ``client``.

        Raises:
            StreampartError: the statement is refused, naming why (one line).
        """
        with self._lock:
            self._statements += 1
            if self._statements % _FORGET_EVERY == 1:  # the first statement too: a fault shows at once
                self._forget_closed()
            may_read = self._may_read(user)
            bare = _BARE_USE.match(sql)
            if bare is not None and bare.group(1).upper() != "CLUSTER":
                namespace = bare.group(1).strip("`")
                # ``default``: what JDBC clients USE on connect; it means no namespace
                self._namespaces[session] = None if namespace == "default" else check_namespace(namespace)
                return "USE default"
            used = split_use(sql.strip().rstrip(";"))
            if used.cluster is not None:
                raise QueryRefusedError(
                    "USE CLUSTER: the SQL server reads each table on its primary; run a statement on "
                    "another cluster with `streampart query --cluster C`"
                )
            namespace = used.namespace or self._namespaces.get(session)
            listed = listing(self.catalog, used.sql, may_read, namespace)
            if listed is not None:
                return listed
            resolve = catalog_resolver(self.catalog, namespace)

            def readable(written: str) -> str:
                name = resolve(written)
                ns = TableName.parse(name).namespace
                if not may_read(ns):
                    raise QueryRefusedError(f"token {user!r} may not read namespace {ns!r} (needs read:{ns})")
                return name

            _only_queries(used.sql)
            prepared = prepare(used.sql, readable)
            views = {
                ref.view: self._view(ref, resolved, snap, at, session, client)
                for ref, (resolved, snap, at) in self._pin(prepared.refs).items()
            }
            return _point_at(prepared.text, views)

    def _pin(self, refs: tuple[TableRef, ...]) -> dict[TableRef, tuple[Resolved, Snapshot, float]]:
        """Each reference's snapshot, and when it was pinned: one per table (and version asked
        for) in this statement, so a table and a link to it are read at one version."""
        now = self.clock()
        out = {}
        for ref in refs:
            resolved = self.catalog.resolve(ref.name)
            table = resolved.table
            version = version_of(self.catalog, table, ref)
            key = (str(table.name), table.id, version)
            pinned = self._pinned.get(key)
            # a named version is pinned again too: the pin checks its files are still on disk
            if pinned is None or now - pinned.at >= self.freshness:
                snap = pin(self.catalog, table, version)
                if pinned is not None and pinned.snapshot.version == snap.version:
                    snap = pinned.snapshot  # the same version: keep its views
                pinned = self._pinned[key] = _Pinned(snap, now)
            out[ref] = (resolved, view_of(resolved, pinned.snapshot), pinned.at)
        return out

    def _view(
        self, ref: TableRef, resolved: Resolved, snap: Snapshot, pinned_at: float, session: str, client: Any
    ) -> str:
        """The temporary view, in the client's Spark session, of what ``ref`` reads of ``snap``.

        The DataFrame (its file index) is made once, in the server's session, and shared by every
        client session as a view of its plan: a client session sees only the views of statements
        it ran, so HiveServer2's metadata calls list no other namespace's tables.
        """
        from streampart.query import snapshot_frame

        views = self._views.setdefault(str(resolved.name), _Views())
        newest = ref.version is None and ref.timestamp is None
        # a link admits partitions by the time too: its view of the newest version is made per pin
        key = (snap.table.id, snap.version, pinned_at if newest and resolved.link is not None else None)
        made = views.frames.get(key)
        if made is None:
            self._serial += 1
            made = views.frames[key] = (f"{ref.view}__s{self._serial}", snapshot_frame(self.spark, snap))
        if newest and views.newest != key:
            if views.newest is not None:
                views.frames.pop(views.newest, None)  # sessions that use it keep their view of it
            views.newest = key
        name, frame = made
        shown = self._shown.setdefault(session, [])
        if name not in shown:
            jvm = self.spark._jvm
            assert jvm is not None
            plan = frame._jdf.queryExecution().analyzed()
            jvm.org.apache.spark.sql.classic.Dataset.ofRows(client, plan).createOrReplaceTempView(name)
            shown.append(name)
            # a session keeps the newest views it used (a statement of its own may still be
            # analysing the one before); older ones go, and their file lists with them
            for old in [n for n in shown if n.startswith(ref.view + "__s")][:-_VIEWS_KEPT]:
                client.catalog().dropTempView(old)
                shown.remove(old)
        return name


def _only_queries(sql: str) -> None:
    """Refuse a statement that is not a query, saying where it runs instead (a statement that does
    not parse is left to :func:`prepare`, which says where it fails)."""
    import sqlglot
    from sqlglot import exp

    from streampart.query_policy import quote_link_references

    try:
        statements = [s for s in sqlglot.parse(quote_link_references(sql), read="spark") if s is not None]
    except sqlglot.errors.ParseError:
        return
    if len(statements) == 1 and not isinstance(statements[0], exp.Query):
        words = " ".join(statements[0].sql(dialect="spark").split()[:2]) or "this statement"
        raise QueryRefusedError(
            f"{words}: the SQL server only reads (SELECT, WITH …); INSERT INTO and CREATE TABLE … AS "
            "run with `streampart query`, tables are made, altered and dropped with `streampart table …`"
        )


def _point_at(text: str, views: dict[str, str]) -> str:
    """``text`` (regenerated by :func:`prepare`) reading each snapshot view from ``views``."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(text, read="spark")
    for node in tree.find_all(exp.Table):
        if not node.db and node.name in views:
            node.set("this", exp.to_identifier(views[node.name]))
    return tree.sql(dialect="spark")


def refusal(exc: Exception) -> str:
    """The one line a client sees for a refused statement."""
    if isinstance(exc, StreampartError):
        return str(exc)
    log.exception("sql-server: statement check failed")
    return f"the SQL server could not check the statement: {type(exc).__name__}: {exc}"
