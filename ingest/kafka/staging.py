"""The executors' side of the ingest job: one task's Kafka records → staged Parquet files.

:func:`stage_task` builds the ``mapInArrow`` function of a micro-batch. Spark's Python workers
unpickle it for every task, so this module imports only the standard library and pyarrow at
module level: a fresh worker (which, with ``PYTHONDONTWRITEBYTECODE=1``, compiles everything
it imports) pays for nothing the task does not use. The metastore, pydantic and the row-wise
validator load only when a batch needs the row-wise path.

Two paths, the same result:

* **Arrow** (JSON records, arrival-mode tables whose columns Arrow's JSON reader converts as
  the row-wise parser does: integers, floats, booleans, strings, timestamps): the values of a
  record batch are framed as newline-delimited JSON in one buffer (no Python object per
  record), parsed by Arrow's JSON reader straight into the table's columns, checked as Arrow
  arrays (required columns, string sizes) and written as one Parquet file per task.
* **Row-wise** (:class:`ingest.records.RecordValidator`): a batch the Arrow path cannot take
  whole — a malformed record, a value with a raw newline, a type Arrow converts differently,
  CSV, an event-time table — goes record by record, so each bad record gets its own reason
  in the dead-letter table.

A Kafka record becomes exactly one row or one dead letter either way.
"""

from __future__ import annotations

import os
import pickle
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from ingest.records import RecordValidator, TimeBounds
    from metastore.delta.warehouse import Warehouse
    from metastore.models import Column, Table

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# The column types Arrow's JSON reader converts exactly as the row-wise parser does, or refuses
# (then the batch goes row by row): never a different value for the same JSON.
_ARROW_JSON_TYPES = {"byte", "short", "integer", "long", "float", "double", "boolean", "string", "timestamp"}
# Arrow's JSON reader needs each record inside one block; bigger records go row by row.
_JSON_BLOCK_BYTES = 16 << 20

STAGED_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
        # epoch microseconds, not a timestamp: collect() would turn a timestamp into a naive
        # datetime in the driver's local time zone
        ("period_us", pa.int64()),
        ("source", pa.string()),
        ("position", pa.int64()),
        ("reason", pa.string()),
        ("raw", pa.binary()),
        # a staged file's columns (JSON, as StagedFile.columns) when it brings some its table lacks
        ("columns", pa.string()),
        # the fields of the task's records that the table has no column for (JSON: field → records)
        ("ignored", pa.string()),
        # a staged file's column statistics (JSON, as StagedFile.stats)
        ("stats", pa.string()),
    ]
)
"""What each task returns: its staged files (``path`` set), then its bad records (``path`` null, a
``reason``), then what its records held that the table has no column for (``ignored``, alone)."""


@dataclass(frozen=True)
class StageSpec:
    """What a task needs, in plain values (so unpickling it imports nothing of the metastore).

    ``row_wise`` is the pickle of ``(warehouse, table, time bounds)``, loaded only when a
    batch goes row by row.
    """

    chunk_id: str
    fmt: str
    location: str
    staging_template: str  # the staged file's path in the table, "\0" where the task number goes
    schema: pa.Schema  # the data files' columns
    required: tuple[bool, ...]
    max_value_bytes: int
    arrow_json: bool  # whether the Arrow path may take a batch
    row_wise: bytes
    evolving: bool = False  # whether fields the table lacks may become columns (schema evolution)
    columns: str | None = None  # JSON of the data files' columns when ``added`` ones are among them
    # fields whose names can never be columns (not an identifier, a column's name but for case): on
    # an evolving table the Arrow path counts them as ignored rather than leave the batch row-wise
    ignorable: frozenset[str] = frozenset()
    # the driver's options of the table's store when it is in a bucket (the tasks' own environment
    # may lack them): pickled with the spec, never in a command line or the query plan. A
    # ``metastore.storage.S3Options``; None for a local table, whose tasks import no metastore
    store: Any = None
    # where binary records' writer schemas come from (an ``ingest.kafka.registry.RecordSchemas``):
    # avro, protobuf, jsonschema
    schemas: Any = None
    # a keyed table's key (JSON of a ``metastore.models.Keys``): each task stages the newest
    # version of each key among its records (``ingest/keys.py``)
    keys: str | None = None


