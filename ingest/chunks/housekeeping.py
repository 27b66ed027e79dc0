"""Housekeeping of the chunk protocol: expire reserved chunks past their TTL, finish interrupted commits.

Run by ``streampart housekeep`` and the daemon's housekeeping (``scheduler/housekeeping.py``).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from ingest.chunks.base import CommitResult
from ingest.chunks.writer import ChunkWriter
from ingest.commit_holders import commit_holder
from ingest.config import ChunkConfig
from ingest.errors import ChunkBusyError, ChunkStateError, LateDataError
from metastore import clock
from metastore.catalog import Catalog
from metastore.delta.files import remove_file
from metastore.errors import FederationAccessError
from metastore.models import Chunk, ChunkState, Table
from metastore.progress import Progress


def expire_chunks(
    catalog: Catalog,
    now: datetime | None = None,
    table_ids: Collection[int] | None = None,
    progress: Progress | None = None,
) -> list[Chunk]:
    """Expire reserved chunks past their TTL (at ``now``) and delete their staged files.

    ``table_ids``: only chunks of these tables (None: of every table of the catalog's metastore).
    ``progress``: told how many chunks' files go, and as each chunk's are deleted.
    """
    expired = catalog.store.expire_chunks(now, table_ids)
    tables: dict[int, Table] = {}
    if progress is not None and expired:
        progress.start(f"deleting the files of {len(expired)} expired chunk(s)", len(expired), "chunks")
    for chunk in expired:
        table = tables.get(chunk.table_id) or catalog.store.get_table_by_id(chunk.table_id)
        tables[chunk.table_id] = table
        for f in chunk.files:
            remove_file(table, f.path)
        if progress is not None:
            progress.advance()
    return expired


def recover_commits(
    catalog: Catalog, config: ChunkConfig | None = None, progress: Progress | None = None
) -> list[CommitResult]:
    """Finish commits whose writer died mid-commit (roll forward: the producer asked to commit):
    those past twice ``commit_timeout``, and those whose holder's lease lapsed.

    ``progress``: told how many stale commits there are, and as each is finished (or skipped).
    """
    config = config or ChunkConfig()
    results = []
    stale = catalog.store.stale_commits(clock.now() - 2 * config.commit_timeout)
    # and those whose holder is known to be gone (ingest/commit_holders.py): taken over at once
    holder, seen = commit_holder(catalog.store), {c.id for c in stale}
    gone: dict[str, bool] = {}  # another process's holder: its lease read once for all its chunks
    for c in catalog.store.list_chunks(states=[ChunkState.COMMITTING]):
        if c.id in seen or c.holder is None:
            continue
        if c.holder == holder.id:
            over = holder.attempt_over(c)
        else:
            over = gone[c.holder] = gone[c.holder] if c.holder in gone else holder.attempt_over(c)
        if over:
            stale.append(c)
    if progress is not None and stale:
        progress.start(f"finishing {len(stale)} interrupted commit(s)", len(stale), "chunks")
    for chunk in stale:
        table = catalog.store.get_table_by_id(chunk.table_id)
        try:
            results.append(ChunkWriter(catalog, table, config).commit(chunk.id))
        except (ChunkBusyError, ChunkStateError, LateDataError, FederationAccessError):
            pass  # FederationAccessError: a namespace outside its metastore's whitelist
        finally:
            if progress is not None:
                progress.advance()
    return results
