"""Spark reads of streampart tables, each at one pinned Delta version (a snapshot).

Delta's Spark connector cannot be fetched here, so a table is read through the file list of
one Delta version with Spark's native Parquet reader; the partition column, which lives in
the Delta log only, is attached by file name (every data file name is unique in a table).
Because the plan holds a fixed file list, every read of a table within one query — one
DataFrame — sees the same rows, whatever commits or rolls happen meanwhile.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metastore import storage
from metastore.catalog import Catalog
from metastore.delta.log import version_at
from metastore.errors import UserInputError
from metastore.links import Resolved
from metastore.models import ARRIVAL_COLUMN, Column, Table, TableName
from metastore.namespaces import check_namespace
from metastore.snapshots import Snapshot, pin, view_of
from scheduler.spark_files import parquet_files
from streampart import driver_jvm, query_policy, spark_home
from streampart.bucket_reads import bucket_frame
from streampart.class_archive import java_options
from streampart.errors import QueryError, QueryRefusedError
from streampart.query_errors import spark_errors, syntax_error
from streampart.query_policy import Output, Read, Resolver, TableRef
from streampart.spark_hooks import EXTENSIONS, compile_hooks
from streampart.spark_master import check_reachable, check_same_master

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from streampart.config import SparkConfig

FS_CHECKPOINTS = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"


def spark_session(config: SparkConfig | None = None) -> SparkSession:
    """The process's SparkSession, created on first use (UTC, UI off)."""
    from pyspark.sql import SparkSession

    from streampart.config import SparkConfig

    config = config or SparkConfig()
    check_same_master(_running_master(), config.master)
    check_reachable(config.master)
    # Python workers must run in this interpreter (and its virtualenv).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if config.master.startswith("local"):  # on a cluster, executors must reach the driver's address
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark_home.use()  # Spark's Python processes import compiled pyspark, not pyspark.zip
    warnings.filterwarnings("ignore", message=".*pandas.*", category=FutureWarning)
    # PySpark logs every error it captures from the JVM, with the whole Java stack (kilobytes),
    # before raising it; streampart reports each as one line (spark_errors), so not twice.
    logging.getLogger("SQLQueryContextLogger").disabled = True
    log4j = Path(__file__).with_name("log4j2.properties")
    options = {
        "spark.app.name": "streampart",
        "spark.master": config.master,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(config.shuffle_partitions),
        "spark.driver.memory": config.driver_memory,
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8",
        "spark.driver.extraJavaOptions": " ".join(
            [f"-Dlog4j2.configurationFile=file:{log4j}", *java_options(config.class_archive)]
        ),
        # no `SELECT … FROM parquet.`/any/path``: queries read streampart snapshots only
        "spark.sql.runSQLOnFiles": "false",
        # no `${var}` in statements: Spark would substitute it after the statement was checked
        "spark.sql.variable.substitute": "false",
        # Streaming checkpoints (always local: ingest.kafka.job_options) through Hadoop's FileSystem
        # API: its local file system renames in Java, where FileContext's forks `chmod` and
        # `readlink` processes off the JVM for every log file, about 20 per trigger (measured:
        # walCommit + commitOffsets 80 → 22 ms a trigger). Renames refuse an existing file either way.
        "spark.sql.streaming.checkpointFileManagerClass": FS_CHECKPOINTS,
    }
    conf = dict(config.conf)
    # the hooks resolve each statement's names to its pinned snapshots and check what it resolved to
    for key, value, sep in (
        ("spark.driver.extraClassPath", str(compile_hooks()), os.pathsep),
        ("spark.sql.extensions", EXTENSIONS, ","),
    ):
        given = [v for v in conf.get(key, "").split(sep) if v and v != value]
        conf[key] = sep.join([value, *given])
    options |= conf
    try:
        with spark_errors():
            driver_jvm.launch(options)  # the JVM's stderr without the JDK's start-up notice
            spark = SparkSession.builder.config(map={**options}).getOrCreate()  # (its map: any scalars)
    except QueryError as exc:
        raise QueryError(
            f"Spark could not start with master {config.master!r} (spark.master or --spark-master; for a "
            "table's cluster, its registered master or this host's [clusters] spark_masters): "
            f"{str(exc).removeprefix('query failed: ')}"
        ) from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _running_master() -> str | None:
    """The master of this process's SparkContext, if one runs."""
    from pyspark import SparkContext

    running = SparkContext._active_spark_context
    return running.master if running is not None else None