def stage_spec(
    warehouse: Warehouse,
    table: Table,
    chunk_id: str,
    fmt: str,
    max_value_bytes: int,
    bounds: TimeBounds | None,
    added: Sequence[Column] = (),
    ignorable: frozenset[str] = frozenset(),
    schemas: Any = None,
) -> StageSpec:
    """The driver builds the spec of one micro-batch (``bounds``: one clock reading for every task;
    ``added``: new columns every task parses as known ones, when a first staging's tasks inferred a
    new field's type differently)."""

    from metastore import storage
    from metastore.delta.arrow import data_schema
    from metastore.delta.layout import staging_path
    from metastore.models import Mode, SchemaEvolution

    columns = (*table.columns, *added)
    arrow_json = (
        fmt == "json"
        and table.mode is Mode.ARRIVAL
        and bounds is None
        and all(c.type in _ARROW_JSON_TYPES for c in columns)
    )
    return StageSpec(
        chunk_id=chunk_id,
        fmt=fmt,
        location=str(table.location),
        store=storage.current() if storage.is_remote(table.location) else None,  # see StageSpec
        staging_template=staging_path(f"{chunk_id}-\0", 0),
        schema=data_schema(columns),
        required=tuple(not c.nullable or c.name == table.time_column for c in columns),
        max_value_bytes=max_value_bytes,
        arrow_json=arrow_json,
        row_wise=pickle.dumps((warehouse, table, bounds, tuple(added))),
        evolving=fmt != "csv" and table.schema_evolution is not SchemaEvolution.NONE,  # named fields
        columns=columns_json(columns) if added else None,
        ignorable=ignorable,
        schemas=schemas,
        keys=None if table.keys is None else table.keys.model_dump_json(),
    )


