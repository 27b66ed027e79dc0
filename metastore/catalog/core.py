"""The catalog: the SQL metastore and the Delta warehouse seen as one.

Every component (chunk writers, rollers, queries, the CLI) works through a :class:`Catalog`,
so table creation, lookup and description have one home. Its core is this module: opening,
routing (inherited from :class:`~metastore.catalog.routing.Routing`: every verb given a table or
a namespace runs in the metastore that holds it, so callers never pick one), tables, and what
names stand for. Each other concept is a service reached as an attribute, with its verbs in a
module of its own beside this one: ``catalog.clusters`` (:mod:`metastore.catalog.clusters`),
``catalog.namespaces``, ``catalog.links``, ``catalog.replicas``, ``catalog.schemas``, and
``catalog.federation`` (:class:`~metastore.catalog.federation.FederationAdmin`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from metastore import description, storage
from metastore.catalog.clustering import Clustering
from metastore.catalog.clusters import Clusters
from metastore.catalog.federation import FederationAdmin
from metastore.catalog.keys import KeyDeclarations
from metastore.catalog.links import Links
from metastore.catalog.namespaces import Namespaces
from metastore.catalog.replicas import Replicas
from metastore.catalog.retention import Retention
from metastore.catalog.routing import Routing
from metastore.catalog.schemas import Schemas
from metastore.crashpoints import crashpoint
from metastore.delta.checkpoints import log_settings
from metastore.delta.errors import storage_errors
from metastore.delta.files import live_files
from metastore.delta.log import verify_newest
from metastore.delta.warehouse import Warehouse
from metastore.durations import format_duration
from metastore.errors import (
    AlreadyExistsError,
    IsolationError,
    MetastoreUnavailableError,
    MissingStoreError,
    NotFoundError,
    ReadOnlyLinkError,
    SecondaryWriteError,
    TableIntegrityError,
    UserInputError,
)
from metastore.links import Reference, Resolved
from metastore.models import (
    Chunk,
    Column,
    LateDataPolicy,
    Mode,
    Partition,
    PartitionState,
    Table,
    TableKind,
    TableName,
    TableSpec,
    check_cluster_by,
    check_column_name,
    check_keys,
)
from metastore.router import FAIL_FAST_S, REFRESH_S, FanOut
from metastore.store import Metastore, default_url
from metastore.store.namespaces import missing_namespace

# How a user makes a new warehouse and metastore (said when one named to be read does not exist).
_TO_CREATE = (
    "to make a new one, run `streampart table create NS.TABLE …` or `streampart namespace create NS` "
    "(or `streampart demo`)"
)

DEAD_LETTER_COLUMNS = (
    Column(name="chunk", type="string"),
    Column(name="source", type="string"),
    Column(name="position", type="long"),
    Column(name="reason", type="string"),
    Column(name="raw", type="binary"),
    Column(name="received_at", type="timestamp", nullable=False),
)


class Catalog(Routing):
    """The catalog, bound to one metastore (see :class:`~metastore.catalog.routing.Routing`)."""

    @classmethod
    def open(
        cls,
        warehouse: str | Path,
        metastore_url: str | None = None,
        secrets: Mapping[str, str] | None = None,
        *,
        refresh_s: float = REFRESH_S,
        fail_fast_s: float = FAIL_FAST_S,
        create: bool = True,
    ) -> Catalog:
        """Open the warehouse and its metastore (``metastore_url``; default: a SQLite file in it).

        ``create``: make them if they do not exist (the warehouse's directory, the metastore's
        file or schema). False — every command but the few that create — refuses a warehouse or
        metastore that does not exist yet with :class:`MissingStoreError`, naming it and how to
        make one, and makes nothing: a mistyped path or URL is not a new empty warehouse.
        """
        wh = Warehouse(warehouse)
        no_warehouse = f"warehouse {wh.root} does not exist (set --warehouse or STREAMPART_WAREHOUSE)"
        missing = False
        if wh.remote:
            if not metastore_url:
                raise UserInputError(
                    f"warehouse {wh.root} is in a bucket, which cannot hold the embedded SQLite "
                    "metastore: give one with --metastore (postgresql://… or sqlite:///a/local/file) "
                    "or STREAMPART_METASTORE"
                )
            storage.check_root(wh.root, "--warehouse")
        else:
            missing = _open_local_root(Path(wh.root), create, metastore_url, no_warehouse)
        try:
            store = Metastore(metastore_url or default_url(wh.root), create=create)
        except MissingStoreError as exc:
            where = "set --metastore or STREAMPART_METASTORE" if metastore_url else f"in warehouse {wh.root}"
            also = f", and {no_warehouse}" if missing else ""
            raise MissingStoreError(f"{exc} ({where}){also}; {_TO_CREATE}") from None
        if missing:
            store.close()
            raise MissingStoreError(f"{no_warehouse}; {_TO_CREATE}")
        catalog = cls(store, wh, dict(secrets or {}))
        catalog.router.refresh_s, catalog.router.fail_fast_s = refresh_s, fail_fast_s
        return catalog

    # -- services: a concept's verbs, reached as an attribute -----------------------------
    @property
    def clusters(self) -> Clusters:
        """Register, look up, list and remove clusters (in the primary)."""
        return Clusters(self)

    @property
    def namespaces(self) -> Namespaces:
        """Create, look up, alter, drop, list and move namespaces (each in its metastore)."""
        return Namespaces(self)

    @property
    def links(self) -> Links:
        """Create, list, change and drop links, and find their sources (each in its metastore)."""
        return Links(self)

    @property
    def replicas(self) -> Replicas:
        """Add, list, look up and drop a table's secondaries (in the table's metastore)."""
        return Replicas(self, self.clusters)

    @property
    def schemas(self) -> Schemas:
        """Alter a table's columns, recover a change a crash left pending, set its schema evolution."""
        return Schemas(self)

    @property
    def keys(self) -> KeyDeclarations:
        """Declare a primary key on a table that exists and is empty (in the table's metastore)."""
        return KeyDeclarations(self)

    @property
    def clustering(self) -> Clustering:
        """The columns a table's rolls order its partitions' rows by (in the table's metastore)."""
        return Clustering(self)

    @property
    def retention(self) -> Retention:
        """A table's retention, its namespace's default, and what applies (each in its metastore)."""
        return Retention(self)

    @property
    def federation(self) -> FederationAdmin:
        """Register, probe, alter and remove metastores; route namespaces (the primary's registry)."""
        return FederationAdmin(self.router)

    # -- tables ----------------------------------------------------------------------------
    def create_table(
        self,
        spec: TableSpec,
        *,
        create_namespace: bool = True,
        replicate_to: Sequence[str] = (),
        first_chunk: tuple[str, timedelta] | None = None,
    ) -> Table:
        """Create a streaming table (and its dead-letter / late-data companions).

        Its namespace is made on first use unless ``create_namespace`` is false
        (``namespaces.require_explicit``): then a missing namespace is an error. It lives on
        the cluster ``spec.cluster`` (its primary) and replicates its standard partitions to
        each cluster of ``replicate_to`` (its secondaries; companions stay on the primary).
        ``first_chunk`` (idempotency key, TTL) reserves the table's first chunk with its record
        (see :meth:`metastore.store.tables.TableStore.create_table`). It is made in the metastore
        of its namespace (FederationAccessError if that one's access type does not allow it).
        """
        home = self.home(spec.name, write=True)
        home.check_creates(spec.name.namespace)
        store = home.store
        primary = self.clusters.get(spec.cluster)
        for name in replicate_to:
            self.replicas.check_secondary(spec.name, primary, name)
        if spec.keys is not None:  # its key columns become NOT NULL
            spec = spec.model_copy(update={"columns": check_keys(spec.keys, spec.columns, spec.time_column)})
        _check_spec(spec)
        if spec.cluster_by:
            spec = spec.model_copy(update={"cluster_by": check_cluster_by(spec.cluster_by, spec.columns)})
        self.retention.check_new(spec)
        if self._find_created(store, spec.name) is not None:
            raise AlreadyExistsError(f"table {spec.name} exists already")
        if not create_namespace and store.find_namespace(spec.name.namespace) is None:
            raise missing_namespace(spec.name.namespace)  # before anything is made
        for companion in _companions(spec):
            if self._find_created(store, companion.name) is None:
                self._create_one(store, companion, create_namespace)
        table = self._create_one(store, spec, create_namespace, first_chunk)
        for name in dict.fromkeys(replicate_to):
            self.replicas.add(table, name)
        return table

    def _find_created(self, store: Metastore, name: TableName) -> Table | None:
        """The table ``name`` if its creation finished; the record of one that did not is dropped.

        A table is recorded in the metastore first and its Delta table created second; a process
        that died in between left a record without a log and without commits, so creating the
        table again starts afresh. A table whose log is gone *after* commits is damaged, not
        half-created: that is an error (its records are never dropped here).
        """
        table = store.find_table(name)
        if table is None or storage.is_dir(storage.join(table.location, "_delta_log")):
            return table
        if store.newest_version(table.id) >= 0:  # it had commits: its log was lost, not unborn
            raise TableIntegrityError(
                f"table {name}: no Delta log at {table.location}/_delta_log although commits were "
                "recorded; restore the table's directory from a backup, or drop the table"
            )
        store.drop_table(table.id)
        return None

    def _create_one(
        self,
        store: Metastore,
        spec: TableSpec,
        create_namespace: bool = True,
        first_chunk: tuple[str, timedelta] | None = None,
    ) -> Table:
        table = store.create_table(
            spec,
            self.clusters.location(spec.name, self.clusters.get(spec.cluster)),
            create_namespace=create_namespace,
            first_chunk=first_chunk,
        )
        crashpoint("table-before-log")
        try:
            self.warehouse.create(table)
        except Exception:
            store.drop_table(table.id)
            raise
        return table

    def table(self, name: TableName | str, cluster: str | None = None) -> Table:
        """The table ``name`` as recorded in the metastore, to write, roll or drop.

        Args:
            cluster: The cluster the caller means to write on (None: the table's primary). Only
                the primary takes writes; a secondary holds read-only copies.

        A name matches in any case when no table has it exactly (as :meth:`resolve` matches).

        Raises:
            ReadOnlyLinkError: ``name`` is a link (links are read through :meth:`resolve`).
            SecondaryWriteError: ``cluster`` is not the table's primary.
            NotFoundError: there is no table of that name (or no cluster ``cluster``).
        """
        name = TableName.parse(name) if isinstance(name, str) else name
        store = self.home(name).store
        try:
            table = store.get_table(name)
        except NotFoundError:
            link = store.find_link(name)
            if link is None:
                exact = self._named_in_any_case(name)  # names match in any case, as in queries
                if exact is None or exact == name:
                    raise
                return self.table(exact, cluster)
            raise ReadOnlyLinkError(
                f"{name} is a link (to {link.source}), and links are read-only: write to, roll or drop "
                f"{link.source} itself, or remove the link with `streampart link drop {name}`"
            ) from None
        if cluster is not None and cluster != table.cluster:
            self.clusters.get(cluster)  # NotFoundError for a cluster that does not exist
            role = (
                "holds read-only copies of its rolled partitions"
                if any(r.cluster == cluster for r in self.replicas.list(table))
                else "holds none of its data"
            )
            raise SecondaryWriteError(
                f"{name} takes writes on its primary cluster {table.cluster} only; {cluster} {role}: "
                f"write to {table.cluster}"
            )
        return table

    def find_table(self, name: TableName) -> Table | None:
        """The table ``name`` as its namespace's metastore records it, or None (no link, no case match)."""
        return self.home(name).store.find_table(name)

    def partitions(self, table: Table, states: Sequence[PartitionState] | None = None) -> list[Partition]:
        """The partitions of ``table`` (in ``states``), oldest first, from the metastore it was read from."""
        return self.home(table).store.list_partitions(table.id, states)

    def load(self, table: Table, version: int | None = None) -> Any:
        """The table's Delta snapshot to read: ``version``, or the newest — checked against the metastore.

        The metastore is read *before* the log, so every commit it recorded by then must be in
        the log; a log that lacks one was damaged (see :func:`metastore.delta.log.verify_newest`).

        Raises:
            TableIntegrityError: the log is unreadable, or lost commits the metastore recorded.
        """
        if version is not None:
            return self.warehouse.load(table, version)
        store = self.home(table).store
        recorded = store.newest_version(table.id)
        chunks = store.committed_at(table.id, [recorded]).get(recorded)  # what it added, to compare
        dt = self.warehouse.load(table)
        verify_newest(table, dt, recorded, chunks)
        return dt

    def drop_table(self, table: Table, *, force: bool = False) -> None:
        """Drop one table: its metastore records, then its directory (Delta log and data).

        Raises:
            UserInputError: other namespaces link to it (naming the links), or a metastore that may
                hold links to it did not answer, unless ``force``, which leaves those links
                dangling: every read of them then fails clearly.
        """
        store = self.home(table, write=True).store
        found = self.links.to(table)
        links = [x for links in found.answers.values() for x in links]
        if links and not force:
            raise UserInputError(
                f"table {table.name} is linked by {', '.join(str(x.name) for x in links)}; drop those "
                "links first, or add --force to leave them dangling (every read of them then fails)"
            )
        if found.missing and not force:
            raise UserInputError(
                f"table {table.name} may be linked from metastores that did not answer "
                f"({', '.join(sorted(found.missing))}); try again when they are back, or add --force"
            )
        replicas = store.list_replicas(table.id)
        store.drop_table(table.id)
        storage.delete_tree(table.location)
        for replica in replicas:
            storage.delete_tree(replica.location)

    def chunk(self, chunk_id: str) -> tuple[Chunk, Table]:
        """A chunk by its id (a UUID: unique across the federation) and its table, wherever it is.

        Raises:
            NotFoundError: no metastore has it; MetastoreUnavailableError: none that answered has
                it, and some did not answer (naming them).
        """

        def find(store: Metastore) -> tuple[Chunk, Table] | None:
            try:
                chunk = store.get_chunk(chunk_id)
            except NotFoundError:
                return None
            return chunk, store.get_table_by_id(chunk.table_id)

        home = self.store.name
        try:
            found_here = find(self.store)  # the primary (or the bound metastore) first: no threads
        except MetastoreUnavailableError:
            found_here = None
        if found_here is not None:
            return found_here
        found = self.router.fan_out(find)
        for name, answer in found.answers.items():
            if answer is not None and name != home:
                return answer
        if found.missing:
            raise MetastoreUnavailableError(f"chunk {chunk_id} was not found; {found.warning()}")
        raise NotFoundError(f"chunk {chunk_id!r} does not exist")

    def companion(self, table: Table, kind: TableKind) -> Table:
        return self.table(table.companion(kind))

    def rebound(self, table: Table) -> Table:
        """``table`` read again from wherever its namespace lives now (a move may have taken it).

        Raises:
            NotFoundError: it is gone (dropped; a table of its name made since is another table).
        """
        self.router.refresh(force=True)
        found = self.find_table(table.name)
        if found is None or (table.uid and found.uid != table.uid):
            raise NotFoundError(f"table {table.name} does not exist (any more)")
        return found

    def list_tables(self) -> FanOut[list[Table]]:
        """Every table of every metastore, listed in parallel (and which metastores did not answer).

        A table is listed from its namespace's home only (not a move's leftover elsewhere).
        """
        found = self.router.fan_out(lambda store: store.list_tables())
        for name, tables in found.answers.items():
            found.answers[name] = [t for t in tables if self.router.metastore_of(t.name.namespace) == name]
        return found

    # -- names -----------------------------------------------------------------------------
    def resolve(self, name: str | TableName, namespace: str | None = None) -> Resolved:
        """What a name read by a query, a describe or ``read_table`` stands for: a table, or a link.

        Args:
            name: ``NS.T``; or, inside ``namespace``, ``T`` (its own table or link) and ``T@B``
                (its one link to ``B.T``).
            namespace: The namespace the read runs in. If it is isolated, ``NS.T`` of another
                namespace is refused, naming the link command that would allow it.

        Raises:
            IsolationError, NotFoundError, DanglingLinkError, UserInputError: each naming the fault.
        """
        ref = Reference.parse(str(name))
        if namespace is not None:
            namespace = self.namespaces.named(namespace)
        if ref.via is not None:
            return self._resolve_via(ref, namespace)
        if ref.namespace is None:
            if namespace is None:
                raise UserInputError(
                    f"table {ref.name!r}: name streampart tables as NAMESPACE.TABLE, or run the query in "
                    "a namespace (--namespace, or USE NAMESPACE; first)"
                )
            qualified = TableName(namespace=namespace, table=ref.name)
        else:
            qualified = TableName(namespace=ref.namespace, table=ref.name)
        if namespace is not None and qualified.namespace != namespace and self.namespaces.isolated(namespace):
            raise IsolationError(
                f"namespace {namespace} is isolated: it reads only its own tables and its links, not "
                f"{qualified}; to read it, link it: streampart link create {namespace}.{qualified.table} "
                f"--to {qualified}"
            )
        home = self.home(qualified).store
        table = home.find_table(qualified)
        if table is not None:
            return Resolved(qualified, table)
        link = home.find_link(qualified)
        if link is None:
            exact = self._named_in_any_case(qualified)
            if exact is None:
                raise NotFoundError(f"table {qualified} does not exist")
            return self.resolve(exact, namespace)
        return Resolved(qualified, self.links.source(link), link)

    def _named_in_any_case(self, name: TableName) -> TableName | None:
        """The one table or link named ``name`` but for case (None: none; UserInputError: several)."""
        wanted = str(name).lower()
        found = {t.name for t in self.list_tables().merged() if str(t.name).lower() == wanted}
        links = self.router.fan_out(lambda store: store.list_links()).merged()
        found |= {link.name for link in links if str(link.name).lower() == wanted}
        if len(found) > 1:
            raise UserInputError(
                f"table {name} is ambiguous: {', '.join(sorted(map(str, found)))} differ only by case; "
                "write the name exactly"
            )
        return found.pop() if found else None

    def _resolve_via(self, ref: Reference, namespace: str | None) -> Resolved:
        assert ref.via is not None
        source = TableName(namespace=ref.via, table=ref.name)
        if namespace is None:
            raise UserInputError(
                f"{ref} names a link of the namespace the query runs in: give it (--namespace, or "
                "USE NAMESPACE; first)"
            )
        links = self.home(namespace).store.links_from(namespace, source)
        if not links:
            raise NotFoundError(
                f"namespace {namespace} has no link to {source}; create one: streampart link create "
                f"{namespace}.{ref.name} --to {source}"
            )
        if len(links) > 1:
            raise UserInputError(
                f"{ref} is ambiguous: namespace {namespace} links {source} as "
                f"{', '.join(str(x.name) for x in links)}; use one of those names"
            )
        return Resolved(links[0].name, self.links.source(links[0]), links[0])

    # -- description -----------------------------------------------------------------------
    def describe(self, what: Table | Resolved) -> dict[str, Any]:
        """A table (or a link) and its partitions, as ``streampart table describe --json`` shows them
        (see :func:`metastore.description.describe`)."""
        resolved = what if isinstance(what, Resolved) else Resolved(what.name, what)
        table = resolved.table
        dt = self.load(table)
        store = self.home(table).store
        replicas = self.replicas.list(table) if resolved.link is None else []
        return description.describe(
            resolved,
            int(dt.version()),
            live_files(dt),
            store.list_partitions(table.id),
            replicas,
            store.list_copies(table.id) if replicas else [],
            log_settings(dt) if resolved.link is None else None,
            [c for c in (r.summary() for r in store.schema_changes(table.id, limit=10)) if c is not None],
            self.retention.of(table),
        )


