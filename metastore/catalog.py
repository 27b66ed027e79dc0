"""The catalog: the SQL metastore and the Delta warehouse seen as one.

Every component (chunk writers, rollers, queries, the CLI) works through a :class:`Catalog`,
so table creation, lookup and description have one home.

**Federation.** A catalog is *bound* to one metastore, its ``store``: the primary, as opened.
Everything that names a namespace is routed (:class:`~metastore.router.Router`) to the catalog
bound to that namespace's metastore — :meth:`Catalog.routed` — and everything about a table read
from a metastore goes back to it — :meth:`Catalog.of` (a table carries its metastore's name;
its row ids mean nothing elsewhere). What names no namespace (clusters, tokens, the registry)
lives in the primary, :attr:`Catalog.primary`. Writes check the access type of the
namespace's metastore first (:meth:`Catalog.writable`).
"""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from metastore import description
from metastore.clusters import (
    DEFAULT_CLUSTER,
    Cluster,
    check_cluster_name,
    check_spark_master,
    check_storage,
)
from metastore.crashpoints import crashpoint
from metastore.delta.checkpoints import log_settings
from metastore.delta.errors import storage_errors
from metastore.delta.files import live_files
from metastore.delta.log import verify_newest
from metastore.delta.warehouse import Warehouse
from metastore.durations import format_duration
from metastore.errors import (
    AlreadyExistsError,
    DanglingLinkError,
    IsolationError,
    MetastoreUnavailableError,
    MissingStoreError,
    NotFoundError,
    ReadOnlyLinkError,
    SecondaryWriteError,
    TableIntegrityError,
    UserInputError,
)
from metastore.federation import (
    PRIMARY,
    AccessType,
    FederatedMetastore,
    may_write,
)
from metastore.federation_admin import FederationAdmin
from metastore.links import Link, LinkMode, LinkSpec, Reference, Resolved, check_static_values
from metastore.models import (
    Chunk,
    Column,
    LateDataPolicy,
    Mode,
    Partition,
    Table,
    TableKind,
    TableName,
    TableSpec,
    iso,
)
from metastore.moves import NamespaceMover
from metastore.namespaces import Namespace, check_namespace
from metastore.replicas import Replica, replica_table
from metastore.router import FAIL_FAST_S, REFRESH_S, FanOut, Router
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