def spark_ddl(columns: Sequence[Column]) -> str:
    """Spark's DDL of ``columns`` (a snapshot's: its version's columns, not the metastore's)."""
    return ", ".join(f"`{c.name}` {c.sql_type}" for c in columns)


def snapshot_frame(spark: SparkSession, snap: Snapshot) -> DataFrame:
    """A DataFrame of exactly the rows of ``snap`` in its version's columns, partition column included.

    Spark's Parquet reader, given the version's columns as the read schema, reads a column a file
    lacks (added after it was written) as nulls and a widened one in its wider type. A keyed table's
    rows are its keys' newest versions, merged on read (:mod:`streampart.merge_on_read`).
    """
    if snap.table.keys is not None:
        from streampart.merge_on_read import keyed_frame

        return keyed_frame(spark, snap, files_frame)
    return files_frame(spark, snap)


def files_frame(spark: SparkSession, snap: Snapshot, arrivals: Mapping[str, int] | None = None) -> DataFrame:
    """Every row of ``snap``'s files (see :func:`snapshot_frame`). With ``arrivals`` (a keyed table's
    files' arrivals from the log, by path), also each row's arrival, as :data:`ARRIVAL_COLUMN`: the
    file's own column where it has one (a roll or a delete wrote it), else its file's in ``arrivals``.
    """
    from pyspark.sql import functions as F

    from streampart.bucket_reads import unused_name

    table = snap.table
    pcol = table.partition_column
    ddl = spark_ddl(snap.columns)
    keyed = arrivals is not None
    extra = f", `{ARRIVAL_COLUMN}` BIGINT" if keyed else ""
    if not snap.files:
        return spark.createDataFrame([], f"{ddl}, `{pcol}` TIMESTAMP{extra}")
    if storage.is_remote(table.location):  # no JVM S3 connector: Spark's Python workers read them
        return bucket_frame(spark, snap, ddl, arrivals)
    paths = [str(Path(table.location) / f.path) for f in snap.files]
    # Names Spark's reads give a meaning are refused as columns, but a table's log may hold one from
    # before. Spark's Parquet reader fills a column read as exactly ``_tmp_metadata_row_index`` with
    # row numbers (measured: every row with its row-based reader, those of files lacking it with the
    # vectorized one), so such a column is read under another case (Spark matches a file's columns
    # without case) and named back. Each row's file name comes from Spark's hidden file metadata,
    # reached so that no data column (``_metadata``) shadows it, and is joined under a name no
    # column of the table takes.
    row_index, read_as = "_tmp_metadata_row_index", "_TMP_METADATA_ROW_INDEX"
    holds = any(c.name == row_index for c in snap.columns)
    read = [c.model_copy(update={"name": read_as}) if c.name == row_index else c for c in snap.columns]
    data = pruned(spark, parquet_files(spark, spark_ddl(read) + extra, paths), snap)
    key = unused_name("__sp_file", [*(c.name for c in snap.columns), pcol])
    if keyed:
        assert arrivals is not None
        tag = unused_name("__sp_tag", [*(c.name for c in snap.columns), pcol, key])
        names = spark.createDataFrame(
            [(f.name, f.partition, arrivals.get(f.path)) for f in snap.files],
            f"`{key}` STRING, `{pcol}` TIMESTAMP, `{tag}` BIGINT",
        )
    else:
        names = spark.createDataFrame(
            [(f.name, f.partition) for f in snap.files], f"`{key}` STRING, `{pcol}` TIMESTAMP"
        )
    frame = (
        data.withColumn(key, data.metadataColumn("_metadata").getField("file_name"))
        .join(F.broadcast(names), key)
        .drop(key)
    )
    if keyed:
        frame = frame.withColumn(ARRIVAL_COLUMN, F.coalesce(F.col(ARRIVAL_COLUMN), F.col(tag))).drop(tag)
        frame = frame.select(*(F.col(f"`{c}`") for c in [*(c.name for c in read), pcol, ARRIVAL_COLUMN]))
    return frame.withColumnRenamed(read_as, row_index) if holds else frame


