"""Statements that write: ``INSERT INTO ns.t <query>`` and ``CREATE TABLE ns.t … AS <query>``.

A statement's result is one chunk of its output table, committed through the chunk protocol
(:class:`ingest.chunks.ChunkWriter`) like any producer's: late data, event-time partitions,
dead letters and quotas behave as for ``streampart write``, and the statement lands exactly
once per idempotency key. Its rows are put in one canonical order (sorted by every column)
before they are digested, so a retry whose query computes the same rows — in whatever order
Spark's tasks hand them over — is recognised as the same chunk; other rows under the same key
are an :class:`~ingest.errors.IdempotencyConflictError`.

``CREATE TABLE … AS`` records the new table and reserves its first chunk under the key in one
metastore transaction (:meth:`metastore.catalog.Catalog.create_table`), so the key proves who
created the table: a retry after a crash anywhere — before the Delta log exists, before the
chunk was staged, mid-commit — finds the table and its chunk and finishes; a retry after
success answers the first run; another statement's ``CREATE TABLE`` of that name is refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ingest.chunks import ChunkWriter, CommitResult
from ingest.config import ChunkConfig
from ingest.records import column_mismatches
from metastore.catalog import Catalog
from metastore.crashpoints import crashpoint
from metastore.durations import parse_duration
from metastore.errors import (
    AlreadyExistsError,
    IsolationError,
    NotFoundError,
    ReadOnlyLinkError,
    UserInputError,
)
from metastore.links import Reference
from metastore.models import (
    Column,
    LateDataPolicy,
    Mode,
    SchemaEvolution,
    Table,
    TableName,
    TableSpec,
    check_cluster_by,
    check_identifier,
    format_schema,
    keys_from_options,
    parse_cluster_by,
    parse_schema,
    reserved_refusal,
)
from streampart.query_policy import Output

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

# TBLPROPERTIES a CREATE TABLE … AS SELECT takes: each is the `streampart table create` option
# of the same name (with '-' as '_'); those not given take TableSpec's defaults (as that
# command's), but for the time column (the result's first TIMESTAMP column) and the roll
# interval (1h), which that command requires.
PROPERTIES = (
    "time_column",
    "roll_every",
    "mode",
    "partition_column",
    "lateness",
    "late_data",
    "max_future",
    "max_age",
    "dead_letter",
    "schema_evolution",
    "max_new_columns",
    "primary_key",
    "sequence_by",
    "op_column",
    "delete_ops",
    "upsert_ops",
    "history",
    "cluster_by",
)
KEY_PROPERTIES = ("primary_key", "sequence_by", "op_column", "delete_ops", "upsert_ops", "history")
DEFAULT_ROLL_EVERY = "1h"


@dataclass(frozen=True)
class WriteResult:
    """What a writing statement did: the chunk it committed, and the table it created (if any)."""

    commit: CommitResult
    created: bool
    cluster: str

    def to_json(self) -> dict[str, Any]:
        return {**self.commit.to_json(), "created": self.created, "cluster": self.cluster}


def new_key() -> str:
    """The idempotency key of a statement run without one: each run is a chunk of its own."""
    return f"query-{uuid.uuid4()}"


# -- the output table -------------------------------------------------------------------------
def output_table(catalog: Catalog, output: Output, namespace: str | None) -> tuple[TableName, Table | None]:
    """The table ``output`` names, qualified in ``namespace`` (the one the statement runs in), and
    the table itself if it exists (INSERT INTO: it must).

    Raises:
        UserInputError: an unqualified name outside a namespace; ReadOnlyLinkError: a link
            (links are read-only, as everywhere); IsolationError: an isolated namespace writing
            another namespace's table; NotFoundError: INSERT INTO a table that does not exist.
    """
    ref = Reference.parse(output.name)
    if ref.via is not None:
        raise ReadOnlyLinkError(
            f"{output.name} names a link, and links are read-only: {output.verb} {ref.via}.{ref.name} itself"
        )
    if ref.namespace is None and namespace is None:
        raise UserInputError(
            f"{output.verb} {output.name}: name the table NAMESPACE.TABLE, or run the statement in a "
            "namespace (--namespace, or USE NAMESPACE; first)"
        )
    name = TableName(
        namespace=check_identifier(ref.namespace or str(namespace), "namespace"),
        table=check_identifier(ref.name, "table"),
    )
    try:
        resolved = catalog.resolve(name, namespace)  # any case, and the namespace's isolation, as a read
    except IsolationError:
        raise IsolationError(
            f"namespace {namespace} is isolated: its statements write its own tables only, not {name}"
        ) from None
    except NotFoundError:
        if not output.create:
            raise
        return name, None  # (a link of that name: create_table refuses it, naming the link)
    return resolved.name, catalog.table(resolved.name)  # (a link: ReadOnlyLinkError, naming it)


# -- the result -------------------------------------------------------------------------------
def result_columns(schema: StructType) -> tuple[Column, ...]:
    """The columns of a query's result (a Spark schema) as a streampart table's columns.

    Raises:
        UserInputError: a column without a plain name (``count(*)``: name it), of a reserved name
            (``_metadata``, ``__sp_…``: rename it), two of one name, or of a type a table cannot hold
            (an array, a map, ``TIMESTAMP_NTZ``: cast it).
    """
    columns: list[Column] = []
    seen: set[str] = set()
    for field in schema.fields:
        try:
            check_identifier(field.name, "column name")
        except UserInputError:
            raise UserInputError(
                f"the query's result has a column {field.name!r}: give it a plain name (… AS name)"
            ) from None
        reserved = reserved_refusal(field.name)
        if reserved is not None:
            raise UserInputError(
                f"the query's result has a column {field.name!r}, a reserved name: {reserved} (… AS name)"
            )
        if field.name.lower() in seen:
            raise UserInputError(
                f"the query's result has two columns named {field.name}: name them apart (… AS name)"
            )
        seen.add(field.name.lower())
        sql_type = field.dataType.simpleString().upper()
        try:
            (column,) = parse_schema(f"{field.name} {sql_type}")
        except UserInputError:
            raise UserInputError(
                f"column {field.name} of the query's result is {sql_type}, which a streampart table "
                "cannot hold: CAST it (to BIGINT, DOUBLE, DECIMAL(p,s), STRING, BINARY, BOOLEAN, DATE, "
                "TIMESTAMP, …)"
            ) from None
        columns.append(column)
    return tuple(columns)


def aligned(df: Any, output: Output, table: Table) -> Any:
    """``INSERT INTO``'s result with its columns named as the table's, matched as Spark matches them.

    By position (the default): the result has as many columns as the table, the first is the
    table's first column, and so on. With a column list, ``INSERT INTO t (b, a) …``: the result has
    one column per name listed, in that order. ``BY NAME``: the result's own names. Columns the
    list or the names leave out are NULL (a NOT NULL one is an error).

    Raises:
        UserInputError: the counts differ, or a name is not the table's, naming both.
    """
    from pyspark.sql import functions as F

    names = [f.name for f in df.schema.fields]
    table_columns = {c.name.lower(): c for c in table.columns}
    if output.columns is None and not output.by_name:
        if len(names) != len(table.columns):
            hint = ""
            if any(
                n.lower() == table.partition_column.lower() or n.lower().endswith("_period") for n in names
            ):
                hint = (
                    "; a table's partition column follows from its time column: leave it out, e.g. "
                    "SELECT * EXCEPT (ts_period)"
                )
            raise UserInputError(
                f"INSERT INTO {table.name}: the query's result has {len(names)} column(s) and the table "
                f"{len(table.columns)} ({format_schema(table.columns)}); INSERT INTO matches columns by "
                f"position (INSERT INTO t (a, b) … and INSERT INTO t BY NAME … match otherwise, and "
                f"bring new columns to a table whose schema evolves){hint}"
            )
        return df.toDF(*[c.name for c in table.columns])
    if output.columns is not None:
        if len(names) != len(output.columns):
            raise UserInputError(
                f"INSERT INTO {table.name} ({', '.join(output.columns)}): the query's result has "
                f"{len(names)} column(s) for {len(output.columns)} listed"
            )
        df = df.toDF(*output.columns)
        names = list(output.columns)
    seen: set[str] = set()
    evolves = table.schema_evolution is not SchemaEvolution.NONE
    for name in names:
        if name.lower() not in table_columns and not evolves:  # an evolving table: a new column
            raise UserInputError(
                f"INSERT INTO {table.name}: it has no column {name} "
                f"(its columns: {format_schema(table.columns)})"
            )
        if name.lower() in seen:
            raise UserInputError(f"INSERT INTO {table.name}: column {name} is given twice")
        seen.add(name.lower())
    missing = [c for c in table.columns if c.name.lower() not in seen]
    required = [c.name for c in missing if not c.nullable]
    if required:
        raise UserInputError(
            f"INSERT INTO {table.name}: column(s) {', '.join(required)} are NOT NULL and not given"
        )
    filled = [F.lit(None).cast(c.sql_type).alias(c.name) for c in missing]
    named = [
        F.col(f"`{n}`").alias(table_columns[n.lower()].name if n.lower() in table_columns else n)
        for n in names
    ]
    return df.select(*named, *filled)


def check_fits(verb: str, table: Table | TableSpec, given: Sequence[Column]) -> None:
    """Raise a :class:`UserInputError` naming every column of ``given`` that does not fit ``table``."""
    problems = column_mismatches(given, table.columns, table.schema_evolution)
    if not problems:
        return
    hint = ""
    if any(c.name.lower() == table.partition_column.lower() for c in given):
        hint = (
            f" ({table.partition_column} is the table's partition column: it follows from "
            f"{table.time_column}; leave it out, e.g. SELECT * EXCEPT ({table.partition_column}))"
        )
    raise UserInputError(
        f"{verb} {table.name}: the query's result does not fit the table ({format_schema(table.columns)}): "
        f"{'; '.join(problems)}{hint}"
    )


def canonical_rows(data: pa.Table, columns: Sequence[Column]) -> pa.Table:
    """``data``'s columns named and ordered as ``columns``, its rows sorted by every column.

    A query's rows come in whatever order Spark's tasks finish; sorted, the same rows are the
    same chunk (the same digest), so a retry under the same key is recognised as such.
    """
    by_name = {name.lower(): name for name in data.column_names}
    data = data.select([by_name[c.name.lower()] for c in columns]).rename_columns([c.name for c in columns])
    if data.num_rows < 2:
        return data
    return data.sort_by([(c.name, "ascending") for c in columns])


# -- CREATE TABLE … AS ------------------------------------------------------------------------
def table_spec(
    name: TableName, columns: Sequence[Column], properties: Sequence[tuple[str, str]], cluster: str
) -> TableSpec:
    """The spec of a table that ``CREATE TABLE name TBLPROPERTIES (properties) AS …`` makes.

    Raises:
        UserInputError: an unknown property (naming it and the known ones), a bad value (naming
            the property), or no TIMESTAMP column to partition by.
    """
    given = {key.lower(): value for key, value in properties}
    unknown = [key for key, _ in properties if key.lower() not in PROPERTIES]
    if unknown:
        raise UserInputError(
            f"CREATE TABLE {name}: unknown table propert{'ies' if len(unknown) > 1 else 'y'} "
            f"{', '.join(repr(k) for k in unknown)}; known: {', '.join(PROPERTIES)}"
        )
    time_column = given.get("time_column") or next((c.name for c in columns if c.type == "timestamp"), None)
    if time_column is None:
        raise UserInputError(
            f"CREATE TABLE {name}: the query's result has no TIMESTAMP column to partition the table by; "
            "add one (… AS ts), or name it with TBLPROPERTIES ('time_column' = '…')"
        )

    # each property as table create's option of the same name; those not given: TableSpec's defaults
    parse = {
        "partition_column": lambda v: v,
        "mode": lambda v: _choice(Mode, v, "mode"),
        "late_data": lambda v: _choice(LateDataPolicy, v, "late_data"),
        "dead_letter": lambda v: _flag(v, "dead_letter"),
        "schema_evolution": lambda v: _choice(SchemaEvolution, v, "schema_evolution"),
        "max_new_columns": lambda v: _count(v, "max_new_columns"),
        # checked against the result's columns, named as the statement names it
        "cluster_by": lambda v: check_cluster_by(
            parse_cluster_by(v, "TBLPROPERTIES 'cluster_by'"), columns, "TBLPROPERTIES 'cluster_by'"
        ),
    }
    options = {
        key: parse.get(key, lambda v, key=key: parse_duration(v, f"TBLPROPERTIES {key!r}"))(value)
        for key, value in {"roll_every": DEFAULT_ROLL_EVERY, **given}.items()
        if key != "time_column" and key not in KEY_PROPERTIES
    }
    keys = keys_from_options(*(given.get(k) for k in KEY_PROPERTIES), flag="TBLPROPERTIES '{}'")
    spec = TableSpec(
        name=name, columns=tuple(columns), time_column=time_column, cluster=cluster, keys=keys, **options
    )
    if any(c.name.lower() == spec.partition_column.lower() for c in columns):
        raise UserInputError(
            f"CREATE TABLE {name}: the query's result has a column {spec.partition_column}, the name of the "
            f"new table's partition column (it follows from {spec.time_column}); leave it out (SELECT * "
            f"EXCEPT ({spec.partition_column}) …), or name another: TBLPROPERTIES ('partition_column' = '…')"
        )
    return spec


def _count(value: str, key: str) -> int:
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise UserInputError(f"TBLPROPERTIES {key!r}: give a whole number, 0 or more, not {value!r}")
    return count


def _choice(enum: Any, value: str, key: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        known = ", ".join(str(e.value) for e in enum)
        raise UserInputError(f"TBLPROPERTIES {key!r} must be one of {known}; got {value!r}") from None


def _flag(value: str, key: str) -> bool:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise UserInputError(f"TBLPROPERTIES {key!r} must be true or false; got {value!r}")


def create_table_as(
    catalog: Catalog, spec: TableSpec, key: str, config: ChunkConfig, *, create_namespace: bool = True
) -> Table:
    """The table ``CREATE TABLE … AS`` under ``key`` makes: created now with its first chunk reserved
    under ``key``, or found made by an earlier run under the same key.

    Raises:
        AlreadyExistsError: the table exists, and no run under ``key`` made it.
    """
    try:
        return catalog.create_table(spec, create_namespace=create_namespace, first_chunk=(key, config.ttl))
    except AlreadyExistsError:
        table = catalog.table(spec.name)
        if catalog.home(table).store.find_chunk_by_key(table.id, key) is None:
            raise _exists(spec.name) from None
        return table  # made by an earlier run of this statement: finish or answer it


def _exists(name: TableName) -> AlreadyExistsError:
    return AlreadyExistsError(f"table {name} exists already: INSERT INTO it, or choose another name")


# -- running one ------------------------------------------------------------------------------
EMPTY_RESULT = "the query's result was empty: CREATE TABLE … AS SELECT made the table without rows"


def write_result(
    catalog: Catalog,
    output: Output,
    name: TableName,
    table: Table | None,
    df: Any,
    key: str | None,
    cluster: str,
    config: ChunkConfig | None = None,
    *,
    create_namespace: bool = True,
) -> WriteResult:
    """Commit the result ``df`` of a statement writing ``output`` as one chunk, exactly once per ``key``.

    Args:
        name, table: The output table's name, and the table if it exists (:func:`output_table`).
        df: The statement's query, as a Spark DataFrame over its pinned snapshots.
        key: The idempotency key (None: a new one; the statement is then not safe to retry).
        cluster: The cluster the statement runs on: a new table is made there.
        create_namespace: ``CREATE TABLE`` may make its namespace (not ``namespaces.require_explicit``).
    """
    from streampart.query_errors import spark_errors

    config = config or ChunkConfig()
    key = key or new_key()
    given = result_columns(df.schema) if output.create else ()
    if output.create:
        spec = table_spec(name, given, output.properties, cluster)
        if table is not None:  # made by an earlier run under this key, or a clash
            if catalog.home(table).store.find_chunk_by_key(table.id, key) is None:
                raise _exists(name)
            check_fits("CREATE TABLE", table, given)
    else:
        assert table is not None
        df = aligned(df, output, table)
        given = result_columns(df.schema)
        check_fits("INSERT INTO", table, given)
    with spark_errors():
        arrow = df.toArrow()
    if output.create:
        table = create_table_as(catalog, spec, key, config, create_namespace=create_namespace)
        crashpoint("ctas-after-create")
    assert table is not None
    known = {c.name.lower() for c in table.columns}
    data = canonical_rows(arrow, [*table.columns, *(c for c in given if c.name.lower() not in known)])
    writer = ChunkWriter(catalog, table, config)
    if data.num_rows == 0:
        return WriteResult(_empty(writer, key, output.create), output.create, table.cluster)
    if output.create:
        _not_made_empty(writer, key)
    return WriteResult(writer.write_table(data, key=key), output.create, table.cluster)


def _not_made_empty(writer: ChunkWriter, key: str) -> None:
    from ingest.errors import IdempotencyConflictError

    chunk = writer.store.find_chunk_by_key(writer.table.id, key)
    if chunk is not None and chunk.error == EMPTY_RESULT:
        raise IdempotencyConflictError(
            f"idempotency key {key!r} made table {writer.table.name} from an empty result; this run's "
            "result holds rows; nothing was written: INSERT INTO the table, or use a new key"
        )


def _empty(writer: ChunkWriter, key: str, created: bool) -> CommitResult:
    """An empty result commits no chunk (a chunk holds rows); a new table's reserved one is aborted."""
    from ingest.errors import IdempotencyConflictError
    from metastore.models import ChunkState

    chunk = writer.store.find_chunk_by_key(writer.table.id, key)
    if chunk is not None and created:
        if chunk.state is ChunkState.RESERVED:
            chunk = writer.abort(chunk.id, reason=EMPTY_RESULT)
        if chunk.error != EMPTY_RESULT:
            raise IdempotencyConflictError(
                f"idempotency key {key!r} of table {writer.table.name} was used for a non-empty result "
                f"(chunk {chunk.id} is {chunk.state.value}); this run's result is empty; nothing was written"
            )
    elif chunk is not None:
        writer.check_digest(chunk, "sha256:empty")
    return CommitResult(
        chunk="", table=str(writer.table.name), partitions=[], rows=0, version=None, idempotency_key=key
    )
