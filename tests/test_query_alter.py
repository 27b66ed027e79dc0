"""``ALTER TABLE`` in ``streampart query`` (issue 27, plan step 4): Spark's syntax for adding and widening
columns runs through ``catalog.schemas`` without Spark (these tests carry no ``spark`` marker: a process
of theirs that started Spark would fail, tests/markers.py); renames and drops are refused with the
reason, and so is every other change; a refusal changes nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from deltalake import DeltaTable

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.delta.metadata import schema_at
from metastore.errors import UserInputError
from streampart.errors import QueryRefusedError
from streampart.query_alter import parse_alter
from tests.fixtures import make_table
from tests.test_table_alter import SCHEMA, cli, rows

pytestmark = pytest.mark.process  # the CLI runs in processes of its own


def test_alter_table_in_query_adds_and_widens_and_a_read_shows_the_columns(catalog: Catalog) -> None:
    table = make_table(catalog, schema=SCHEMA)
    ChunkWriter(catalog, table).write(rows(range(3)), Format.JSONL)
    added = cli(catalog, "query", "ALTER TABLE ns.events ADD COLUMNS (coupon STRING, n INT)")
    assert added.returncode == 0, added.stderr
    assert "ns.events: add coupon STRING, add n INT (Delta version 2)" in added.stdout
    widened = cli(catalog, "query", "USE ns; ALTER TABLE events ALTER COLUMN qty TYPE BIGINT", "--json")
    assert widened.returncode == 0, widened.stderr
    assert json.loads(widened.stdout)["schema_change"]["change"] == "widen qty INT to BIGINT"
    changed = cli(catalog, "query", "ALTER TABLE ns.events CHANGE COLUMN n n BIGINT", "--key", "k1")
    assert changed.returncode == 0, changed.stderr

    table = catalog.table("ns.events")
    assert table.columns == schema_at(Path(table.location))
    assert [(c.name, c.type) for c in table.columns][-3:] == [
        ("qty", "long"),
        ("coupon", "string"),
        ("n", "long"),
    ]
    changes = catalog.home(table).store.schema_changes(table.id)
    assert sorted((c.source, c.version) for c in changes) == [("sql", 2), ("sql", 3), ("sql", 4)]
    assert "k1" in {c.key for c in changes}
    ChunkWriter(catalog, table).write(rows(range(3, 4), coupon="SAVE", qty=2**40), Format.JSONL)
    got = DeltaTable(table.location).to_pyarrow_table().sort_by("id").to_pylist()
    assert [(r["coupon"], r["n"], r["qty"]) for r in got] == [
        (None, None, 0), (None, None, 1), (None, None, 2), ("SAVE", None, 2**40)
    ]  # fmt: skip
    read = cli(catalog, "table", "read", "ns.events", "--json")
    assert read.returncode == 0, read.stderr
    read_rows = sorted((json.loads(line) for line in read.stdout.splitlines()), key=lambda r: r["id"])
    assert [(r["coupon"], r["qty"]) for r in read_rows] == [(None, 0), (None, 1), (None, 2), ("SAVE", 2**40)]


# Each statement streampart query refuses, and what its one-line error says.
REFUSED = [
    (
        "ALTER TABLE ns.events RENAME COLUMN msg TO text",
        "RENAME COLUMN: columns are never renamed or dropped",
    ),
    ("ALTER TABLE ns.events DROP COLUMN msg", "DROP COLUMN: columns are never renamed or dropped"),
    ("ALTER TABLE ns.events REPLACE COLUMNS (id BIGINT)", "REPLACE COLUMNS: columns are never renamed"),
    ("ALTER TABLE ns.events CHANGE COLUMN qty amount BIGINT", "CHANGE COLUMN qty amount: columns are never"),
    ("ALTER TABLE ns.events ALTER COLUMN qty SET NOT NULL", "only a type change that widens the column"),
    ("ALTER TABLE ns.events SET TBLPROPERTIES ('a' = 'b')", "other changes of a table are made with"),
    ("ALTER TABLE ns.events RENAME TO ns.other", "other changes of a table are made with"),
]


@pytest.mark.parametrize(("sql", "error"), REFUSED)
def test_a_statement_other_than_add_or_widen_is_refused_with_the_reason(sql: str, error: str) -> None:
    with pytest.raises(QueryRefusedError, match=re.escape(error)):
        parse_alter(sql)


def test_the_column_mapping_reason_is_given_for_a_drop() -> None:
    with pytest.raises(QueryRefusedError, match=r"Delta column mapping.*plain Parquet readers"):
        parse_alter("ALTER TABLE ns.events DROP COLUMN msg")


def test_a_column_without_a_type_does_not_parse() -> None:
    with pytest.raises(UserInputError):
        parse_alter("ALTER TABLE ns.events ADD COLUMNS (coupon)")


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("ALTER TABLE ns.events DROP COLUMN msg", "error: DROP COLUMN: columns are never renamed or dropped"),
        ("ALTER TABLE ns.events ALTER COLUMN qty TYPE SMALLINT", "SMALLINT is narrower than INT"),
        ("ALTER TABLE events ADD COLUMNS (c STRING)", "name the table NAMESPACE.TABLE"),
    ],
)
def test_a_refused_alter_by_cli_is_one_line_and_changes_nothing(
    catalog: Catalog, sql: str, error: str
) -> None:
    table = make_table(catalog, schema=SCHEMA)
    version = int(DeltaTable(table.location).version())
    done = cli(catalog, "query", sql)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and error in lines[0], done.stderr
    assert int(DeltaTable(table.location).version()) == version
    assert catalog.table("ns.events").columns == table.columns
    assert catalog.home(table).store.schema_changes(table.id) == []


def test_an_alter_run_again_under_its_key_lands_once(catalog: Catalog) -> None:
    table = make_table(catalog, schema=SCHEMA)
    statement = "ALTER TABLE ns.events ADD COLUMNS (coupon STRING)"
    first = cli(catalog, "query", statement, "--key", "add-coupon", "--json")
    again = cli(catalog, "query", statement, "--key", "add-coupon", "--json")
    assert first.returncode == 0 and again.returncode == 0, (first.stderr, again.stderr)
    assert json.loads(first.stdout)["schema_change"] == json.loads(again.stdout)["schema_change"]
    assert int(DeltaTable(table.location).version()) == 1
    assert len(catalog.home(table).store.schema_changes(table.id)) == 1
