"""The predicate of ``streampart delete --where`` (ingest/deletes/predicate.py), without Spark or a metastore.

What it proves: each accepted text selects exactly the rows DuckDB's WHERE selects over the same Arrow
table (a reader nobody here wrote: SQL's NULL logic, IN, BETWEEN, timestamps in UTC), both through
``pa.Table.filter`` and through ``pyarrow.dataset`` over a Parquet file; ``matches`` and ``keeps``
split the rows exactly, a row whose condition is NULL being kept; every text outside the subset is
refused with a UserInputError naming what is wrong (no traceback text, one line); a condition that
names no column is refused (matching every row: unless ``allow_all``; matching none: always); and
``partition_may_match`` never says False for the values of a row the predicate deletes, and is exact
when every column the predicate names has a value.
"""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from ingest.deletes.predicate import Predicate, parse_predicate
from metastore.delta.arrow import data_schema
from metastore.errors import UserInputError
from metastore.models import parse_schema

COLUMNS = parse_schema(
    "id BIGINT, name STRING, ts TIMESTAMP, day DATE, score DOUBLE, ok BOOLEAN, amount DECIMAL(10,2), n INT"
)


def _ts(day: int, hour: int) -> datetime:
    return datetime(2026, 1, day, hour, tzinfo=UTC)


# (id, name, ts, day, score, ok, amount, n): NULLs in every column but id, in several rows
ROWS: list[tuple[Any, ...]] = [
    (1, "a", _ts(1, 0), date(2026, 1, 1), 0.5, True, Decimal("1.50"), 1),
    (2, "b", _ts(1, 10), date(2026, 1, 1), 1.5, False, Decimal("2.25"), 2),
    (3, "c", _ts(1, 12), date(2026, 1, 2), 3.0, None, Decimal("0.00"), None),
    (4, None, _ts(2, 0), date(2026, 1, 2), None, True, None, 4),
    (5, "bb", None, date(2026, 1, 3), 3.25, False, Decimal("-1.00"), 5),
    (6, "x", _ts(3, 23), None, -1.0, None, Decimal("99.99"), 6),
    (7, "B", _ts(2, 12), date(2026, 1, 3), 1.5, True, Decimal("2.25"), None),
    (8, None, None, None, None, None, None, None),
    (9, "abc", _ts(1, 9), date(2026, 1, 1), 7.0, False, Decimal("1.50"), 9),
    (10, "a b", _ts(4, 0), date(2026, 1, 4), 2.0, True, Decimal("10.00"), 10),
    (11, "c", _ts(1, 11), date(2026, 1, 2), None, False, Decimal("0.01"), 11),
    (12, "", _ts(5, 6), date(2026, 1, 5), 0.0, None, None, 12),
]
TABLE = pa.Table.from_pylist([dict(zip(data_schema(COLUMNS).names, r, strict=True)) for r in ROWS],
                             schema=data_schema(COLUMNS))  # fmt: skip

# (text, DuckDB's spelling when it differs): each selects rows DuckDB's WHERE selects
ACCEPTED: list[tuple[str, str | None]] = [
    ("id = 3", None),
    ("id <> 3", None),
    ("id != 3", None),
    ("n <> 4", None),  # NULL n: kept, not deleted
    ("id < 5 AND name = 'b'", None),
    ("name IN ('a', 'c')", None),
    ("name NOT IN ('a', 'c')", None),  # NULL name: kept
    ("NOT (n IN (1, 2))", None),
    ("id BETWEEN 2 AND 6", None),
    ("n NOT BETWEEN 2 AND 6", None),
    ("name IS NULL", None),
    ("name IS NOT NULL", None),
    ("NOT (n = 1 OR name <> 'x')", None),
    ("ts < TIMESTAMP '2026-01-01 12:00:00'", None),
    ("ts >= TIMESTAMP '2026-01-01 12:00:00+02:00'", "ts >= TIMESTAMPTZ '2026-01-01 12:00:00+02:00'"),
    ("ts >= '2026-01-01T12:00:00+02:00'", None),
    ("ts = '2026-01-01 10:00:00'", None),
    ("ts < DATE '2026-01-02'", None),
    ("NOT (ts BETWEEN TIMESTAMP '2026-01-01 10:00:00' AND '2026-01-02 00:00:00')", None),
    ("day = DATE '2026-01-02'", None),
    ("day >= '2026-01-03'", None),
    ("day IN ('2026-01-01', DATE '2026-01-05')", "day IN (DATE '2026-01-01', DATE '2026-01-05')"),
    ("score > 1.5", None),
    ("score <= 2", None),
    ("score = 1.5E0", "score = 1.5"),
    ("-1 = score OR score < -0.5", None),
    ("ok = TRUE", None),
    ("ok", None),
    ("NOT ok", None),
    ("ok = FALSE OR ok IS NULL", None),
    ("amount = 1.50", None),
    ("amount > '2.25'", "amount > 2.25"),
    ("amount IN (1.5, 2.25, 10)", None),
    ("amount BETWEEN -1 AND 0.01", None),
    ("id = '3'", "id = 3"),
    ("n IN (1, 2, 3) AND (score IS NULL OR score < 3)", None),
    ("`id` = 3 OR ID = 4 OR Name = 'x'", "id = 3 OR id = 4 OR name = 'x'"),
    ("id = score", None),
    ("n >= id", None),
    ("(id = 1 OR id = 2) AND NOT name IS NULL", None),
    ("ts IS NULL OR day IS NULL", None),
    ("id = 3 -- a comment", None),
    ("id = 1;", "id = 1"),
]


