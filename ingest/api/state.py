"""What every request of the HTTP API works with: :class:`ApiState`, one per app.

:func:`ingest.api.app.create_app` makes it and keeps it in ``app.state.api``; routes reach it
through the :data:`ingest.api.deps.State` dependency. Its methods are the checks every route
makes before it touches the chunk protocol: the caller's scope on the namespace (403), the
names in the path (400, 404), and the commit with its metrics. They block on the metastore:
async routes call them in a worker thread.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from ingest.api.auth import Authenticator, Principal
from ingest.api.config import ServerConfig
from ingest.api.errors import ApiError, blame
from ingest.api.lookups import TableLookups
from ingest.api.metrics import ApiMetrics
from ingest.api.ttl_cache import TtlCache
from ingest.chunks import ChunkWriter, CommitResult
from ingest.config import ChunkConfig
from metastore.catalog import Catalog
from metastore.errors import NotFoundError, QuotaExceededError, UserInputError
from metastore.links import Link, Resolved
from metastore.models import Chunk, Permission, Table, TableName, check_identifier
from metastore.namespaces import Namespace, check_namespace

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def require(who: Principal, permission: Permission, namespace: str) -> None:
    """Raise 403 unless ``who`` has ``permission`` (or admin) on ``namespace``."""
    if not who.allows(permission, namespace):
        alternative = "" if permission is Permission.ADMIN else f" (or admin:{namespace})"
        raise ApiError(
            403,
            "forbidden",
            f"token {who.name!r} lacks the scope {permission.value}:{namespace}{alternative}",
            "Authorization",
        )


@dataclass
class ApiState:
    """The app's catalog, settings, token cache, metrics and remembered tables."""

    catalog: Catalog
    server: ServerConfig
    chunk: ChunkConfig
    auth: bool
    authenticator: Authenticator
    metrics: ApiMetrics
    lookups: TableLookups
    # each table's location → who may read its files (ingest.api.bucket_signing.Readers).
    # Why 5 s: a signed request names an object, not a table: finding the table means the locations of
    # every table and link, too many reads for each of a scan's requests. A table or link made or
    # dropped meanwhile is seen within this; the caller's scopes are always its token's as just read.
    readers: TtlCache[str, dict[str, Any]] = field(default_factory=lambda: TtlCache(5.0))
    # the metastore's shared secrets (ingest.api.file_urls), read once: they never change
    secrets: TtlCache[str, str] = field(default_factory=lambda: TtlCache(float("inf")))

    def table_of(self, who: Principal, permission: Permission, namespace: str, table: str) -> Table:
        """The table named in the path, once ``who`` may use it so.

        The scope is checked before anything is looked up (403 before 404: a token without it learns
        nothing of the namespace's tables, not even which exist); see :meth:`_namespace_for` and
        :meth:`_check_found` for names that match in any case."""
        with blame("namespace"):
            check_identifier(namespace, "namespace")
        with blame("table"):
            check_identifier(table, "table")
        asked = TableName(namespace=self._namespace_for(who, permission, namespace), table=table)
        try:
            with blame("table"):
                found = self.lookups.table(asked)
        except NotFoundError:
            self._check_found(who, permission, asked, None)
            raise
        if found.name.namespace != asked.namespace:
            self._check_found(who, permission, asked, found.name.namespace)
        return found

    def resolved_of(self, who: Principal, namespace: str, table: str) -> Resolved:
        """The table or link named in the path, read in its namespace, once ``who`` may read it.

        ``read:NS`` reads NS's tables and NS's links, whatever namespace a link's source is in.
        Checked as :meth:`table_of` checks.
        """
        with blame("namespace"):
            check_identifier(namespace, "namespace")
        with blame("table"):
            check_identifier(table, "table")
        asked = TableName(namespace=self._namespace_for(who, Permission.READ, namespace), table=table)
        try:
            with blame("table"):
                resolved = self.catalog.resolve(asked, asked.namespace)
        except NotFoundError:
            self._check_found(who, Permission.READ, asked, None)
            raise
        if resolved.name.namespace != asked.namespace:  # (a link's name is in its own namespace)
            self._check_found(who, Permission.READ, asked, resolved.name.namespace)
        return resolved

    def _namespace_for(self, who: Principal, permission: Permission, namespace: str) -> str:
        """The namespace a path's ``namespace`` names once ``who`` may use it so — itself, or the one
        it names in any case (as Spark matches names) — checked before any table is looked up: 403
        naming ``namespace`` otherwise, whatever tables it has."""
        if who.allows(permission, namespace):
            return namespace
        named = self._named(namespace)
        if named != namespace and who.allows(permission, named):
            return named
        require(who, permission, namespace)
        return namespace  # (not reached: require refused)

    def _check_found(
        self, who: Principal, permission: Permission, asked: TableName, found_in: str | None
    ) -> None:
        """After looking ``asked`` up (``found_in``: the namespace the name led to, None: nowhere), when
        that was not simply ``asked``'s own namespace. If ``asked``'s namespace stands, in any case,
        for one ``who`` may not use: 403 naming that one, found or not — so whether a table exists
        there never shows. A name that led into a namespace ``who`` may not use is not found."""
        named = self._named(asked.namespace)
        if named != asked.namespace:
            require(who, permission, named)
        if found_in is not None and not who.allows(permission, found_in):
            with blame("table"):
                raise NotFoundError(f"table {asked} does not exist")

    def _named(self, namespace: str) -> str:
        """The namespace ``namespace`` names in any case (itself when ambiguous: a refusal then must
        not tell which namespaces exist)."""
        try:
            return self.catalog.namespaces.named(namespace)
        except UserInputError:
            return namespace

    def namespace_of(self, who: Principal, permission: Permission, namespace: str) -> Namespace:
        """The namespace named in the path, once ``who`` may use it so (403 before 404: a token
        without the scope learns nothing of the namespace, not even whether it exists)."""
        with blame("namespace"):
            check_namespace(namespace)
        require(who, permission, namespace)
        with blame("namespace"):
            return self.catalog.namespaces.get(namespace)

    def link_of(self, who: Principal, permission: Permission, namespace: str, name: str) -> Link:
        """The link ``namespace.name`` named in the path, once ``who`` may use it so."""
        with blame("namespace"):
            check_namespace(namespace)
        with blame("name"):
            check_identifier(name, "link name")
        require(who, permission, namespace)
        qualified = TableName(namespace=namespace, table=name)
        with blame("name"):
            link = self.catalog.links.find(qualified)
            if link is None:
                if self.catalog.find_table(qualified) is not None:
                    raise NotFoundError(
                        f"{qualified} is a table, not a link (see GET /v1/tables/{namespace}/{name})"
                    )
                raise NotFoundError(f"link {qualified} does not exist")
        return link

    def _check_chunk_id(self, chunk_id: str) -> None:
        if "/" in chunk_id or "\\" in chunk_id or ".." in chunk_id:
            raise ApiError(
                400, "bad_request", f"chunk id {chunk_id!r} contains a path separator or '..'", "id"
            )
        if not _UUID.match(chunk_id):
            raise ApiError(404, "not_found", f"chunk {chunk_id!r} does not exist", "id")

    @staticmethod
    def _require_chunk(who: Principal, permission: Permission, namespace: str, chunk_id: str) -> None:
        """:func:`require`, but a token with no scope at all on the chunk's namespace is told the chunk
        does not exist, as for an id nobody made: a 403 would say that it exists, and where."""
        if not any(who.allows(p, namespace) for p in Permission):
            raise ApiError(404, "not_found", f"chunk {chunk_id!r} does not exist", "id")
        require(who, permission, namespace)

    def chunk_of(self, who: Principal, permission: Permission, chunk_id: str) -> tuple[Chunk, Table]:
        """The chunk named in the path and its table, once ``who`` may use it so."""
        self._check_chunk_id(chunk_id)
        name = self.lookups.chunk_table(chunk_id)
        if name is not None:  # a chunk seen before: read it where its table lives
            self._require_chunk(who, permission, name.namespace, chunk_id)
            with blame("id"):
                table = self.lookups.table(name)
            try:
                chunk = self.catalog.home(table).store.get_chunk(chunk_id)
            except NotFoundError:
                chunk = None  # gone, or its table moved or was re-created since: see below
            if chunk is not None and chunk.table_id == table.id:
                return chunk, table
            self.lookups.forget(name)  # the table remembered may be stale: look it all up afresh
        with blame("id"):
            chunk, found = self.catalog.chunk(chunk_id)
        self._require_chunk(who, permission, found.name.namespace, chunk_id)
        self.lookups.remember_chunk(chunk_id, found.name)
        with blame("id"):
            return chunk, self.lookups.table(found.name)

    def table_of_chunk(self, who: Principal, permission: Permission, chunk_id: str) -> Table:
        """The table of the chunk named in the path, once ``who`` may use it so.

        The chunk itself is not read: the operation on it (commit, abort) reads it in its own
        transaction and checks it belongs to this table (run it through
        :meth:`~ingest.api.lookups.TableLookups.retrying`, which recovers from a stale table).
        """
        self._check_chunk_id(chunk_id)
        name = self.lookups.chunk_table(chunk_id)
        if name is None:
            return self.chunk_of(who, permission, chunk_id)[1]
        self._require_chunk(who, permission, name.namespace, chunk_id)
        with blame("id"):
            return self.lookups.table(name)

    def writer(self, table: Table) -> ChunkWriter:
        return ChunkWriter(self.catalog, table, self.chunk)

    def commit(
        self, w: ChunkWriter, chunk_id: str, digest: str | None = None, staged: Chunk | None = None
    ) -> CommitResult:
        """Commit the chunk, counting it, its rows and the commit's duration (or its abort, when over
        its namespace's quota); a chunk that had committed before (a retry) is not counted again.
        ``staged``: the chunk as the same request just staged it (not read again)."""
        t0 = time.perf_counter()
        with blame("id"):
            try:
                if staged is not None:
                    result = w.commit_staged(staged, content_digest=digest)
                else:
                    result = w.commit(chunk_id, content_digest=digest)
            except QuotaExceededError:  # the writer aborted it: count it so
                self.metrics.chunks.labels(str(w.table.name), "aborted").inc()
                raise
        if result.repeated:  # a retry's answer: the call that committed it counted it
            return result
        self.metrics.commit_seconds.observe(time.perf_counter() - t0)
        self.metrics.chunks.labels(str(w.table.name), "committed").inc()
        self.metrics.rows.labels(str(w.table.name)).inc(result.rows)
        return result
