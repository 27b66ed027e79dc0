"""The chunk protocol: reserve → write → commit (or abort), exactly once per idempotency key.

A chunk's files are written to the table's staging area; committing adds them to the table's
Delta log in one transaction, so the chunk is wholly visible or not at all.

Fencing against rolls (arrival and event-time alike): a writer loads the Delta snapshot
*first* and checks the target partition's state in the metastore *second*. A roll marks the
partition ROLLING in the metastore *first* and seals the Delta table (a metadata change)
*second*. So either the writer sees ROLLING and goes to the next partition, or its snapshot
predates the seal and its commit fails Delta's conflict check and is retried — a chunk never
lands in a sealed partition, and a retried chunk never lands twice (each commit names the
chunks it adds in its commit info, looked up before any retry that might follow a landed commit).

Group commit: the commits of a table in flight in one process at once are made together, by
the first of them, as one Delta commit and one metastore transaction (``group_commit.py``: the
queue and the group's commit). The "snapshot" a group commits on is the newest version of
the log, found with a few file checks (``metastore.delta.log.newest_version``); the partition states are
read after it, so the fencing is exactly a lone chunk's.

Namespace moves (``metastore/moves.py``): while a table's namespace is fenced for a move, its
metastore refuses the writer's steps with a retriable NamespaceMovingError; once the route has
flipped (or the table's rows are gone from its old metastore), :meth:`ChunkWriter.write`,
``write_table`` and ``commit`` read the table again through the catalog and carry on in its new
metastore, where the move copied every chunk with its id and idempotency key: a retried key finds
its chunk there, so nothing is lost or doubled.

The modules: ``writer.py`` (:class:`ChunkWriter`, a chunk's states), ``group_commit.py`` (the
commits of a table landing together), ``late.py`` (dead letters and late rows), ``housekeeping.py``
(expiring chunks, finishing interrupted commits), ``base.py`` (what they share).
"""

from ingest.chunks.base import CommitResult, DeadLetter
from ingest.chunks.housekeeping import expire_chunks, recover_commits
from ingest.chunks.writer import ChunkWriter, time_bounds, write_staged_files

__all__ = [
    "ChunkWriter",
    "CommitResult",
    "DeadLetter",
    "expire_chunks",
    "recover_commits",
    "time_bounds",
    "write_staged_files",
]