def pruned(spark: SparkSession, data: DataFrame, snap: Snapshot) -> DataFrame:
    """``data`` (a Parquet read of ``snap``'s files) with its files pruned by their statistics before
    Spark opens them: Spark scans only the files whose ranges can match the filters it pushes to the
    read (``streampart/java/Pruning.java``). A snapshot without its add actions is read whole."""
    from pyspark.sql import DataFrame

    from metastore.delta.stats import scan_bounds

    if snap.adds is None or snap.adds.num_rows == 0:
        return data
    jvm = spark._jvm
    assert jvm is not None
    return DataFrame(jvm.streampart.sqlserver.Pruning.prune(data._jdf, scan_bounds(snap.adds)), spark)


def read_table(
    spark: SparkSession,
    catalog: Catalog,
    name: str | TableName | Table,
    version: int | None = None,
    namespace: str | None = None,
) -> DataFrame:
    """The table or link ``name`` at ``version`` (default: the newest) as a Spark DataFrame.

    A link reads its source's files at one version of the source (``version`` is the source's),
    keeping the partitions the link admits. ``namespace`` is the namespace the read runs in
    (``T`` and ``T@B`` names; an isolated one reads only its own tables and links).

    Example:
        >>> df = read_table(spark, catalog, "demo.events")
        >>> df.groupBy("ts_period").count().show()
    """
    resolved = Resolved(name.name, name) if isinstance(name, Table) else catalog.resolve(name, namespace)
    return snapshot_frame(spark, view_of(resolved, pin(catalog, resolved.table, version)))


def from_spark(value: Any) -> Any:
    """A value collected from Spark, with TIMESTAMPs as aware UTC datetimes.

    PySpark hands TIMESTAMP values to Python as naive datetimes in the process's local time
    zone (whatever ``spark.sql.session.timeZone`` says); this makes them the instants they are.
    """
    from datetime import UTC, datetime

    if isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone(UTC)
    return value


def register_views(
    spark: SparkSession, catalog: Catalog, names: set[str] | None = None
) -> dict[str, tuple[str, int]]:
    """Register tables (and links) as Spark SQL temporary views, each pinned at its newest version now.

    Spark's temporary views have one-part names, so ``ns.t`` becomes ``__sp_ns__t`` (and
    :func:`run_sql` rewrites ``ns.t`` to it). Registering again re-pins: a view never moves on
    its own, so every query over it reads one snapshot.

    Returns:
        ``{"ns.t": (view name, pinned version)}`` for each table registered.
    """
    wanted = names if names is not None else {str(t.name) for t in catalog.list_tables().merged()}
    versions = register_snapshots(spark, catalog, {TableRef(n) for n in wanted})
    return {ref.name: (ref.view, v) for ref, v in versions.items()}


def catalog_resolver(catalog: Catalog, namespace: str | None = None) -> Resolver:
    """How a query run in ``namespace`` (None: in none) resolves the names it reads."""
    return lambda written: str(catalog.resolve(written, namespace).name)


@dataclass(frozen=True)
class Session:
    """What a query runs under: its text after the leading ``USE`` statements, and what they set.

    ``cluster`` None is the automatic choice (:mod:`streampart.query_cluster`).
    """

    sql: str
    namespace: str | None = None
    cluster: str | None = None


def split_use(sql: str, namespace: str | None = None, cluster: str | None = None) -> Session:
    """Leading ``USE NAMESPACE;``, ``USE CLUSTER C;`` and ``USE CLUSTER;`` taken off ``sql``, in order.

    ``USE CLUSTER C;`` runs the statement on cluster C (as ``--cluster C``); ``USE CLUSTER;``
    returns to the automatic choice. (A namespace called ``cluster`` is written ```cluster```.)

    Raises:
        UserInputError: a ``USE`` names another namespace than ``namespace`` (``--namespace``),
            or another cluster than ``cluster`` (``--cluster``).
    """
    from metastore.models import check_identifier

    namespace_option, cluster_option = namespace, cluster
    while True:
        m = _USE_CLUSTER.match(sql)
        if m is not None:
            used = check_identifier(m.group(1), "cluster name") if m.group(1) else None
            if cluster_option is not None and used != cluster_option:
                said = f"USE CLUSTER {used}" if used else "USE CLUSTER (the automatic choice)"
                raise UserInputError(f"{said} contradicts --cluster {cluster_option}: give one of them")
            sql, cluster = sql[m.end() :], used
            continue
        m = _USE.match(sql)
        if m is None:
            return Session(sql, namespace, cluster)
        used = check_namespace(m.group(1).strip("`"))
        if namespace_option is not None and used != namespace_option:
            raise UserInputError(f"USE {used} contradicts --namespace {namespace_option}: give one of them")
        sql, namespace = sql[m.end() :], used


