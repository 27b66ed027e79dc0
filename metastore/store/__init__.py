"""The SQL metastore: tables, partitions and their lifecycle, chunks, rolls, leases.

One implementation serves SQLite (the embedded default) and PostgreSQL. Every state change is
a conditional ``UPDATE … WHERE <the state it expects>``; zero rows updated raises
:class:`~metastore.errors.ConflictError` naming the precondition that failed. Locks and
leadership go through this database, never through local files or process memory, so any
number of processes on any number of hosts may share one metastore.

:class:`Metastore` is the one interface; each concept lives in its own module, as a part of
it (the way dagster splits run, event and schedule storage):

- ``engine``: the engine, SQLite pragmas, read and write transactions, migrations, errors
- ``preconditions``: conditional updates that name the precondition that failed
- ``tables``: tables and partitions
- ``schemas``: a table's schema changes (pending, finished fenced, its history), its evolution settings
- ``chunks``: chunks and their commit protocol
- ``rolls``: rolls and their leases
- ``expiries``: retention settings, expiry passes, the reclaiming of expired partitions' files
- ``deletes``: deletes by predicate and their leases
- ``leases``: leadership leases and fencing
- ``history``: roll attempts, and chunk rows pruned into summaries
- ``daemons``: the roll daemons' heartbeats (leader and standbys) and housekeeping passes
- ``tokens``: the HTTP API's bearer tokens
- ``shares``: Delta Sharing's shares, and the secrets server processes share
- ``namespaces``: namespaces, and the ledger their quotas are checked against
- ``links``: links between namespaces
- ``clusters``: the registry of clusters (storage roots and their Spark masters)
- ``replicas``: a table's secondary clusters and its partitions' copies there
- ``federation``: the registry of federated metastores, explicit routes, the route-table version
- ``moves``: namespace moves in progress and their flip (in the primary)
- ``transfer``: a namespace's rows fenced, exported, imported with new ids, removed (a move's steps)
"""

from __future__ import annotations

from metastore.store.chunks import ChunkStore
from metastore.store.clusters import ClusterStore
from metastore.store.daemons import DaemonStore
from metastore.store.deletes import DeleteStore
from metastore.store.engine import SQLITE_BUSY_TIMEOUT_S, Database, default_url, normalize_url
from metastore.store.expiries import ExpiryStore
from metastore.store.federation import FederationStore
from metastore.store.history import HistoryStore, summarize_chunk
from metastore.store.ingest_jobs import IngestJobStore
from metastore.store.leases import LeaseStore
from metastore.store.links import LinkStore
from metastore.store.moves import MoveStore
from metastore.store.namespaces import NamespaceStore
from metastore.store.replicas import ReplicaStore
from metastore.store.rolls import RollStore
from metastore.store.schemas import SchemaStore
from metastore.store.shares import ShareStore
from metastore.store.tables import TableStore
from metastore.store.tokens import TokenStore
from metastore.store.transfer import TableRows, TransferStore


class Metastore(
    TableStore,
    SchemaStore,
    ChunkStore,
    RollStore,
    ExpiryStore,
    DeleteStore,
    LeaseStore,
    HistoryStore,
    DaemonStore,
    TokenStore,
    ShareStore,
    NamespaceStore,
    LinkStore,
    ClusterStore,
    ReplicaStore,
    MoveStore,
    FederationStore,
    TransferStore,
    IngestJobStore,
):
    """Access to one metastore database. Thread-safe; open one per process.

    Args:
        url: A SQLAlchemy URL (``sqlite:///…``, ``postgresql://…``; ``postgres://`` works too).
        migrate: Bring the schema to the newest migration first.
    """


__all__ = [
    "SQLITE_BUSY_TIMEOUT_S",
    "Database",
    "Metastore",
    "TableRows",
    "default_url",
    "normalize_url",
    "summarize_chunk",
]