def stage_task(spec: StageSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of one micro-batch: parse a task's records, stage its good rows."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        yield stage_records(spec, task, batches)

    return run


def stage_records(spec: StageSpec, task: int, batches: Iterator[pa.RecordBatch]) -> pa.RecordBatch:
    """Parse records (columns value, topic, partition, offset) and stage the good rows as task ``task``'s
    files; the :data:`STAGED_SCHEMA` rows of what was staged, the bad records, the ignored fields."""
    good: list[pa.Table] = []
    ignored: dict[str, int] = {}
    row_wise: _RowWise | None = None
    for batch in batches:
        fast = _arrow_json(spec, batch.column("value"), ignored) if spec.arrow_json else None
        if fast is not None:
            good.append(fast)
            continue
        if row_wise is None:
            row_wise = _RowWise(spec)
        row_wise.add(batch)
    rows: list[dict[str, Any]] = []
    if row_wise is not None:
        rows, bad = row_wise.finish(task, good, ignored)
        return pa.RecordBatch.from_pylist(rows + bad + _ignored_row(ignored), schema=STAGED_SCHEMA)
    data = pa.concat_tables(good) if good else spec.schema.empty_table()
    if spec.keys is not None and data.num_rows:
        from ingest.keys import staged_versions
        from metastore.models import Keys

        data = staged_versions(Keys.model_validate_json(spec.keys), data)
    if data.num_rows:
        path = spec.staging_template.replace("\0", f"{task:05d}")
        rows.append(
            {"path": path, "rows": data.num_rows, "bytes": _write(spec, path, data), "columns": spec.columns}
        )
    return pa.RecordBatch.from_pylist(rows + _ignored_row(ignored), schema=STAGED_SCHEMA)


def columns_json(columns: Sequence[Column]) -> str:
    """``columns`` as a staged file's row carries them (``STAGED_SCHEMA``'s ``columns``)."""
    import json

    return json.dumps([c.model_dump() for c in columns])


def _ignored_row(ignored: dict[str, int]) -> list[dict[str, Any]]:
    import json

    return [{"ignored": json.dumps(ignored)}] if ignored else []


def _write(spec: StageSpec, relative: str, data: pa.Table) -> int:
    """As :func:`metastore.delta.files.write_parquet` (the file appears whole or not at all); an I/O
    error is retried there, which raises the metastore's storage errors. A local table's file is
    written with the standard library (a temp file renamed into place): a worker staging it
    imports no metastore."""
    import pyarrow.parquet as pq

    try:
        if spec.store is not None:  # in a bucket: through the storage API, with the driver's options
            from metastore import storage

            storage.configure(spec.store)
            with storage.open_output(storage.join(spec.location, relative)) as f:
                pq.write_table(data, f, compression="snappy")
                return int(f.tell())
        target = Path(spec.location) / relative
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(data, tmp, compression="snappy")
            os.replace(tmp, target)
            return target.stat().st_size
        finally:
            tmp.unlink(missing_ok=True)
    except OSError:
        from metastore.delta.files import write_parquet

        table = pickle.loads(spec.row_wise)[1]
        return int(write_parquet(table, relative, data))


def _arrow_json(spec: StageSpec, values: pa.Array, ignored: dict[str, int]) -> pa.Table | None:
    """``values`` (JSON objects) parsed into the table's columns by Arrow, or None if the batch
    must go row by row (see the module docstring). Fields the table has no column for are counted
    into ``ignored``; on a table whose schema evolves, a batch holding one that may become a column
    (:func:`_may_become_column`) goes row by row, where its type is inferred."""
    import pyarrow.compute as pc
    import pyarrow.json as pj

    n = len(values)
    if n == 0:
        return spec.schema.empty_table()
    if values.null_count:
        return None
    # Every value starts with "{" (so none is blank: each gives at least one row) and holds no
    # line break; then n rows from n values means one row per value.
    if not pc.all(pc.starts_with(values, "{")).as_py():
        return None
    try:  # Arrow's JSON reader takes invalid UTF-8 inside strings as it is: check it first
        values.cast(pa.string(), safe=True)
    except pa.ArrowInvalid:
        return None
    if pc.any(pc.match_substring(values, "\n")).as_py() or pc.any(pc.match_substring(values, "\r")).as_py():
        return None
    lines = pc.binary_join_element_wise(values, pa.scalar(b"", pa.binary()), pa.scalar(b"\n", pa.binary()))
    size = pc.sum(pc.binary_length(lines)).as_py()
    if size > _JSON_BLOCK_BYTES and pc.max(pc.binary_length(lines)).as_py() > _JSON_BLOCK_BYTES // 2:
        return None
    if lines.offset == 0:
        body = lines.buffers()[2].slice(0, size)
    else:  # never seen: a fresh result starts at offset 0
        body = pa.py_buffer(b"".join(lines.to_pylist()))
    loose = pa.schema([f.with_nullable(True) for f in spec.schema])
    try:
        parsed = pj.read_json(
            pa.BufferReader(body),
            read_options=pj.ReadOptions(use_threads=False, block_size=_JSON_BLOCK_BYTES),
            parse_options=pj.ParseOptions(
                explicit_schema=loose, unexpected_field_behavior="infer", newlines_in_values=False
            ),
        )
    except Exception:  # any record Arrow refuses: the row-wise path names it
        return None
    if parsed.num_rows != n:
        return None
    extra = [name for name in parsed.column_names if name not in spec.schema.names]
    if spec.evolving and any(_may_become_column(spec, name, parsed.column(name).type) for name in extra):
        return None  # the row-wise path infers its type
    counts = {name: n - parsed.column(name).null_count for name in extra}
    keys = None
    if spec.keys is not None:
        from ingest.keys import ops_valid
        from metastore.models import Keys

        keys = Keys.model_validate_json(spec.keys)
    arrays = []
    for field, required in zip(spec.schema, spec.required, strict=True):
        array = parsed.column(field.name).combine_chunks()
        if array.type != field.type:
            return None
        if required and array.null_count:
            return None
        if keys is not None and field.name == keys.op_column and not ops_valid(keys, array):
            return None  # the row-wise path makes each record whose op is neither a bad record
        sized = pa.types.is_string(field.type) or pa.types.is_binary(field.type)
        if sized and n - array.null_count and pc.max(pc.binary_length(array)).as_py() > spec.max_value_bytes:
            return None
        arrays.append(array)
    for name, count in counts.items():
        if count:
            ignored[name] = ignored.get(name, 0) + count
    return pa.Table.from_arrays(arrays, schema=spec.schema)


def _may_become_column(spec: StageSpec, name: str, inferred: pa.DataType) -> bool:
    """Whether an unknown field Arrow read as ``inferred`` may become a column (evolving tables):
    not when its name never can, nor when it held only nulls or only nested values in the batch
    (the row-wise path would refuse it too, ``ingest/evolution.py``)."""
    return name not in spec.ignorable and not (pa.types.is_null(inferred) or pa.types.is_nested(inferred))


class _RowWise:
    """The row-wise path: every record checked by :class:`ingest.records.RecordValidator`."""

    def __init__(self, spec: StageSpec) -> None:
        from ingest.evolution import NewFields
        from ingest.records import RecordValidator

        self.spec = spec
        self.warehouse, self.table, bounds, added = pickle.loads(spec.row_wise)
        table = self.table
        columns = (*table.columns, *added)
        new_fields = NewFields(
            columns, table.partition_column, table.schema_evolution, table.max_new_columns, len(added)
        )
        self.v = RecordValidator(
            columns,
            [table.time_column],
            spec.max_value_bytes,
            time_bounds=bounds,
            new_fields=new_fields if spec.evolving else None,
            added=added,
            ops=table.keys,
        )
        self.bad: list[dict[str, Any]] = []
        self.decode: Callable[[bytes], Any] | None = None
        if spec.schemas is not None:
            self.decode = spec.schemas.decoder()

    def add(self, batch: pa.RecordBatch) -> None:
        from ingest.kafka.debezium import SKIPPED

        values = batch.column("value").to_pylist()
        topics = batch.column("topic").to_pylist()
        partitions = batch.column("partition").to_pylist()
        offsets = batch.column("offset").to_pylist()
        for value, topic, partition, offset in zip(values, topics, partitions, offsets, strict=True):
            reason = parse_value(self.v, self.spec.fmt, offset, value, self.decode, self.table.time_column)
            if reason is not None and reason != SKIPPED:
                self.bad.append(
                    {"source": f"{topic}/{partition}", "position": offset, "reason": reason, "raw": value}
                )

    def finish(
        self, task: int, arrow: list[pa.Table], ignored: dict[str, int]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Stage the good rows (those of the Arrow path too); returns (files, bad records). The
        fields the records held that the table has no column for are counted into ``ignored``."""

        from ingest.chunks import write_staged_files

        parsed = self.v.result()
        for name, count in parsed.ignored.items():
            ignored[name] = ignored.get(name, 0) + count
        data = parsed.good
        if arrow:  # the Arrow path's batches lack the new columns, and hold widened ones narrower
            whole = pa.concat_tables([*arrow, data], promote_options="permissive")
            data = whole.select(data.column_names).cast(data.schema)
        prefix = f"{self.spec.chunk_id}-{task:05d}"
        files = write_staged_files(self.warehouse, self.table, prefix, data, parsed.columns)
        columns = None if parsed.columns is None else columns_json(parsed.columns)
        rows = [
            {
                "path": f.path,
                "rows": f.rows,
                "bytes": f.bytes,
                "period_us": _micros(f.period),
                "columns": columns,
                "stats": f.stats,
            }
            for f in files
        ]
        return rows, self.bad


def _micros(value: datetime | None) -> int | None:
    return None if value is None else (value - EPOCH) // timedelta(microseconds=1)


def parse_value(
    v: RecordValidator,
    fmt: str,
    position: int,
    value: bytes | None,
    decode: Callable[[bytes], Any] | None = None,
    time_column: str | None = None,
) -> str | None:
    """Validate one Kafka record value into ``v``; returns the reason if it is a bad record.
    ``decode``: how a value of a binary format (Avro) becomes a record, raising ValueError if it cannot.
    ``time_column``: the table's, which a Debezium delete's key-only row is given (its change time).

    Never raises for a record, whatever it holds: an exception here would fail the batch, and
    every restart would replay the same offsets into the same exception, stopping the stream.
    """
    from ingest.records import unexpected

    try:
        return _parse_value(v, fmt, position, value, decode, time_column)
    except Exception as exc:
        if getattr(exc, "fails_batch", False):  # a registry outage: no record's fault, replayed later
            raise
        return unexpected(exc)


def json_value(value: bytes) -> Any:
    """A Kafka value's JSON; ValueError naming the fault (invalid UTF-8 or JSON, and where)."""
    import json

    from ingest.formats import loads_json

    try:
        return loads_json(value)
    except UnicodeDecodeError as exc:
        raise ValueError(f"invalid UTF-8 at byte {exc.start + 1}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} at column {exc.colno}") from None


_FORMAT_NAMES = {"avro": "Avro", "protobuf": "Protobuf", "jsonschema": "JSON Schema record"}


def _parse_value(
    v: RecordValidator,
    fmt: str,
    position: int,
    value: bytes | None,
    decode: Callable[[bytes], Any] | None,
    time_column: str | None,
) -> str | None:
    import csv

    from ingest.formats import csv_reader
    from ingest.kafka.debezium import SKIPPED, NotAChange, change_record

    if value is None:
        return SKIPPED if fmt == "debezium" else "record value is null (a tombstone?)"
    record: Any
    if fmt == "debezium":  # a change event: JSON, or Avro through the registry (``decode``)
        try:
            event = decode(value) if decode is not None else json_value(value)
        except ValueError as exc:
            return f"invalid change event: {exc}"
        if v.ops is None:
            return "the table has no op column: --format debezium needs a keyed table with --op-column"
        try:
            record = change_record(event, v.ops, time_column)
        except NotAChange as exc:
            return str(exc)
        if record is None:
            return SKIPPED
    elif fmt == "json":
        try:
            record = json_value(value)
        except ValueError as exc:
            return str(exc)
    elif decode is not None:
        try:
            record = decode(value)
        except ValueError as exc:
            return f"invalid {_FORMAT_NAMES.get(fmt, fmt)}: {exc}"
    else:
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"invalid UTF-8 at byte {exc.start + 1}"
        try:
            rows = list(csv_reader(text.rstrip("\r\n")))
        except csv.Error as exc:
            return f"not a CSV record: {exc}"
        if len(rows) > 1:
            return f"{len(rows)} CSV records in one Kafka record (a line break outside quotes)"
        fields = rows[0] if rows else []
        names = [c.name for c in v.columns]
        if len(fields) != len(names):
            return f"expected {len(names)} CSV fields ({', '.join(names)}), got {len(fields)}"
        record = dict(zip(names, fields, strict=True))
    before = len(v.bad)
    v.add(position, record, "", empty_is_null=(fmt == "csv"))  # the raw bytes go to the dead letter
    if len(v.bad) > before:
        return v.bad.pop().reason
    return None
