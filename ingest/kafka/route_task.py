"""The executors' side of a many-table batch: one task's records split by table, each part staged.

:func:`route_task` builds the ``mapInArrow`` function of one pass over a micro-batch. Each task
finds each record's table (:class:`~ingest.kafka.routes.Routes`) and hands each table's records to
:func:`ingest.kafka.staging.stage_records`, with that table's :class:`StageSpec`. A task reads one
topic-partition, so when its route names the table by topic alone its records stream through as
they come; a route that reads a field (``table_field``) splits every batch by table first.

Each row a task returns (:data:`ROUTED_SCHEMA`) is a staging row of a table (``table`` set: a
staged file, a bad record for the table's dead letters, its ignored fields), or a record the
driver handles itself: ``pending`` (its table has no spec in this pass: a table this job had not
seen yet; the driver stages it) or a dead letter of the job (``table`` null: unrouted, or its table
refused). Like :mod:`ingest.kafka.staging`, this imports only the standard library and pyarrow (and, in
a task that reads its range itself, the reader of the Kafka source).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ingest.kafka.routes import Routes, field_values
from ingest.kafka.staging import STAGED_SCHEMA, stage_records

if TYPE_CHECKING:
    from ingest.kafka.options import KafkaSourceOptions
    from ingest.kafka.staging import StageSpec

RECORD_COLUMNS = ("value", "topic", "partition", "offset")
"""The columns of a record a pass reads."""

ROUTED_SCHEMA = STAGED_SCHEMA.append(pa.field("table", pa.string())).append(pa.field("pending", pa.bool_()))
"""A task's rows: :data:`~ingest.kafka.staging.STAGED_SCHEMA` with the table each belongs to (null:
the job's dead letters) and whether it is a record left for the driver (``pending``)."""


@dataclass(frozen=True)
class RoutedSpec:
    """One pass over a micro-batch: how records find their table, and what happens to each table's.

        ``specs``: the tables staged in this pass. ``skip``: tables whose records this pass leaves alone
        (committed by an earlier attempt, or staged by an earlier pass). ``refused``: tables whose
        records go to the job's dead letters, with the reason. Any other table's records come back
        ``pending``, and so do the records no table takes, when ``others`` is set (the first pass; a later
    pass stages its ``specs`` again, or dead-letters its ``refused``, and leaves every other record alone).
    """

    routes: Routes
    specs: Mapping[str, StageSpec] = field(default_factory=dict)
    skip: frozenset[str] = frozenset()
    refused: Mapping[str, str] = field(default_factory=dict)
    others: bool = True
    source: KafkaSourceOptions | None = None


def route_task(spec: RoutedSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of one pass (input columns value, topic, partition, offset; or, with
    ``spec.source``, a range's topic, partition, start and end)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if spec.source is not None:
            batches = _records(batches, spec.source)
        yield from _route(spec, ctx.partitionId() if ctx is not None else 0, batches)

    return run


def _records(ranges: Iterator[pa.RecordBatch], source: KafkaSourceOptions) -> Iterator[pa.RecordBatch]:
    from ingest.kafka.reader import read_ranges  # (Spark's types: only where a range is read)

    for batch in read_ranges(ranges, source):
        yield batch.select(list(RECORD_COLUMNS))


def _route(spec: RoutedSpec, task: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    parts: dict[str, list[pa.RecordBatch]] = {}
    own: list[pa.RecordBatch] = []  # rows for the driver: pending records, the job's dead letters
    streaming: tuple[str, Iterator[pa.RecordBatch]] | None = None
    for batch in batches:
        if not batch.num_rows:
            continue
        for name, part in _split(spec, batch, own):
            if not spec.routes.fields() and not parts and streaming is None:
                # one topic per task, its table named by topic: stream the task's batches through
                streaming = (name, _chain(part, batches, spec, own))
                break
            parts.setdefault(name, []).append(part)
        if streaming is not None:
            break
    if streaming is not None:
        name, stream = streaming
        yield _tagged(stage_records(spec.specs[name], task, stream), name)
    for name, chunks in parts.items():
        yield _tagged(stage_records(spec.specs[name], task, iter(chunks)), name)
    yield from own


def _chain(
    first: pa.RecordBatch, rest: Iterator[pa.RecordBatch], spec: RoutedSpec, own: list[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    yield first
    for batch in rest:
        for _, part in _split(spec, batch, own):  # the same topic, so the same table
            yield part


def _split(
    spec: RoutedSpec, batch: pa.RecordBatch, own: list[pa.RecordBatch]
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """``batch``'s records of tables staged in this pass, by table; the others go to ``own``."""
    topics = batch.column("topic")
    distinct = pc.unique(topics).to_pylist()
    for topic in distinct:
        part = batch if len(distinct) == 1 else batch.filter(pc.equal(topics, topic))
        route = spec.routes.route_of(topic)
        if route is None or not route.table_field:
            name, reason = spec.routes.resolve(topic)
            yield from _place(spec, part, name, reason, own)
            continue
        values = field_values(part.column("value").to_pylist(), route.table_field)
        by_table: dict[tuple[str | None, str | None], list[int]] = {}
        for i, value in enumerate(values):
            by_table.setdefault(spec.routes.resolve(topic, value), []).append(i)
        for (name, reason), rows in by_table.items():
            yield from _place(spec, part.take(pa.array(rows, pa.int64())), name, reason, own)


def _place(
    spec: RoutedSpec,
    part: pa.RecordBatch,
    name: str | None,
    reason: str | None,
    own: list[pa.RecordBatch],
) -> Iterator[tuple[str, pa.RecordBatch]]:
    if name is not None and name in spec.specs:
        yield name, part
    elif name is not None and name in spec.refused:
        own.append(records_for_driver(part, None, f"table {name}: {spec.refused[name]}"))
    elif spec.others and (name is None or name not in spec.skip):
        own.append(records_for_driver(part, name if reason is None else None, reason))


def records_for_driver(part: pa.RecordBatch, table: str | None, reason: str | None) -> pa.RecordBatch:
    """``part``'s records as rows the driver takes: pending for ``table``, or the job's dead letters."""
    n = part.num_rows
    sources = pc.binary_join_element_wise(
        part.column("topic"), pc.cast(part.column("partition"), pa.string()), "/"
    )
    columns = {
        "source": sources,
        "position": part.column("offset"),
        "reason": pa.array([reason] * n, pa.string()),
        "raw": part.column("value"),
        "table": pa.array([table] * n, pa.string()),
        "pending": pa.array([table is not None] * n, pa.bool_()),
    }
    arrays = [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in ROUTED_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=ROUTED_SCHEMA)


def _tagged(staged: pa.RecordBatch, table: str) -> pa.RecordBatch:
    n = staged.num_rows
    return pa.RecordBatch.from_arrays(
        [*staged.columns, pa.array([table] * n, pa.string()), pa.array([False] * n, pa.bool_())],
        schema=ROUTED_SCHEMA,
    )
