"""The catalog's primary keys (``catalog.keys``): declaring one on a table that exists and is empty.

A table made with ``--primary-key`` is keyed from its first commit. One made without may be given a
key while it holds no row (``table alter --primary-key``, ``PATCH``), in two steps:

1. **Record** the key and the key columns' NOT NULL in the metastore (``declare_keys``), under the
   namespace's exclusive lock, only while no chunk of the table is in flight and none committed
   since the table was found empty. From then on every writer that read the table before is refused
   at its chunk's commit (``fence_commit``: the chunk is aborted, the writer reads the table
   again), so no row written without the key lands after it.
2. **Commit** the NOT NULL to the Delta log (a ``metaData``-only version), so other engines see it.
   A process that died between 1 and 2 left a log more permissive than the data: running the same
   declaration again finishes it (and until then ``streampart check`` names nothing wrong: every
   row the log holds satisfies both).

A key is never changed or dropped once declared: a table keyed otherwise is a new table (its rows'
versions were resolved by the old key).
"""

from __future__ import annotations

import json

from metastore.catalog.routing import Routing
from metastore.delta.files import live_files
from metastore.delta.metadata import current_metadata, metadata_action
from metastore.errors import ConflictError, UserInputError
from metastore.models import Keys, Table, TableKind, TableName, check_keys

# How many times the log's NOT NULL is committed again after a concurrent seal (a roll) or append
# took its version.
MAX_RETRIES = 10


class KeyDeclarations:
    """Primary keys of a catalog's tables (reached as ``catalog.keys``)."""

    def __init__(self, routing: Routing) -> None:
        self._routing = routing

    def declare(self, name: Table | TableName | str, keys: Keys) -> Table:
        """Give the empty table ``name`` the primary key ``keys`` (and its ``__late`` companion, which
        has its columns); the table as it is now. Declaring the key it has already finishes a
        declaration a crash interrupted, and changes nothing else.

        Raises:
            UserInputError: a companion table, a key that does not fit the columns, a table with
                rows, one keyed otherwise already, or one whose log has Delta table features.
            ConflictError: a chunk is in flight, or rows came while it was declared (run it again).
        """
        table = self._table(name)
        if table.kind is not TableKind.MAIN:
            raise UserInputError(
                f"{table.name} is a {table.kind.value} companion table: declare the key of its main table"
            )
        late = self._routing.home(table).store.find_table(table.companion(TableKind.LATE))
        if late is not None:
            self._declare_one(late, keys)
        return self._declare_one(table, keys)

    def _table(self, name: Table | TableName | str) -> Table:
        parsed = (
            name.name if isinstance(name, Table) else TableName.parse(name) if isinstance(name, str) else name
        )
        return self._routing.home(parsed).store.get_table(parsed)

    def _declare_one(self, table: Table, keys: Keys) -> Table:
        store = self._routing.home(table, write=True).store
        if keys.history:
            raise UserInputError(
                "--history adds two columns to the table: give it when making the table (table create "
                "--primary-key … --sequence-by … --history)"
            )
        columns = check_keys(keys, table.columns, table.time_column)
        if table.keys is not None:
            if table.keys != keys:
                raise UserInputError(
                    f"{table.name} has a primary key already ({table.keys.describe()}); a key cannot be "
                    "changed: make a new table with the key you want and copy the rows into it"
                )
        else:
            warehouse = self._routing.warehouse
            if not warehouse.takes_plain_appends(table):
                raise UserInputError(
                    f"{table.name}'s Delta log has table features, which keyed commits cannot carry: "
                    "declare the key when making the table"
                )
            seen = store.newest_version(table.id)
            if live_files(warehouse.load(table)):
                raise UserInputError(
                    f"{table.name} holds rows: a primary key is declared only on an empty table (or "
                    "when making it: table create --primary-key); make a new keyed table and copy "
                    "the rows into it"
                )
            table = store.declare_keys(table.id, keys, columns, seen)
        self._commit_not_null(table)
        return table

    def _commit_not_null(self, table: Table) -> None:
        """Step 2: the log's columns as the metastore's (key columns NOT NULL), if not so already."""
        warehouse = self._routing.warehouse
        required = {c.name for c in table.columns if not c.nullable}
        for _ in range(MAX_RETRIES):
            dt = warehouse.load(table)
            version = int(dt.version())
            current = current_metadata(table.location, version)
            fields = json.loads(current["schemaString"])["fields"]
            if all(not f["nullable"] for f in fields if f["name"] in required):
                return
            action = metadata_action(current, table.columns, table.partition_column)
            try:
                warehouse.commit_schema(table, version, action, (), (), f"keys/{table.uid}")
                return
            except ConflictError:
                continue  # a seal or an append took the version: read the log again
        raise ConflictError(
            f"the primary key of {table.name} is recorded, but its NOT NULL lost {MAX_RETRIES} races "
            "for the Delta log in a row: run the same declaration again to finish it"
        )