_SETTING = re.compile(r"^\s*(SET|RESET)\b", re.IGNORECASE)
_USE = re.compile(r"^\s*USE\s+(`?[A-Za-z_][A-Za-z0-9_]*`?)\s*;", re.IGNORECASE)
_USE_CLUSTER = re.compile(r"^\s*USE\s+CLUSTER(?:\s+([A-Za-z_][A-Za-z0-9_]*))?\s*;", re.IGNORECASE)


@dataclass(frozen=True)
class Prepared:
    """One statement, checked: its text, the snapshots it reads, the table it writes."""

    text: str  # as written (``t@b`` quoted): Spark parses and resolves it, over staged snapshots
    reads: tuple[Read, ...]  # each table reference, in the order the statement names them
    output: Output | None  # None: the statement only reads

    @property
    def refs(self) -> tuple[TableRef, ...]:
        """The snapshots the statement reads: one per table (or link) and version asked for."""
        return tuple(dict.fromkeys(read.ref for read in self.reads))


def prepare(sql: str, resolve: Resolver) -> Prepared:
    """Check one statement against the query policy and find the tables it reads.

    The statement runs as written: Spark's parser reads it and Spark's analyzer resolves its
    table names to the snapshots staged for them (:func:`statement_frame`), so every clause
    means what it means in Spark. Only ``t@b`` is quoted first (Spark's grammar has no ``@``).

    Args:
        sql: One query, ``INSERT INTO … <query>`` or ``CREATE TABLE … AS <query>`` (``USE`` is
            taken off first, by :func:`split_use`).
        resolve: How names the query reads become catalog tables or links (:func:`catalog_resolver`).
    """
    import sqlglot

    setting = _SETTING.match(sql)
    if setting is not None:
        raise QueryRefusedError(
            f"{setting.group(1).upper()}: a statement runs under streampart's Spark settings; statements "
            "may not change them (queries only: SELECT, WITH …, INSERT INTO, CREATE TABLE … AS)"
        )
    text = query_policy.quote_link_references(sql)
    try:
        statements = sqlglot.parse(text, read="spark")
    except sqlglot.errors.ParseError as exc:
        raise UserInputError(syntax_error(text, exc)) from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise UserInputError(
            "give exactly one SQL statement (USE NAMESPACE; and USE CLUSTER C; may come before it)"
        )
    tree, output = query_policy.split_statement(statements[0])
    reads = query_policy.check(tree, resolve)
    return Prepared(text.strip().rstrip(";").strip(), tuple(reads), output)


def rewrite(sql: str, resolve: Resolver) -> tuple[str, set[TableRef]]:
    """:func:`prepare` for a statement that only reads: the query to run, and the snapshots it reads.

    Raises:
        UserInputError: ``sql`` writes a table (INSERT INTO, CREATE TABLE … AS): run it with
            ``streampart query`` (:mod:`streampart.query_writes`).
    """
    prepared = prepare(sql, resolve)
    if prepared.output is not None:
        raise UserInputError(
            f"{prepared.output.verb} writes a table: run it with `streampart query` "
            "(streampart.query_writes), not as a read"
        )
    return prepared.text, set(prepared.refs)


def pin_snapshots(
    catalog: Catalog, refs: Iterable[TableRef], *, check: bool = True
) -> dict[TableRef, tuple[Resolved, Snapshot]]:
    """Pin each table (or link) a query reads on its primary: what each reference names, and its snapshot.

    Each table is pinned once per version asked for, and every reference that reads it — the
    table itself, links to it — is a view of that one snapshot: a query reading ``B.T`` and A's
    link to it sees one version of B in both.
    """
    pinned: dict[tuple[str, int | None], Snapshot] = {}
    out = {}
    for ref in refs:
        resolved = catalog.resolve(ref.name)
        table = resolved.table
        version = version_of(catalog, table, ref)
        key = (identity(table), version)
        if key not in pinned:
            pinned[key] = pin(catalog, table, version, check=check)
        out[ref] = (resolved, view_of(resolved, pinned[key]))
    return out


