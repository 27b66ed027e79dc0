"""A primary key declared on a table that exists and is empty (``table alter --primary-key``): the
table is keyed from then on, its log says NOT NULL to other engines, and no chunk written for the
table as it was before lands after the key (invariant: every row of a keyed table is a version of
its key, tagged with its arrival)."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.delta.arrivals import arrivals
from metastore.delta.files import disk_path
from metastore.errors import ConflictError, TableChangedError, UserInputError
from metastore.models import ChunkState, Keys, LateDataPolicy, Mode
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.test_keyed import SCHEMA, T0, Truth, jsonl, read_now, shown

KEYS = Keys(columns=("id",), op_column="op")


def versions(ids: list[int], v: int, op: str = "u") -> list[dict[str, object]]:
    return [{"id": i, "ts": T0.isoformat(), "v": v, "op": op, "lsn": v} for i in ids]


def test_a_key_declared_on_an_empty_table_keeps_one_row_per_key_and_the_log_says_not_null(catalog) -> None:
    table = make_table(catalog, "ns.kv", schema=SCHEMA, max_future="3650d")
    old_writer = ChunkWriter(catalog, table)  # read the table before the key
    declared = catalog.keys.declare("ns.kv", KEYS)
    assert declared.keys == KEYS and not next(c for c in declared.columns if c.name == "id").nullable
    fields = {f.name: f.nullable for f in DeltaTable(table.location).schema().fields}
    assert fields["id"] is False and fields["v"] is True  # other engines see the key NOT NULL
    assert catalog.keys.declare("ns.kv", KEYS).keys == KEYS  # the same again: nothing more

    # the writer that read the table before: its chunk is refused and aborted, nothing lands
    version = int(DeltaTable(table.location).version())
    with pytest.raises(TableChangedError, match="before its table was given a primary key"):
        old_writer.write(jsonl(versions([1, 1, 2], 1)), Format.JSONL)
    assert int(DeltaTable(table.location).version()) == version
    [aborted] = catalog.store.list_chunks(table.id)
    assert aborted.state is ChunkState.ABORTED and "primary key" in (aborted.error or "")
    # ... and it read the table again: its next chunk is keyed
    truth = Truth(False)
    for chunk in (versions([1, 1, 2], 1), versions([2, 3], 2), versions([1], 3, "d")):
        old_writer.write(jsonl(chunk), Format.JSONL)
        truth.apply(chunk)
    table = catalog.table("ns.kv")
    assert read_now(catalog, table) == truth.live() == {2: (2, "u"), 3: (2, "u")}
    dt = DeltaTable(table.location)
    tagged = arrivals(table, int(dt.version()))
    paths = dt.get_add_actions(flatten=True).column("path").to_pylist()
    assert paths and all(disk_path(p) in tagged for p in paths)  # every chunk since: a keyed commit
    Roller(catalog).roll_table(table, force=True)
    assert shown(DeltaTable(table.location).to_pyarrow_table().to_pylist()) == truth.live()
    with pytest.raises(UserInputError, match="a key cannot be changed"):
        catalog.keys.declare("ns.kv", Keys(columns=("v",)))


def test_a_key_is_refused_on_a_table_with_rows_or_a_chunk_in_flight(catalog) -> None:
    table = make_table(catalog, "ns.full", schema=SCHEMA, max_future="3650d")
    ChunkWriter(catalog, table).write(jsonl(versions([1], 1)), Format.JSONL)
    with pytest.raises(UserInputError, match="holds rows: a primary key is declared only on an empty table"):
        catalog.keys.declare("ns.full", KEYS)
    empty = make_table(catalog, "ns.busy", schema=SCHEMA, max_future="3650d")
    writer = ChunkWriter(catalog, empty)
    chunk = writer.reserve()
    writer.stage(chunk, jsonl(versions([1, 1], 1)), Format.JSONL)
    with pytest.raises(ConflictError, match=f"chunk {chunk.id} is reserved"):
        catalog.keys.declare("ns.busy", KEYS)
    writer.abort(chunk.id)
    assert catalog.keys.declare("ns.busy", KEYS).keys == KEYS  # once it is no longer in flight
    assert catalog.table("ns.full").keys is None
    with pytest.raises(UserInputError, match="'nope' is not a column"):
        catalog.keys.declare("ns.full", Keys(columns=("nope",)))


def test_a_late_data_companion_is_keyed_with_its_table(catalog) -> None:
    table = make_table(
        catalog,
        "ns.ev",
        schema=SCHEMA,
        mode=Mode.EVENT_TIME,
        late_data=LateDataPolicy.DIVERT,
        max_future="3650d",
    )
    catalog.keys.declare(table, KEYS)
    assert catalog.table("ns.ev__late").keys == KEYS
    with pytest.raises(UserInputError, match="companion table: declare the key of its main table"):
        catalog.keys.declare("ns.ev__late", KEYS)