def _check_spec(spec: TableSpec) -> None:
    """Raise UserInputError for a spec no table may have (reserved column names, its time and partition
    columns, intervals)."""
    for c in spec.columns:
        check_column_name(c.name, "column")
    check_column_name(spec.partition_column, "partition column")
    names = {c.name for c in spec.columns}
    if spec.time_column not in names:
        raise UserInputError(f"time column {spec.time_column!r} is not in the schema")
    time_col = next(c for c in spec.columns if c.name == spec.time_column)
    if time_col.type != "timestamp":
        raise UserInputError(f"time column {spec.time_column!r} must be TIMESTAMP, not {time_col.sql_type}")
    if spec.partition_column in names:
        raise UserInputError(
            f"partition column {spec.partition_column!r} clashes with a column of the schema; "
            "choose another with --partition-column"
        )
    if spec.roll_every < timedelta(seconds=1):
        raise UserInputError("roll interval must be at least 1s")
    for what, value in (
        ("roll interval", spec.roll_every),
        ("lateness", spec.lateness),
        ("max-future", spec.max_future),
        ("max-age", spec.max_age),
    ):
        if value is not None and value % timedelta(seconds=1):  # the metastore keeps whole seconds
            raise UserInputError(f"{what} {format_duration(value)} is not a whole number of seconds")
    if spec.mode is Mode.ARRIVAL and spec.lateness:
        raise UserInputError("--lateness applies to event-time tables only")
    if spec.mode is Mode.ARRIVAL and spec.max_age is not None:
        raise UserInputError("--max-age applies to event-time tables only")