@dataclass
class Catalog:
    store: Metastore  # the metastore this catalog is bound to (the primary, unless routed)
    warehouse: Warehouse
    # The secrets federated metastores' URLs name (``[federation] secrets``): see resolve_url.
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    router: Router = field(init=False, repr=False)
    _bound: dict[str, Catalog] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.router = Router(self.store, self.secrets)
        self._bound = {PRIMARY: self}

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
        with storage_errors(f"opening the warehouse {wh.root} (set --warehouse or STREAMPART_WAREHOUSE)"):
            if wh.root.exists() and not wh.root.is_dir():
                raise NotADirectoryError(20, "it is a file, not a directory", str(wh.root))
            missing = not create and not wh.root.exists()
            if missing and not metastore_url:  # its metastore, a file inside it, is missing too
                raise MissingStoreError(f"{no_warehouse}; {_TO_CREATE}")
            if not missing:
                wh.root.mkdir(parents=True, exist_ok=True)
                if not os.access(wh.root, os.W_OK | os.X_OK):
                    raise PermissionError(13, "not writable", str(wh.root))
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

    def close(self) -> None:
        self.router.close()

    # -- routing -----------------------------------------------------------------------------
    @property
    def primary(self) -> Metastore:
        """The primary metastore: clusters, tokens, the registry and routes, leases of no namespace."""
        return self.router.primary

    def on(self, metastore: str) -> Catalog:
        """This catalog bound to the metastore ``metastore`` (itself, if it is bound there)."""
        if metastore == self.store.name:
            return self
        store = self.router.store(metastore)
        bound = self._bound.get(metastore)
        if bound is None or bound.store is not store:  # first use, or its connection was reopened
            bound = copy.copy(self)  # shares the warehouse, the router and the bound catalogs
            bound.store = store
            self._bound[metastore] = bound
        return bound

    def routed(self, namespace: str) -> Catalog:
        """The catalog bound to the metastore ``namespace`` lives in (to read it)."""
        return self.on(self.router.metastore_of(namespace))

    def of(self, table: Table) -> Catalog:
        """The catalog bound to the metastore ``table`` was read from (its ids are that one's)."""
        return self.on(table.metastore)

    def writable(self, namespace: str) -> Catalog:
        """The catalog bound to ``namespace``'s metastore, if its access type lets it be written.

        Raises:
            FederationAccessError: the metastore is read-only, or ``namespace`` is outside its whitelist.
        """
        name = self.router.metastore_of(namespace)
        may_write(self.router.entry(name), namespace).check()
        return self.on(name)

    def for_write(self, table: Table) -> Catalog:
        """The catalog bound to ``table``'s metastore, to write it (FederationAccessError as in writable)."""
        may_write(self.router.entry(table.metastore), table.name.namespace).check()
        return self.of(table)

    def _creates_namespace(self, namespace: str) -> None:
        """Raise FederationAccessError if ``namespace`` is missing here and this metastore creates none."""
        if self.store.name != PRIMARY and self.store.find_namespace(namespace) is None:
            self.router.check_creates(self.store.name, namespace)

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
        home = self.writable(spec.name.namespace)
        if home is not self:
            return home.create_table(
                spec, create_namespace=create_namespace, replicate_to=replicate_to, first_chunk=first_chunk
            )
        self._creates_namespace(spec.name.namespace)
        primary = self.cluster(spec.cluster)
        for name in replicate_to:
            self._check_secondary(spec.name, primary, name)
        names = {c.name for c in spec.columns}
        if spec.time_column not in names:
            raise UserInputError(f"time column {spec.time_column!r} is not in the schema")
        time_col = next(c for c in spec.columns if c.name == spec.time_column)
        if time_col.type != "timestamp":
            raise UserInputError(
                f"time column {spec.time_column!r} must be TIMESTAMP, not {time_col.sql_type}"
            )
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
        if self._find_created(spec.name) is not None:
            raise AlreadyExistsError(f"table {spec.name} exists already")
        if not create_namespace and self.store.find_namespace(spec.name.namespace) is None:
            raise missing_namespace(spec.name.namespace)  # before anything is made
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
        for companion in companions:
            if self._find_created(companion.name) is None:
                self._create_one(companion, create_namespace)
        table = self._create_one(spec, create_namespace, first_chunk)
        for name in dict.fromkeys(replicate_to):
            self.add_replica(table, name)
        return table

    def location_of(self, name: TableName, cluster: Cluster) -> str:
        """Where table ``name`` lives on ``cluster``: ``<storage>/<namespace>/<table>``."""
        if cluster.name == DEFAULT_CLUSTER:
            return self.warehouse.location(name)
        return str(Path(cluster.storage) / name.namespace / name.table)

    def _find_created(self, name: TableName) -> Table | None:
        """The table ``name`` if its creation finished; the record of one that did not is dropped.

        A table is recorded in the metastore first and its Delta table created second; a process
        that died in between left a record without a log and without commits, so creating the
        table again starts afresh. A table whose log is gone *after* commits is damaged, not
        half-created: that is an error (its records are never dropped here).
        """
        table = self.store.find_table(name)
        if table is None or (Path(table.location) / "_delta_log").is_dir():
            return table
        if self.store.newest_version(table.id) >= 0:  # it had commits: its log was lost, not unborn
            raise TableIntegrityError(
                f"table {name}: no Delta log at {table.location}/_delta_log although commits were "
                "recorded; restore the table's directory from a backup, or drop the table"
            )
        self.store.drop_table(table.id)
        return None

    def _create_one(
        self,
        spec: TableSpec,
        create_namespace: bool = True,
        first_chunk: tuple[str, timedelta] | None = None,
    ) -> Table:
        table = self.store.create_table(
            spec,
            self.location_of(spec.name, self.cluster(spec.cluster)),
            create_namespace=create_namespace,
            first_chunk=first_chunk,
        )
        crashpoint("table-before-log")
        try:
            self.warehouse.create(table)
        except Exception:
            self.store.drop_table(table.id)
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
        home = self.routed(name.namespace)
        if home is not self:
            return home.table(name, cluster)
        try:
            table = self.store.get_table(name)
        except NotFoundError:
            link = self.store.find_link(name)
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
            self.cluster(cluster)  # NotFoundError for a cluster that does not exist
            role = (
                "holds read-only copies of its rolled partitions"
                if any(r.cluster == cluster for r in self.replicas(table))
                else "holds none of its data"
            )
            raise SecondaryWriteError(
                f"{name} takes writes on its primary cluster {table.cluster} only; {cluster} {role}: "
                f"write to {table.cluster}"
            )
        return table

    def load(self, table: Table, version: int | None = None) -> Any:
        """The table's Delta snapshot to read: ``version``, or the newest — checked against the metastore.

        The metastore is read *before* the log, so every commit it recorded by then must be in
        the log; a log that lacks one was damaged (see :func:`metastore.delta.log.verify_newest`).

        Raises:
            TableIntegrityError: the log is unreadable, or lost commits the metastore recorded.
        """
        if version is not None:
            return self.warehouse.load(table, version)
        store = self.of(table).store
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
        home = self.for_write(table)
        if home is not self:
            return home.drop_table(table, force=force)
        found = self.links_to(table)
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
        replicas = self.store.list_replicas(table.id)
        self.store.drop_table(table.id)
        shutil.rmtree(table.location, ignore_errors=True)
        for replica in replicas:
            shutil.rmtree(replica.location, ignore_errors=True)

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

    def links_to(self, table: Table) -> FanOut[list[Link]]:
        """The links to ``table`` in every metastore of the federation (and which did not answer)."""
        return self.router.fan_out(lambda store: store.links_to(table))

    def list_tables(self) -> FanOut[list[Table]]:
        """Every table of every metastore, listed in parallel (and which metastores did not answer).

        A table is listed from its namespace's home only (not a move's leftover elsewhere).
        """
        found = self.router.fan_out(lambda store: store.list_tables())
        for name, tables in found.answers.items():
            found.answers[name] = [t for t in tables if self.router.metastore_of(t.name.namespace) == name]
        return found

    def list_namespaces(self) -> FanOut[list[Namespace]]:
        """Every namespace, each from the metastore it lives in (and which metastores did not answer).

        A namespace is listed from its home only: a copy elsewhere (a move's leftover, a clash
        settled by a route) is not shown twice.
        """
        found = self.router.fan_out(lambda store: store.list_namespaces())
        for name, namespaces in found.answers.items():
            found.answers[name] = [n for n in namespaces if self.router.metastore_of(n.name) == name]
        return found

    # -- clusters --------------------------------------------------------------------------
    def add_cluster(
        self, name: str, storage: str, spark_master: str, conf: dict[str, str] | None = None
    ) -> Cluster:
        """Register a cluster: its name, an existing writable storage root, a Spark master URL."""
        return self.primary.add_cluster(
            check_cluster_name(name), check_storage(storage), check_spark_master(spark_master), conf
        )

    def cluster(self, name: str) -> Cluster:
        """The cluster ``name``; ``default`` is this process's warehouse (its master: spark.master)."""
        if name == DEFAULT_CLUSTER:
            return Cluster(name=DEFAULT_CLUSTER, storage=str(self.warehouse.root), spark_master=None)
        return self.primary.get_cluster(name)

    def cluster_users(self, name: str) -> FanOut[tuple[list[str], list[str]]]:
        """Per metastore: the tables living on cluster ``name``, and those replicating to it."""
        return self.router.fan_out(
            lambda store: (store.tables_on_cluster(name), store.tables_replicated_on(name))
        )

    def remove_cluster(self, name: str) -> None:
        """Remove a cluster no table of any metastore uses (the primary checks its own tables in the
        transaction that removes it; the others are asked first)."""
        self.primary.get_cluster(check_cluster_name(name))  # NotFoundError first
        users = self.cluster_users(name)
        for metastore, (tables, replicas) in sorted(users.answers.items()):
            if metastore == PRIMARY:
                continue
            if tables:
                raise UserInputError(
                    f"cluster {name} is in use: tables {', '.join(tables[:5])} live there (in metastore "
                    f"{metastore}); drop or move them first"
                )
            if replicas:
                raise UserInputError(
                    f"cluster {name} is in use: it holds replicas of {', '.join(replicas[:5])} (in metastore "
                    f"{metastore}); drop them first (streampart table alter NS.T --drop-replica {name})"
                )
        if users.missing:
            raise UserInputError(
                f"cluster {name} may be in use in metastores that did not answer "
                f"({', '.join(sorted(users.missing))}); try again when they are back"
            )
        self.primary.remove_cluster(name)

    def clusters(self) -> list[Cluster]:
        """``default`` first, then every registered cluster by name."""
        return [self.cluster(DEFAULT_CLUSTER), *self.primary.list_clusters()]

    # -- federation (see metastore.federation_admin) ------------------------------------------
    @property
    def federation(self) -> FederationAdmin:
        return FederationAdmin(self.router)

    def add_metastore(
        self,
        name: str,
        url: str,
        access: AccessType | str,
        writable: Sequence[str] = (),
        prefix: str | None = None,
        routes: Mapping[str, str] | None = None,
    ) -> FederatedMetastore:
        """Register a federated metastore (see :meth:`FederationAdmin.add`)."""
        return self.federation.add(name, url, access, writable, prefix, routes)

    def alter_metastore(
        self,
        name: str,
        *,
        access: AccessType | str | None = None,
        writable: Sequence[str] | None = None,
        prefix: str | None = None,
        no_prefix: bool = False,
    ) -> FederatedMetastore:
        """Change a metastore's access type, whitelist or prefix (see :meth:`FederationAdmin.alter`)."""
        return self.federation.alter(
            name, access=access, writable=writable, prefix=prefix, no_prefix=no_prefix
        )

    def metastore(self, name: str) -> FederatedMetastore:
        """The metastore ``name``; ``primary`` is this process's own (``--metastore``)."""
        return self.federation.get(name)

    def metastores(self) -> list[FederatedMetastore]:
        """``primary`` first, then every registered metastore by name."""
        return self.federation.list()

    def remove_metastore(self, name: str) -> None:
        """Remove a metastore (see :meth:`FederationAdmin.remove`)."""
        self.federation.remove(name)

    def metastore_health(self, metastore: FederatedMetastore) -> str | None:
        """None if ``metastore`` answers a live probe now (short timeout), else why not."""
        return self.federation.health(metastore)

    def route_namespace(self, namespace: str, metastore: str, *, force: bool = False) -> str:
        """Route ``namespace`` to ``metastore`` (see :meth:`FederationAdmin.route`)."""
        return self.federation.route(namespace, metastore, force=force)

    def set_route(self, namespace: str, metastore: str) -> None:
        """Route ``namespace`` to ``metastore`` explicitly (a new namespace, or a move's flip)."""
        self.federation.set_route(namespace, metastore)

    def create_namespace(
        self,
        name: str,
        *,
        metastore: str | None = None,
        isolated: bool = False,
        quota_bytes: int | None = None,
        description: str = "",
    ) -> Namespace:
        """Create a namespace in its metastore: ``metastore`` (an explicit route, recorded first),
        else the one its name routes to (a prefix, else the primary).

        Raises:
            NotFoundError: no such metastore; FederationAccessError: its access type creates no
                namespace (or not this one); AlreadyExistsError: the namespace exists.
        """
        check_namespace(name)
        home = self.router.metastore_of(name) if metastore is None else metastore
        self.router.check_creates(home, name)
        if metastore is not None:
            current = self.router.metastore_of(name)
            if current != metastore and self.routed(name).store.find_namespace(name) is not None:
                raise AlreadyExistsError(f"namespace {name} exists already (in metastore {current})")
            self.set_route(name, metastore)
        return self.on(home).store.create_namespace(
            name, isolated=isolated, quota_bytes=quota_bytes, description=description
        )

    def mover(self, **options: Any) -> NamespaceMover:
        """A :class:`~metastore.moves.NamespaceMover` over this catalog's federation (see its options)."""
        return NamespaceMover(self.router, **options)

    def rebound(self, table: Table) -> Table:
        """``table`` read again from wherever its namespace lives now (a move may have taken it).

        Raises:
            NotFoundError: it is gone (dropped; a table of its name made since is another table).
        """
        self.router.refresh(force=True)
        found = self.routed(table.name.namespace).store.find_table(table.name)
        if found is None or (table.uid and found.uid != table.uid):
            raise NotFoundError(f"table {table.name} does not exist (any more)")
        return found

    def namespace(self, name: str) -> Namespace:
        """The namespace ``name``, from its metastore (NotFoundError naming the command that makes it)."""
        return self.routed(name).store.get_namespace(name)

    def alter_namespace(self, name: str, **changes: Any) -> Namespace:
        """Change a namespace's isolation, quota or description (in its metastore)."""
        return self.writable(name).store.alter_namespace(name, **changes)

    def drop_namespace(self, name: str) -> None:
        """Remove an empty namespace from its metastore, then its explicit route from the primary."""
        home = self.writable(name)
        home.store.drop_namespace(name)  # in the primary this drops its route in the same transaction
        if home.store is not self.primary:
            self.primary.remove_route(name)
            self.router.refresh(force=True)

    def links(self, namespace: str) -> list[Link]:
        """The links of ``namespace`` (from its metastore)."""
        return self.routed(namespace).store.list_links(namespace)

    def drop_link(self, link: Link) -> None:
        """Remove a link (its source is untouched)."""
        self.writable(link.name.namespace).store.drop_link(link)

    # -- replicas ----------------------------------------------------------------------------
    def _check_secondary(self, name: TableName, primary: Cluster, cluster: str) -> Cluster:
        if cluster == primary.name:
            raise UserInputError(
                f"{cluster} is the primary cluster of {name}: it holds all the data already; "
                "a replica goes to another cluster"
            )
        secondary = self.cluster(cluster)
        if Path(secondary.storage) == Path(primary.storage):
            raise UserInputError(
                f"clusters {cluster} and {primary.name} share the storage {secondary.storage}; "
                f"a replica of {name} on {cluster} would be the table itself"
            )
        return secondary

    def check_replica(self, table: Table, cluster: str) -> None:
        """Raise what :meth:`add_replica` would raise for ``cluster``, changing nothing."""
        self._check_secondary(table.name, self.cluster(table.cluster), cluster)
        if any(r.cluster == cluster for r in self.replicas(table)):
            raise AlreadyExistsError(f"table {table.name} replicates to {cluster} already")

    def add_replica(self, table: Table, cluster: str) -> Replica:
        """Make ``cluster`` a secondary of ``table``: an empty Delta table there, recorded.

        Its standard partitions are copied there by the roll daemon (or ``table replicate``).

        Raises:
            UserInputError: ``cluster`` is the table's primary, or shares its storage;
                NotFoundError: no such cluster; AlreadyExistsError: it is a replica already.
        """
        home = self.for_write(table)
        if home is not self:
            return home.add_replica(table, cluster)
        self.check_replica(table, cluster)
        location = self.location_of(table.name, self.cluster(cluster))
        if Path(location).exists() and any(Path(location).iterdir()):
            raise UserInputError(
                f"{location} exists already and is not empty (left by an earlier table of that name?); "
                f"nothing of streampart's refers to it: delete it, then add the replica on {cluster} again"
            )
        try:
            replica = self.store.add_replica(table.id, cluster, location)
        except AlreadyExistsError:
            raise AlreadyExistsError(f"table {table.name} replicates to {cluster} already") from None
        try:
            self.warehouse.create(replica_table(table, replica))
        except Exception:
            self.store.remove_replica(table.id, cluster)
            raise
        return replica

    def drop_replica(self, table: Table, cluster: str) -> Replica:
        """Stop replicating ``table`` to ``cluster``: forget its copies there, then delete them."""
        try:
            replica = self.for_write(table).store.remove_replica(table.id, cluster)
        except NotFoundError:
            raise self._no_replica(table, cluster) from None
        shutil.rmtree(replica.location, ignore_errors=True)
        return replica

    def replicas(self, table: Table) -> list[Replica]:
        """The secondaries of ``table``, by cluster name."""
        return self.of(table).store.list_replicas(table.id)

    def replica(self, table: Table, cluster: str) -> Replica:
        """The replica of ``table`` on ``cluster`` (NotFoundError naming the ones it has)."""
        try:
            return self.of(table).store.get_replica(table.id, cluster)
        except NotFoundError:
            raise self._no_replica(table, cluster) from None

    def _no_replica(self, table: Table, cluster: str) -> NotFoundError:
        replicas = ", ".join(r.cluster for r in self.replicas(table)) or "none"
        return NotFoundError(f"table {table.name} has no replica on {cluster} (its replicas: {replicas})")

    def present_on(
        self, table: Table, cluster: str, partitions: Sequence[Partition] | None = None
    ) -> set[datetime]:
        """The partition values wholly present on ``cluster``: on the primary every partition,
        on a secondary the standard partitions copied there (none on any other cluster)."""
        store = self.of(table).store
        if cluster == table.cluster:
            parts = partitions if partitions is not None else store.list_partitions(table.id)
            return {p.value for p in parts}
        return store.present_values(table.id, cluster)

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
            namespace = self.namespace_named(namespace)
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
        if namespace is not None and qualified.namespace != namespace and self._isolated(namespace):
            raise IsolationError(
                f"namespace {namespace} is isolated: it reads only its own tables and its links, not "
                f"{qualified}; to read it, link it: streampart link create {namespace}.{qualified.table} "
                f"--to {qualified}"
            )
        home = self.routed(qualified.namespace).store
        table = home.find_table(qualified)
        if table is not None:
            return Resolved(qualified, table)
        link = home.find_link(qualified)
        if link is None:
            exact = self._named_in_any_case(qualified)
            if exact is None:
                raise NotFoundError(f"table {qualified} does not exist")
            return self.resolve(exact, namespace)
        return Resolved(qualified, self.link_source(link), link)

    def namespace_named(self, name: str) -> str:
        """The namespace ``name`` stands for, as Spark matches names: exactly, else in any case if one
        namespace matches so (``name`` itself when none does; UserInputError when several do)."""
        if self.routed(name).store.find_namespace(name) is not None:
            return name
        matches = {n.name for n in self.list_namespaces().merged() if n.name.lower() == name.lower()}
        if len(matches) > 1:
            raise UserInputError(
                f"namespace {name!r} is ambiguous: {', '.join(sorted(matches))} differ only by case; "
                "write the name exactly"
            )
        return matches.pop() if matches else name

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
        links = self.routed(namespace).store.links_from(namespace, source)
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
        return Resolved(links[0].name, self.link_source(links[0]), links[0])

    def _isolated(self, namespace: str) -> bool:
        found = self.routed(namespace).store.find_namespace(namespace)
        return found is not None and found.isolated

    def link_source(self, link: Link) -> Table:
        """The table a link reads, in whichever metastore its namespace lives (DanglingLinkError if
        it was dropped, even if a table of that name was made since: the uid tells them apart)."""
        if link.source_uid is not None:
            found = self.routed(link.source.namespace).store.find_table(link.source)
            if found is not None and found.uid == link.source_uid:
                return found
        elif link.source_table_id is not None:  # recorded before uids: source in the link's metastore
            try:
                return self.routed(link.name.namespace).store.get_table_by_id(link.source_table_id)
            except NotFoundError:
                pass
        raise DanglingLinkError(
            f"link {link.name}: its source {link.source} was dropped; drop the link "
            f"(streampart link drop {link.name})"
        )

    def is_dangling(self, link: Link) -> bool:
        """Whether ``link``'s source was dropped (looked up in the source's metastore, by uid)."""
        try:
            self.link_source(link)
        except DanglingLinkError:
            return True
        return False

    def link_info(self, link: Link) -> dict[str, Any]:
        """``link``'s settings as ``link describe --json`` shows them (see description.link_info)."""
        return description.link_info(link, dangling=self.is_dangling(link))

    # -- links -----------------------------------------------------------------------------
    def create_link(self, spec: LinkSpec, *, create_namespace: bool = True) -> Link:
        """Link ``spec.source`` (a table of another namespace) into ``spec.name``'s namespace.

        Raises:
            UserInputError: the source is a link, is in the same namespace, or the partitions
                are not the source's; AlreadyExistsError: the local name is taken.
        """
        home = self.writable(spec.name.namespace)
        if home is not self:
            return home.create_link(spec, create_namespace=create_namespace)
        self._creates_namespace(spec.name.namespace)
        source = self.link_source_for(spec.name, spec.source)
        if not create_namespace and self.store.find_namespace(spec.name.namespace) is None:
            raise missing_namespace(spec.name.namespace)
        if spec.mode is LinkMode.STATIC:
            values = list(spec.partitions) + (spec.range.values(source) if spec.range else [])
            listed = self.static_link_values(source, values)
            spec = spec.model_copy(update={"partitions": listed, "range": None})
        elif spec.partitions:
            raise UserInputError("--partition lists the partitions of a static link: add --static")
        return self.store.create_link(spec, source, create_namespace=create_namespace)

    def link_source_for(self, name: TableName, source: TableName) -> Table:
        """The table a new link ``name`` may point at: ``source``, a table of another namespace.

        Raises:
            UserInputError: ``source`` is in ``name``'s namespace, or is a link (links point at
                tables only, so they form no chains or cycles); NotFoundError: there is no such table.
        """
        if source.namespace == name.namespace:
            raise UserInputError(
                f"{source} is in namespace {name.namespace} already; a link imports a table of another "
                "namespace"
            )
        home = self.routed(source.namespace).store
        source_link = home.find_link(source)
        if source_link is not None:
            raise UserInputError(
                f"{source} is a link (to {source_link.source}); link to {source_link.source} itself "
                "(links point at tables, never at links, so they form no chains or cycles)"
            )
        return home.get_table(source)

    def static_link_values(self, source: Table, values: Sequence[datetime]) -> tuple[datetime, ...]:
        """``values`` checked as partitions a static link of ``source`` may list (see check_static_values)."""
        existing = [p.value for p in self.of(source).store.list_partitions(source.id)]
        return check_static_values(source, values, existing)

    def set_link_partitions(
        self,
        link: Link,
        add: list[datetime] | tuple[datetime, ...] = (),
        drop: list[datetime] | tuple[datetime, ...] = (),
    ) -> Link:
        """Add or drop partitions of a static link (added values must be the source's partitions or
        period starts; dropped ones must be listed: a typo changes nothing, rather than nothing silently)."""
        missing = [iso(v) for v in drop if v not in link.partitions]
        if missing and link.mode is LinkMode.STATIC:
            raise UserInputError(f"link {link.name} does not list {', '.join(missing)}; nothing was changed")
        return self.writable(link.name.namespace).store.set_link_partitions(
            link, self.static_link_values(self.link_source(link), add), drop
        )

    # -- description -----------------------------------------------------------------------
    def describe(self, what: Table | Resolved) -> dict[str, Any]:
        """A table (or a link) and its partitions, as ``streampart table describe --json`` shows them
        (see :func:`metastore.description.describe`)."""
        resolved = what if isinstance(what, Resolved) else Resolved(what.name, what)
        table = resolved.table
        dt = self.load(table)
        replicas = self.replicas(table) if resolved.link is None else []
        return description.describe(
            resolved,
            int(dt.version()),
            live_files(dt),
            self.of(table).store.list_partitions(table.id),
            replicas,
            self.of(table).store.list_copies(table.id) if replicas else [],
            log_settings(dt) if resolved.link is None else None,
        )