def _expected(text: str) -> list[int]:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("t", TABLE)
    return sorted(r[0] for r in con.sql(f"SELECT id FROM t WHERE {text}").fetchall())


def _ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


@pytest.mark.parametrize(("text", "duck"), ACCEPTED, ids=[t for t, _ in ACCEPTED])
def test_an_accepted_text_deletes_exactly_the_rows_duckdb_selects(text: str, duck: str | None) -> None:
    predicate = parse_predicate(text, COLUMNS)
    deleted = _ids(TABLE.filter(predicate.matches))
    assert deleted == _expected(duck or text)
    assert 0 < len(deleted) < TABLE.num_rows, "a case that tells nothing apart"


@pytest.mark.parametrize(("text", "duck"), ACCEPTED, ids=[t for t, _ in ACCEPTED])
def test_matches_and_keeps_split_the_rows_exactly(text: str, duck: str | None) -> None:
    predicate = parse_predicate(text, COLUMNS)
    deleted, kept = _ids(TABLE.filter(predicate.matches)), _ids(TABLE.filter(predicate.keeps))
    assert sorted(deleted + kept) == list(range(1, 13)) and not set(deleted) & set(kept)
    flags = ds.dataset(TABLE).to_table(columns={"m": predicate.matches, "k": predicate.keeps})
    assert flags.column("m").null_count == 0 and flags.column("k").null_count == 0


def test_a_parquet_file_read_through_pyarrow_dataset_is_split_the_same_way(tmp_path: Path) -> None:
    pq.write_table(TABLE, tmp_path / "part-0.parquet")
    text = "(name IN ('a', 'c') OR ts < '2026-01-01 10:00:00') AND ok"
    predicate = parse_predicate(text, COLUMNS)
    files = ds.dataset(tmp_path, format="parquet")
    assert _ids(files.to_table(filter=predicate.matches)) == _expected(text)
    assert _ids(files.to_table(filter=predicate.keeps)) == sorted(set(range(1, 13)) - set(_expected(text)))


def test_a_predicate_keeps_the_text_sqlglot_s_rendering_and_the_columns_as_the_table_spells_them() -> None:
    predicate = parse_predicate("ID = 3 AND `Name` <> 'x' -- why", COLUMNS)
    assert predicate.text == "ID = 3 AND `Name` <> 'x' -- why"
    assert predicate.sql == "ID = 3 AND `Name` <> 'x'"
    assert predicate.columns == frozenset({"id", "name"})
    timestamp = parse_predicate("ts < TIMESTAMP '2026-01-01 00:00:00'", COLUMNS)
    assert timestamp.sql == "ts < CAST('2026-01-01 00:00:00' AS TIMESTAMP)"


def test_a_timestamp_with_an_offset_is_converted_to_utc_and_one_without_is_utc() -> None:
    with_offset = parse_predicate("ts = TIMESTAMP '2026-01-01 12:00:00+02:00'", COLUMNS)
    without = parse_predicate("ts = '2026-01-01 10:00:00'", COLUMNS)
    assert _ids(TABLE.filter(with_offset.matches)) == _ids(TABLE.filter(without.matches)) == [2]