def identity(table: Table) -> str:
    """A table's identity across the federation: its uid (row ids repeat across metastores)."""
    return table.uid or f"{table.name}#{table.id}"


def statement_frame(
    spark: SparkSession, prepared: Prepared, snapshots: Mapping[TableRef, Snapshot]
) -> DataFrame:
    """The rows of ``prepared``'s query (of an INSERT or CREATE TABLE … AS: the rows it writes).

    Each snapshot becomes a DataFrame over its fixed file list, staged under the names the
    statement reads it by; Spark then parses the statement as written and its analyzer resolves
    those names to the staged snapshots, and the check rule refuses what the analyzed plan may
    not hold (``streampart/java/Statements.java``, ``Policy.java``).
    """
    from pyspark.sql import DataFrame

    jvm = spark._jvm
    assert jvm is not None
    statements = jvm.streampart.sqlserver.Statements
    statement = statements.open()
    try:
        frames: dict[int, Any] = {}
        for read in prepared.reads:
            snap = snapshots[read.ref]
            plan = frames.get(id(snap))
            if plan is None:
                plan = frames[id(snap)] = snapshot_frame(spark, snap)._jdf.queryExecution().analyzed()
            namespace = TableName.parse(read.ref.name).namespace
            statements.put(statement, read.key, namespace, read.alias, plan)
        with spark_errors():
            return DataFrame(statements.analyze(spark._jsparkSession, prepared.text, statement), spark)
    finally:
        statements.discard(statement)


def register(spark: SparkSession, snapshots: Mapping[TableRef, Snapshot]) -> dict[TableRef, int]:
    """Register each snapshot as the temporary view of its reference; the Delta version of each."""
    for ref in sorted(snapshots, key=lambda r: r.view):
        snapshot_frame(spark, snapshots[ref]).createOrReplaceTempView(ref.view)
    return {ref: snap.version for ref, snap in snapshots.items()}


def register_snapshots(spark: SparkSession, catalog: Catalog, refs: set[TableRef]) -> dict[TableRef, int]:
    """Pin each table a query reads on its primary (:func:`pin_snapshots`) and register its view."""
    return register(spark, {ref: snap for ref, (_, snap) in pin_snapshots(catalog, refs).items()})


def version_of(catalog: Catalog, table: Table, ref: TableRef) -> int | None:
    """The Delta version ``VERSION AS OF`` / ``TIMESTAMP AS OF`` names (None: the newest)."""
    from metastore.models import parse_instant

    if ref.version is None and ref.timestamp is None:
        return None
    newest = int(catalog.load(table).version())
    if ref.version is not None:
        from metastore.delta.history import check_readable

        check_readable(table, ref.version, newest)
        return ref.version
    assert ref.timestamp is not None
    at = parse_instant(ref.timestamp, f"{ref.name} TIMESTAMP AS OF")
    version = version_at(table, at)
    if version is None:
        raise UserInputError(f"{ref.name} has no version committed at or before {ref.timestamp}")
    return min(version, newest)


def run_sql(spark: SparkSession, catalog: Catalog, sql: str, namespace: str | None = None) -> DataFrame:
    """Run Spark SQL over the catalog's tables and links, each pinned at one version on its primary.

    (``streampart query`` also chooses the cluster a statement runs on, reads that cluster's
    copies and runs INSERT INTO and CREATE TABLE … AS: :mod:`streampart.query_plan`.)

    Args:
        sql: One query, optionally after ``USE NAMESPACE;``.
        namespace: The namespace the query runs in (``--namespace``); see :meth:`Catalog.resolve`.

    Errors found while planning raise :class:`QueryError` here; errors found while reading
    (an unreadable data file, say) surface when rows are fetched: wrap that in :func:`spark_errors`.
    """
    session = split_use(sql, namespace)
    if session.cluster is not None:
        raise UserInputError(
            "USE CLUSTER: run_sql reads each table on its primary, in this process; a statement's "
            "cluster is chosen by `streampart query` (streampart.query_plan)"
        )
    prepared = prepare(session.sql, catalog_resolver(catalog, session.namespace))
    if prepared.output is not None:
        raise UserInputError(
            f"{prepared.output.verb} writes a table: run it with `streampart query` "
            "(streampart.query_writes), not as a read"
        )
    snapshots = {ref: snap for ref, (_, snap) in pin_snapshots(catalog, prepared.refs).items()}
    return statement_frame(spark, prepared, snapshots)
