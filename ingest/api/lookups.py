"""The tables the HTTP server's requests name, looked up once and remembered for a short while.

Every chunk request names a table, by its name (open, events) or through a chunk (upload,
commit, abort); reading it from the metastore on every request would be two or three of a
commit's round trips. :class:`TableLookups` remembers

- each table by its name for ``server.table_cache_ttl`` (1 s), and only while the federation's
  route table stays at the version it was read under: a namespace moved to another metastore,
  or routed elsewhere, is looked up afresh as soon as this process's router sees the change;
- each chunk's table name for as long as a chunk may be committed: a chunk id is a UUID never
  used twice and a table is never renamed, so that fact never goes stale.

A table dropped, re-created or changed by another process is seen here within the TTL; sooner
when a request meets it: an operation that fails as a stale table makes it fail (the table or
the chunk is not found, or the chunk belongs to another table) reads the table afresh and, if
it is another table now, runs once more with it (:meth:`TableLookups.retrying`). Every chunk
operation re-checks the chunk against the table in its own transaction, so a stale entry can
never commit a chunk into the wrong table.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from ingest.api.ttl_cache import TtlCache
from ingest.errors import ChunkStateError
from metastore.catalog import Catalog
from metastore.errors import NotFoundError
from metastore.models import Table, TableName

T = TypeVar("T")

# What a stale table makes an operation fail with: it was dropped (the table, or the chunk with
# it, is not found), or re-created (the chunk belongs to the new table, not the one remembered).
STALE_ERRORS = (NotFoundError, ChunkStateError)


class TableLookups:
    """Tables by name, and chunks' tables, remembered (see the module's docstring)."""

    def __init__(self, catalog: Catalog, ttl_seconds: float, chunk_ttl: timedelta) -> None:
        self.catalog = catalog
        self._tables: TtlCache[TableName, tuple[int, Table]] = TtlCache(ttl_seconds)
        # (nothing is remembered when the table cache is off: the server then looks up as before)
        self._chunk_tables: TtlCache[str, TableName] = TtlCache(
            chunk_ttl.total_seconds() if ttl_seconds > 0 else 0
        )

    def table(self, name: TableName) -> Table:
        """The table ``name`` (to write), remembered or read (NotFoundError, ReadOnlyLinkError, …)."""
        version = self.catalog.router.version  # in memory; re-read from the primary every few seconds
        hit = self._tables.peek(name)
        if hit is not None and hit[0] == version:
            return hit[1]
        table = self.catalog.table(name)
        self._tables.put(name, (version, table))
        return table

    def forget(self, name: TableName) -> None:
        self._tables.discard(name)

    def reread(self, table: Table) -> Table | None:
        """``table`` read afresh if that is another table now; None if it is the same one.

        Raises:
            NotFoundError: it is gone (naming it, as a lookup by name does).
        """
        self.forget(table.name)
        fresh = self.table(table.name)
        same = (fresh.metastore, fresh.id, fresh.uid) == (table.metastore, table.id, table.uid)
        return None if same else fresh

    def retrying(self, table: Table, op: Callable[[Table], T]) -> T:
        """``op(table)``; once more with the table read afresh if it failed as a stale one would.

        If the table is gone now, the answer is the lookup's NotFoundError ("table NS.T does not
        exist"), as a server that remembers nothing would give.
        """
        try:
            return op(table)
        except STALE_ERRORS:
            fresh = self.reread(table)
            if fresh is None:
                raise
        return op(fresh)

    # -- chunks ----------------------------------------------------------------------------------
    def chunk_table(self, chunk_id: str) -> TableName | None:
        """The name of the table of chunk ``chunk_id``, if this server has seen the chunk."""
        return self._chunk_tables.peek(chunk_id)

    def remember_chunk(self, chunk_id: str, table: TableName) -> None:
        self._chunk_tables.put(chunk_id, table)

    def forget_chunk(self, chunk_id: str) -> None:
        self._chunk_tables.discard(chunk_id)