# (text, fragments the message holds): each refused with a UserInputError, nothing else happening
REFUSED: list[tuple[str, list[str]]] = [
    ("", ["empty"]),
    ("   ", ["empty"]),
    (";", ["empty"]),
    ("id = 1; id = 2", ["one condition", "2 statements"]),
    ("id = = 1", ["not valid SQL", "line 1, column 6"]),
    ("id = 'x", ["not valid SQL"]),
    ("nope = 1", ["no column 'nope'", "id, name, ts, day, score, ok, amount, n"]),
    ("id = 'abc'", ["'abc'", "column 'id' (BIGINT)", "not a number"]),
    ("id = 1.5", ["1.5", "column 'id'", "not a whole number"]),
    ("n = 99999999999", ["column 'n' (INT)", "does not fit INT"]),
    ("amount = 1.005", ["1.005", "does not fit DECIMAL(10,2)"]),
    ("name = 1", ["column 'name' (STRING)", "it is a number"]),
    ("ok = 1", ["column 'ok' (BOOLEAN)"]),
    ("day = TIMESTAMP '2026-01-01 00:00:00'", ["column 'day' (DATE)", "it is a timestamp"]),
    ("ts < TIMESTAMP 'yesterday'", ["'yesterday' is not a timestamp"]),
    ("ts < 'yesterday'", ["column 'ts'", "'yesterday' is not a timestamp"]),
    ("ts = '2026-01-01 00:00:00.1234567'", ["finer than microseconds"]),
    ("day = '2026-01-01 10:00'", ["not a date"]),
    ("upper(name) = 'A'", ["UPPER", "not supported", "IS [NOT] NULL"]),
    ("f(id) = 1", ["function F"]),
    ("id + 1 = 2", ["arithmetic"]),
    ("id = (SELECT 1)", ["subquery"]),
    ("id IN (SELECT 1)", ["subquery"]),
    ("EXISTS (SELECT 1)", ["EXISTS"]),
    ("CASE WHEN ok THEN 1 END = 1", ["CASE"]),
    ("CAST(id AS INT) = 1", ["CAST"]),
    ("id <=> 1", ["<=>"]),
    ("id IS DISTINCT FROM 1", ["not supported"]),
    ("id BETWEEN SYMMETRIC 6 AND 2", ["BETWEEN", "not supported"]),
    ("id = ANY (1)", ["ANY", "not supported"]),
    ("ok IS TRUE", ["IS other than IS [NOT] NULL"]),
    ("name = 'it''s'", ["adjacent strings"]),
    ("name LIKE 'b%'", ["LIKE is not supported"]),
    ("name NOT LIKE 'b%'", ["LIKE is not supported"]),
    ("name ILIKE 'b%'", ["ILIKE is not supported"]),
    ("name LIKE 'a!%' ESCAPE '!'", ["ESCAPE is not supported"]),
    ("SELECT 1", ["SELECT", "not supported"]),
    ("DELETE FROM t WHERE id = 1", ["DELETE", "not supported"]),
    ("id = ?", ["not supported"]),
    ("id = NULL", ["never true", "IS [NOT] NULL"]),
    ("NULL <> id", ["never true", "IS [NOT] NULL"]),
    ("id IN (1, NULL)", ["NULL"]),
    ("id IN (1, n)", ["literals"]),
    ("t.id = 1", ["no column 't.id'"]),
    ("id", ["BIGINT column is not a condition"]),
    ("id = 1 OR TRUE", ["names no column"]),
    ("id = 1 OR 1 = 1", ["names no column"]),
    ("1 = 1", ["matches every row", "--all"]),
    ("TRUE", ["matches every row", "--all"]),
    ("1 = 0", ["matches no row"]),
    ("FALSE", ["matches no row"]),
    ("NULL = 1", ["names no column"]),
    ("upper('a') = 'A'", ["names no column"]),
    ("1 + 1 = 2", ["matches every row"]),  # sqlglot folds a condition that names no column
    ("day < ts", ["DATE column cannot be compared with a TIMESTAMP column"]),
    ("name = id", ["STRING column cannot be compared with a BIGINT column"]),
    ("1 IN (1, 2) OR id = 1", ["must test a column"]),
    ("(" * 2000 + "id = 1" + ")" * 2000, ["nested too deeply"]),
]


