"""SQLAlchemy Core tables of the metastore. Alembic migrations in ``migrations/`` create them.

Times are stored as naive UTC ``DateTime`` (SQLite has no time zones); the store converts at
its boundary so every value leaving it is timezone-aware UTC.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

tables = Table(
    "sp_tables",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("namespace", String(128), nullable=False),
    Column("name", String(128), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("cluster", String(128), nullable=False),
    Column("location", Text, nullable=False),
    Column("columns", JSON, nullable=False),
    Column("time_column", String(128), nullable=False),
    Column("partition_column", String(128), nullable=False),
    Column("mode", String(16), nullable=False),
    Column("roll_every_s", BigInteger, nullable=False),
    Column("lateness_s", BigInteger, nullable=False),
    Column("late_data", String(16), nullable=False),
    Column("max_future_s", BigInteger, nullable=False, server_default="86400"),
    Column("max_age_s", BigInteger),
    Column("dead_letter", Boolean, nullable=False),
    Column("created_at", DateTime, nullable=False),
    # The table's identity across the federation: a namespace move keeps it (not the row id).
    Column("uid", String(36)),
    # What rows bringing fields the table lacks may change in its schema (a SchemaEvolution), and
    # how many columns that evolution from data may add to the table in all (migration 0014).
    Column("schema_evolution", String(16), nullable=False, server_default="none"),
    Column("max_new_columns", Integer, nullable=False, server_default="100"),
    # How long a standard partition is kept after its period ends (migration 0016; NULL: the
    # namespace's default_retain_s, 0: for ever). See metastore/retention.py.
    Column("retain_s", BigInteger),
    # A keyed table's primary key, sequence and op column (migration 0018; NULL: a table of
    # appends). See metastore/models/keys.py.
    Column("keys", JSON),
    # The columns a roll orders a partition's rows by (migration 0020; NULL or []: none). See
    # metastore/models/clustering.py.
    Column("cluster_by", JSON),
    UniqueConstraint("namespace", "name", name="uq_sp_tables_name"),
    Index("ix_sp_tables_uid", "uid", unique=True),
)

partitions = Table(
    "sp_partitions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("table_id", Integer, ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
    Column("value", DateTime, nullable=False),
    Column("state", String(16), nullable=False),
    Column("opened_at", DateTime, nullable=False),
    Column("rolled_at", DateTime),
    Column("chunks", BigInteger),
    Column("rows", BigInteger),
    Column("bytes", BigInteger),
    Column("files", BigInteger),
    # Bytes of the chunks committed into it while streaming (finish_commit adds each chunk's):
    # with ``bytes`` of standard partitions, the ledger a namespace's quota is checked against.
    Column("staged_bytes", BigInteger, nullable=False, server_default="0"),
    # An expired partition keeps its row (its period stays sealed: a late row is late): when it
    # expired, the Delta version whose commit removed its files, and when its files were deleted
    # (once no version time travel still promises lists them). Migration 0016.
    Column("expired_at", DateTime),
    Column("expired_version", BigInteger),
    Column("reclaimed_at", DateTime),
    # How many deletes by predicate rewrote it since it rolled (migration 0017): a copy on a
    # secondary is present only at the generation it was copied at.
    Column("generation", BigInteger, nullable=False, server_default="0"),
    UniqueConstraint("table_id", "value", name="uq_sp_partitions_value"),
    Index("ix_sp_partitions_state", "table_id", "state"),
)

chunks = Table(
    "sp_chunks",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("table_id", Integer, ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
    Column("token", String(512)),
    Column("state", String(16), nullable=False),
    Column("created_at", DateTime, nullable=False),
    Column("expires_at", DateTime, nullable=False),
    Column("files", JSON, nullable=False),
    Column("rows", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("committing_since", DateTime),
    Column("attempt", String(36)),
    Column("base_version", BigInteger),
    Column("version", BigInteger),
    Column("partitions", JSON, nullable=False),
    Column("dead_letter_rows", BigInteger, nullable=False),
    Column("late_rows", BigInteger, nullable=False),
    Column("error", Text),
    Column("content_digest", String(80)),
    # The process whose commit attempt holds a COMMITTING chunk (migration 0012): while it lives it
    # keeps the lease ``commit-holder/<holder>`` in sp_leases (ingest/commit_holders.py).
    Column("holder", String(128)),
    UniqueConstraint("table_id", "token", name="uq_sp_chunks_token"),
    Index("ix_sp_chunks_state", "state", "expires_at"),
)

rolls = Table(
    "sp_rolls",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("table_id", Integer, ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
    Column("partition_id", Integer, ForeignKey("sp_partitions.id", ondelete="CASCADE"), nullable=False),
    Column("state", String(16), nullable=False),
    Column("started_at", DateTime, nullable=False),
    Column("finished_at", DateTime),
    Column("owner", String(64)),
    Column("lease_until", DateTime),
    Column("seal_version", BigInteger),
    Column("sweep_version", BigInteger),
    Column("files_before", BigInteger),
    Column("files_after", BigInteger),
    Column("rows", BigInteger),
    Column("bytes", BigInteger),
    Column("error", Text),
    # A keyed table's roll: the files of other partitions its sweep replaced (removing older
    # versions of its keys), deleted by housekeeping once no readable version lists them
    # (migration 0018).
    Column("removed_files", JSON),
    Column("reclaimed_at", DateTime),
    UniqueConstraint("partition_id", name="uq_sp_rolls_partition"),
    Index("ix_sp_rolls_state", "table_id", "state"),
)

# Leadership leases (the roll daemon's): one row per role. ``epoch`` is the fencing token.
leases = Table(
    "sp_leases",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("holder", String(128)),
    Column("epoch", BigInteger, nullable=False),
    Column("acquired_at", DateTime),
    Column("renewed_at", DateTime),
    Column("expires_at", DateTime, nullable=False),
    Column("info", JSON, nullable=False),
)

# The roll daemon's history: one row per attempt at one partition (done, failed, abandoned).
roll_attempts = Table(
    "sp_roll_attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("table_id", Integer, ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
    Column("partition_value", DateTime),
    Column("roll_id", String(36)),
    Column("owner", String(128), nullable=False),
    Column("epoch", BigInteger),
    Column("started_at", DateTime, nullable=False),
    Column("finished_at", DateTime, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("resumed", Boolean, nullable=False),
    Column("rows", BigInteger),
    Column("error", Text),
    Column("failures", Integer, nullable=False),
    Column("retry_at", DateTime),
    Index("ix_sp_roll_attempts_table", "table_id", "id"),
)

# Pruned chunk rows, added up per partition and state (see Metastore.prune_chunks). Each
# pruning run appends rows; readers sum them.
chunk_summaries = Table(
    "sp_chunk_summaries",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("table_id", Integer, ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
    Column("partition_value", DateTime),
    Column("state", String(16), nullable=False),
    Column("chunks", BigInteger, nullable=False),
    Column("rows", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("dead_letter_rows", BigInteger, nullable=False),
    Column("late_rows", BigInteger, nullable=False),
    Column("first_created_at", DateTime),
    Column("last_created_at", DateTime),
    Column("pruned_at", DateTime, nullable=False),
    Index("ix_sp_chunk_summaries_table", "table_id", "partition_value"),
)

# Pruning walks a table's chunks oldest first (migration 0002).
Index("ix_sp_chunks_table_created", chunks.c.table_id, chunks.c.created_at)
Index("ix_sp_chunks_table_version", chunks.c.table_id, chunks.c.version)

# Bearer tokens of the HTTP API (migration 0003): the SHA-256 hex digest of each token, never
# the token itself; ``scopes`` is a list of "permission:namespace" strings.
tokens = Table(
    "sp_tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(128), nullable=False),
    Column("token_hash", String(64), nullable=False),
    Column("scopes", JSON, nullable=False),
    Column("created_at", DateTime, nullable=False),
    Column("expires_at", DateTime),  # NULL: never (migration 0019)
    UniqueConstraint("name", name="uq_sp_tokens_name"),
    UniqueConstraint("token_hash", name="uq_sp_tokens_hash"),
)

# Namespaces (migration 0005): one row per namespace a table or link lives in.
namespaces = Table(
    "sp_namespaces",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("isolated", Boolean, nullable=False),
    Column("quota_bytes", BigInteger),
    Column("description", Text, nullable=False),
    Column("created_at", DateTime, nullable=False),
    # A move to another metastore fences it here (migration 0010): while ``moving_to`` is set,
    # every transaction that writes the namespace (a chunk's reserve, staging and commit, a roll's
    # step, a link or table change) refuses with NamespaceMovingError (see store/namespaces.py).
    Column("moving_to", String(128)),
    Column("moving_since", DateTime),
    # The retention of its tables that set none of their own (migration 0016; NULL: none).
    Column("default_retain_s", BigInteger),
)

# Links (migration 0005): ``namespace.name`` imports the table ``source_namespace.source_name``.
# ``source_table_id`` is the table itself, so a table dropped and made again under the same name
# is not silently linked; it becomes NULL when the source is dropped with --force (dangling).
links = Table(
    "sp_links",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("namespace", String(128), ForeignKey("sp_namespaces.name"), nullable=False),
    Column("name", String(128), nullable=False),
    Column("source_namespace", String(128), nullable=False),
    Column("source_name", String(128), nullable=False),
    Column("source_table_id", Integer, ForeignKey("sp_tables.id", ondelete="SET NULL")),
    Column("mode", String(16), nullable=False),
    Column("include_streaming", Boolean, nullable=False),
    Column("retention_s", BigInteger),
    Column("range_start", DateTime),
    Column("range_end", DateTime),
    Column("created_at", DateTime, nullable=False),
    # The source's uid: how a link finds its source in another metastore, or after a move.
    Column("source_uid", String(36)),
    UniqueConstraint("namespace", "name", name="uq_sp_links_name"),
    Index("ix_sp_links_source", "source_table_id"),
    Index("ix_sp_links_source_uid", "source_uid"),
)

# The partitions a static link lists.
link_partitions = Table(
    "sp_link_partitions",
    metadata,
    Column("link_id", Integer, ForeignKey("sp_links.id", ondelete="CASCADE"), primary_key=True),
    Column("value", DateTime, primary_key=True),
)

# Clusters (migration 0006): named storage roots with their Spark masters. ``default`` (the
# process's own --warehouse) has no row; sp_tables.cluster names a table's primary cluster.
clusters = Table(
    "sp_clusters",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("storage", Text, nullable=False),
    Column("spark_master", Text, nullable=False),
    Column("conf", JSON, nullable=False),
    Column("created_at", DateTime, nullable=False),
)

# Replicas (migration 0007): a table's secondary clusters, each with its copy's location.
replicas = Table(
    "sp_replicas",
    metadata,
    Column("table_id", Integer, ForeignKey("sp_tables.id", ondelete="CASCADE"), primary_key=True),
    Column("cluster", String(128), primary_key=True),
    Column("location", Text, nullable=False),
    Column("added_at", DateTime, nullable=False),
)

# One standard partition's copy on one secondary (see metastore/replicas.py): claimed under a
# lease while ``copying``, ``present`` once verified and committed to the secondary's Delta log.
partition_copies = Table(
    "sp_partition_copies",
    metadata,
    Column("partition_id", Integer, ForeignKey("sp_partitions.id", ondelete="CASCADE"), primary_key=True),
    Column("cluster", String(128), primary_key=True),
    Column("table_id", Integer, ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
    Column("state", String(16), nullable=False),
    Column("owner", String(256)),
    Column("lease_until", DateTime),
    Column("attempts", Integer, nullable=False),
    Column("error", Text),
    Column("retry_at", DateTime),
    Column("files", BigInteger),
    Column("bytes", BigInteger),
    Column("checksum", String(64)),
    Column("delta_version", BigInteger),
    Column("started_at", DateTime),
    Column("copied_at", DateTime),
    # each file's SHA-256 as verified when copied (path → hex), and when the copy on disk was last
    # found to match (migration 0013): check and housekeeping's scrub compare the files with them
    Column("file_digests", JSON),
    Column("verified_at", DateTime),
    # the partition's generation when this copy was claimed (migration 0017; None: before deletes)
    Column("generation", BigInteger),
    Index("ix_sp_partition_copies_table", "table_id", "cluster"),
)

# Federation (migration 0008): the registry of federated metastores (``primary``, the metastore a
# process starts with, has no row); ``url`` is as given, naming secrets as ${NAME}, never a
# clear-text password.
metastores = Table(
    "sp_metastores",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("url", Text, nullable=False),
    Column("access", String(32), nullable=False),
    Column("writable", JSON, nullable=False),
    Column("prefix", String(128)),
    Column("created_at", DateTime, nullable=False),
)

# Explicit placements: namespace → metastore (a registered name, or ``primary``).
routes = Table(
    "sp_routes",
    metadata,
    Column("namespace", String(128), primary_key=True),
    Column("metastore", String(128), nullable=False),
    Column("created_at", DateTime, nullable=False),
    Index("ix_sp_routes_metastore", "metastore"),
)

# One row (id 1): bumped in the same transaction as every change of the registry or the routes,
# so a process polls one number to know its cached route table is stale.
route_version = Table(
    "sp_route_version",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("version", BigInteger, nullable=False),
)

# Namespace moves in progress (migration 0010, in the primary): one row per move, its ``step``
# recorded before the step is taken (see metastore/moves.py); gone once the move is done.
moves = Table(
    "sp_moves",
    metadata,
    Column("namespace", String(128), primary_key=True),
    Column("source", String(128), nullable=False),
    Column("target", String(128), nullable=False),
    Column("step", String(16), nullable=False),
    Column("started_at", DateTime, nullable=False),
    Column("updated_at", DateTime, nullable=False),
    # the mover process running it (host:pid:nonce) and when it last showed it is alive: one
    # mover at a time; a dead one's move is taken over (at once on its own host, else once stale)
    Column("owner", String(256)),
    Column("heartbeat_at", DateTime),
)

# The roll daemons' heartbeats (migration 0011): one row per daemon process and lease, written at
# every heartbeat, leader and standbys alike, so the status page lists the standbys (the lease row
# names only the leader) and when housekeeping last ran (the leader records each pass here).
daemons = Table(
    "sp_daemons",
    metadata,
    Column("lease", String(128), primary_key=True),
    Column("holder", String(128), primary_key=True),
    Column("heartbeat_at", DateTime, nullable=False),
    Column("info", JSON, nullable=False),
    Column("housekeeping_at", DateTime),
    Column("housekeeping_outcome", String(16)),
    Index("ix_sp_daemons_heartbeat", "heartbeat_at"),
)

# The status page's freshness and commit rate per table (migration 0011): the newest committed
# chunk is one index probe, the last hour's commits one index range.
Index("ix_sp_chunks_table_committed", chunks.c.table_id, chunks.c.state, chunks.c.committing_since)

# A table's schema changes (migration 0014, see store/schemas.py): one row per change, recorded
# ``pending`` before its Delta commit and ``done`` at the version that made it, in the transaction
# that sets sp_tables.columns to ``after`` (only while they are still ``before``). ``key`` makes a
# retried change land once; ``change`` lists what changed (``{"op": "add", "column": …, "type": …}``,
# ``{"op": "widen", "column": …, "from": …, "type": …}``); ``source`` says who or what made it.
schema_changes = Table(
    "sp_schema_changes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("table_id", Integer, ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
    Column("key", String(512), nullable=False),
    Column("version", BigInteger),
    Column("change", JSON, nullable=False),
    Column("before", JSON, nullable=False),
    Column("after", JSON, nullable=False),
    Column("source", String(256), nullable=False),
    Column("state", String(16), nullable=False),
    Column("at", DateTime, nullable=False),
    Column("done_at", DateTime),
    UniqueConstraint("table_id", "key", name="uq_sp_schema_changes_key"),
    Index("ix_sp_schema_changes_state", "state", "table_id"),
)


# Kafka ingest jobs (migration 0015): what an operator asked of a running job (pause or resume a
# topic), and when the job did it; and each job's status as it last published it (per topic: state,
# lag, last error), for the CLI and the status page. A job is named (``--name``) across the fleet.
ingest_requests = Table(
    "sp_ingest_requests",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job", String(128), nullable=False),
    Column("topic", String(256), nullable=False),
    Column("action", String(16), nullable=False),
    Column("target", String(1024)),
    Column("requested_by", String(256), nullable=False),
    Column("requested_at", DateTime, nullable=False),
    Column("done_at", DateTime),
    Column("outcome", String(1024)),
    Index("ix_sp_ingest_requests_job", "job", "done_at"),
)

ingest_jobs = Table(
    "sp_ingest_jobs",
    metadata,
    Column("job", String(128), primary_key=True),
    Column("updated_at", DateTime, nullable=False),
    Column("status", JSON, nullable=False),
)

# Expiry passes (migration 0016, issue 30): the partitions of one table that one pass expires
# (scheduler/expiry.py): begun (partitions EXPIRING), one Delta commit removing their files
# (COMMITTED, at commit_version), finished (partitions EXPIRED, the pass DONE).
expiries = Table(
    "sp_expiries",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("table_id", Integer, ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
    Column("state", String(16), nullable=False),
    Column("partitions", JSON, nullable=False),
    Column("started_at", DateTime, nullable=False),
    Column("finished_at", DateTime),
    Column("owner", String(64)),
    Column("lease_until", DateTime),
    Column("commit_version", BigInteger),
    Column("rows", BigInteger),
    Column("bytes", BigInteger),
    Column("files", BigInteger),
    Column("error", Text),
    Index("ix_sp_expiries_state", "table_id", "state"),
)

# Deletes by predicate (migration 0017, issue 30; ingest/deletes/deleter.py): PENDING (begun, the table
# sealed, its rewrite planned at read_version), COMMITTED (the commit removing the matching rows
# landed at commit_version), DONE (the partitions' counts updated).
deletes = Table(
    "sp_deletes",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("table_id", Integer, ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
    Column("predicate", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("requested_by", String(256), nullable=False),
    Column("started_at", DateTime, nullable=False),
    Column("finished_at", DateTime),
    Column("owner", String(64)),
    Column("lease_until", DateTime),
    Column("seal_version", BigInteger),
    Column("read_version", BigInteger),
    Column("commit_version", BigInteger),
    Column("rows", BigInteger),
    Column("files_removed", BigInteger),
    Column("files_added", BigInteger),
    Column("partitions", JSON),
    # the paths its commit removed (still on disk for older versions), and when housekeeping
    # deleted them (once no readable version lists them and the retention passed)
    Column("removed_files", JSON),
    Column("reclaimed_at", DateTime),
    Column("error", Text),
    Index("ix_sp_deletes_state", "table_id", "state"),
)


# Delta Sharing's shares (migration 0019), in the primary metastore: a named list of tables and links
# (by name, ``namespace.name``) a recipient's token may list and load, as far as its read scopes go.
shares = Table(
    "sp_shares",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(128), nullable=False),
    Column("comment", String(1024)),
    Column("created_at", DateTime, nullable=False),
    UniqueConstraint("name", name="uq_sp_shares_name"),
)
share_tables = Table(
    "sp_share_tables",
    metadata,
    Column("share_id", Integer, ForeignKey("sp_shares.id", ondelete="CASCADE"), nullable=False),
    Column("namespace", String(128), nullable=False),
    Column("name", String(128), nullable=False),
    Column("added_at", DateTime, nullable=False),
    PrimaryKeyConstraint("share_id", "namespace", "name", name="pk_sp_share_tables"),
)

# Secrets every server process of a metastore shares (migration 0019): made at random by the first
# process that needs one, never changed; ``url-signing`` signs the file URLs of Delta Sharing answers.
secrets = Table(
    "sp_secrets",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", String(128), nullable=False),
    Column("created_at", DateTime, nullable=False),
)