def _companions(spec: TableSpec) -> list[TableSpec]:
    """The dead-letter and late-data tables made beside a table of ``spec`` (as its settings ask)."""
    companions: list[TableSpec] = []
    if spec.dead_letter:
        companions.append(
            TableSpec(
                name=spec.companion(TableKind.DEAD_LETTER),
                columns=DEAD_LETTER_COLUMNS,
                time_column="received_at",
                partition_column="received_period",
                roll_every=max(spec.roll_every, timedelta(hours=1)),
                kind=TableKind.DEAD_LETTER,
                cluster=spec.cluster,
            )
        )
    if spec.mode is Mode.EVENT_TIME and spec.late_data is LateDataPolicy.DIVERT:
        companions.append(
            spec.model_copy(
                update={
                    "name": spec.companion(TableKind.LATE),
                    "mode": Mode.ARRIVAL,
                    "lateness": timedelta(0),
                    "late_data": LateDataPolicy.REJECT,
                    "dead_letter": False,
                    "kind": TableKind.LATE,
                }
            )
        )
    return companions


def _open_local_root(root: Path, create: bool, metastore_url: str | None, no_warehouse: str) -> bool:
    """Check (and make, with ``create``) a local warehouse directory; whether it is missing.

    Raises:
        MissingStoreError: it is missing, not to be created, and so is its embedded metastore.
        StorageError: it is a file, or not writable.
    """
    with storage_errors(f"opening the warehouse {root} (set --warehouse or STREAMPART_WAREHOUSE)"):
        if root.exists() and not root.is_dir():
            raise NotADirectoryError(20, "it is a file, not a directory", str(root))
        missing = not create and not root.exists()
        if missing and not metastore_url:  # its metastore, a file inside it, is missing too
            raise MissingStoreError(f"{no_warehouse}; {_TO_CREATE}")
        if not missing:
            root.mkdir(parents=True, exist_ok=True)
            if not os.access(root, os.W_OK | os.X_OK):
                raise PermissionError(13, "not writable", str(root))
    return missing