@pytest.mark.parametrize(("text", "fragments"), REFUSED, ids=[t[:40] for t, _ in REFUSED])
def test_a_text_outside_the_subset_is_refused_naming_what_is_wrong(text: str, fragments: list[str]) -> None:
    with pytest.raises(UserInputError) as refused:
        parse_predicate(text, COLUMNS)
    message = str(refused.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message and "<class" not in message and "Traceback" not in message


@pytest.mark.parametrize("text", ["TRUE", "1 = 1", "NOT FALSE"])
def test_a_condition_that_names_no_column_deletes_every_row_only_when_allowed(text: str) -> None:
    predicate = parse_predicate(text, COLUMNS, allow_all=True)
    assert predicate.columns == frozenset()
    assert TABLE.filter(predicate.matches).num_rows == TABLE.num_rows
    assert ds.dataset(TABLE).to_table(filter=predicate.keeps).num_rows == 0
    assert predicate.partition_may_match({}) and predicate.partition_may_match({"day": date(2026, 1, 1)})


@pytest.mark.parametrize("text", ["FALSE", "1 = 0", "NOT TRUE", "1 > 2 AND TRUE"])
def test_a_condition_that_matches_no_row_is_refused_even_when_all_is_allowed(text: str) -> None:
    with pytest.raises(UserInputError, match="matches no row"):
        parse_predicate(text, COLUMNS, allow_all=True)


# (text, the values constant in a partition, whether a row there may match)
PARTITIONS: list[tuple[str, dict[str, Any], bool]] = [
    ("day = DATE '2026-01-03' AND id = 1", {"day": date(2026, 1, 3)}, True),
    ("day = DATE '2026-01-03' AND id = 1", {"day": date(2026, 1, 4)}, False),
    ("day = DATE '2026-01-03' AND id = 1", {"day": "2026-01-04"}, True),  # text, not a date: unsure
    ("day = DATE '2026-01-03' AND id = 1", {"day": None}, False),  # NULL = … is never true
    ("day = DATE '2026-01-03' AND id = 1", {}, True),  # day unknown
    ("day = DATE '2026-01-03' AND id = 1", {"day": date(2026, 1, 3), "id": 2}, False),
    ("(day = DATE '2026-01-03' AND (n = 1)) AND id = 1", {"n": 2}, False),  # nested ANDs
    ("day = DATE '2026-01-03' OR id = 1", {"day": date(2026, 1, 4)}, True),  # id unknown
    ("day = DATE '2026-01-03' OR id = 1", {"day": date(2026, 1, 4), "id": 2}, False),
    ("ts < TIMESTAMP '2026-01-01 00:00:00'", {"ts": _ts(1, 0)}, False),
    ("ts < TIMESTAMP '2026-01-01 00:00:00'", {"ts": datetime(2025, 12, 31, 23, tzinfo=UTC)}, True),
    ("ts < TIMESTAMP '2026-01-01 00:00:00'", {"ts": datetime(2026, 1, 1)}, False),  # naive: UTC
    ("name IS NULL", {"name": None}, True),
    ("name IS NULL", {"name": "a"}, False),
    ("NOT (day = DATE '2026-01-03')", {"day": None}, False),  # NOT NULL is NULL: kept
    ("NOT (day = DATE '2026-01-03')", {"day": date(2026, 1, 2)}, True),
    ("name NOT IN ('a')", {"name": None}, False),
    ("ok", {"ok": False}, False),
]


@pytest.mark.parametrize(("text", "values", "may"), PARTITIONS)
def test_partition_may_match_is_false_only_where_no_row_can_match(
    text: str, values: dict[str, Any], may: bool
) -> None:
    assert parse_predicate(text, COLUMNS).partition_may_match(values) is may


@pytest.mark.parametrize(("text", "duck"), ACCEPTED, ids=[t for t, _ in ACCEPTED])
def test_partition_may_match_is_never_false_for_the_values_of_a_row_that_is_deleted(
    text: str, duck: str | None
) -> None:
    predicate = parse_predicate(text, COLUMNS)
    deleted, names = set(_ids(TABLE.filter(predicate.matches))), sorted(predicate.columns)
    subsets = [c for k in range(1, len(names) + 1) for c in itertools.combinations(names, k)]
    for row in TABLE.to_pylist():
        for known in subsets:
            values = {name: row[name] for name in known}
            if not predicate.partition_may_match(values):
                assert row["id"] not in deleted, values
        # with every column it names known, the answer is exact: the row is deleted or it is not
        assert predicate.partition_may_match({n: row[n] for n in names}) is (row["id"] in deleted)


def test_a_predicate_is_a_frozen_value() -> None:
    predicate = parse_predicate("id = 3", COLUMNS)
    assert isinstance(predicate, Predicate)
    with pytest.raises(AttributeError):
        predicate.text = "id = 4"  # type: ignore[misc]
    assert predicate == parse_predicate("id = 3", COLUMNS)
