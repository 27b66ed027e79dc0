"""Unit tests of chunk parsing and validation (ingest/formats.py, ingest/records.py) and of the
metastore's parsing helpers."""

from __future__ import annotations

import io
import json
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.errors import MalformedChunkError
from ingest.formats import Format, parse
from ingest.records import BadRecord, Parsed, RecordValidator
from metastore.delta.arrow import data_schema
from metastore.durations import parse_duration
from metastore.errors import IllegalTransitionError, UserInputError
from metastore.models import (
    EPOCH,
    ChunkState,
    Column,
    PartitionState,
    RollState,
    TableName,
    check_transition,
    parse_schema,
    period_start,
)

SCHEMA = parse_schema(
    "id BIGINT, n INT, ts TIMESTAMP, day DATE, amount DECIMAL(5,2), msg STRING, ok BOOLEAN, score DOUBLE, "
    "tag STRING NOT NULL"
)
MAX_VALUE_BYTES = 16
GOOD: dict[str, Any] = {"id": 1, "ts": "2026-01-01T00:00:00Z", "tag": "x"}


def validator(
    columns: tuple[Column, ...] = SCHEMA, max_value_bytes: int = MAX_VALUE_BYTES
) -> RecordValidator:
    return RecordValidator(columns, required=["ts"], max_value_bytes=max_value_bytes)


def line(record: Any) -> str:
    return record if isinstance(record, str) else json.dumps(record)


def jsonl(*records: Any) -> bytes:
    return "\n".join(line(r) for r in records).encode()


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def only_bad(parsed: Parsed) -> BadRecord:
    assert len(parsed.bad) == 1, parsed.bad
    return parsed.bad[0]


def assert_names_column(bad: BadRecord, column: str) -> None:
    assert repr(column) in bad.reason, bad.reason


# -- JSON lines: bad records --------------------------------------------------------------------

BAD_JSON_RECORDS = [
    pytest.param('{"id": 1, "ts": ', None, "invalid JSON", id="invalid-json"),
    pytest.param("[1, 2]", None, "expected a JSON object, got list", id="array-not-object"),
    pytest.param('"text"', None, "expected a JSON object, got str", id="string-not-object"),
    pytest.param({**GOOD, "id": "abc"}, "id", "expected an integer", id="string-for-bigint"),
    pytest.param({**GOOD, "id": 1.5}, "id", "1.5", id="float-for-bigint"),
    pytest.param({**GOOD, "id": True}, "id", "got true", id="bool-for-bigint"),
    pytest.param({**GOOD, "n": 2**31}, "n", "out of range", id="int-too-big"),
    pytest.param({**GOOD, "n": -(2**31) - 1}, "n", "out of range", id="int-too-small"),
    pytest.param({**GOOD, "id": 2**63}, "id", "out of range", id="bigint-too-big"),
    pytest.param({"id": 1, "tag": "x"}, "ts", "required", id="missing-time-column"),
    pytest.param({**GOOD, "ts": None}, "ts", "required", id="null-time-column"),
    pytest.param({**GOOD, "tag": None}, "tag", "required", id="not-null-column-null"),
    pytest.param({"id": 1, "ts": "2026-01-01T00:00:00Z"}, "tag", "required", id="not-null-column-missing"),
    pytest.param({**GOOD, "ts": "yesterday"}, "ts", "ISO-8601 timestamp", id="bad-timestamp-text"),
    pytest.param({**GOOD, "ts": True}, "ts", "timestamp", id="bool-timestamp"),
    pytest.param({**GOOD, "ts": 1e300}, "ts", "out of range", id="epoch-out-of-range"),
    pytest.param({**GOOD, "day": "2026-02-30"}, "day", "ISO-8601 date", id="bad-date"),
    pytest.param({**GOOD, "day": 20260101}, "day", "date", id="number-for-date"),
    pytest.param({**GOOD, "amount": 12345.6}, "amount", "does not fit DECIMAL(5,2)", id="decimal-overflow"),
    pytest.param({**GOOD, "amount": "999.999"}, "amount", "does not fit DECIMAL(5,2)", id="decimal-round-up"),
    pytest.param({**GOOD, "amount": "lots"}, "amount", "decimal", id="decimal-not-a-number"),
    pytest.param({**GOOD, "msg": "x" * 17}, "msg", "exceeds 16", id="oversized-string"),
    pytest.param({**GOOD, "msg": {"a": 1}}, "msg", "expected a string", id="object-for-string"),
    pytest.param({**GOOD, "ok": "yes"}, "ok", "true or false", id="bad-boolean"),
    pytest.param({**GOOD, "score": "high"}, "score", "expected a number", id="bad-double"),
]


@pytest.mark.parametrize(("bad_record", "column", "fragment"), BAD_JSON_RECORDS)
def test_jsonl_bad_record_names_line_and_column(bad_record: Any, column: str | None, fragment: str) -> None:
    # a blank line counts: the bad record is on line 3
    parsed = parse(jsonl(GOOD, "", bad_record, {**GOOD, "id": 4}), Format.JSONL, validator())

    bad = only_bad(parsed)
    assert bad.position == 3
    assert fragment in bad.reason
    if column is not None:
        assert_names_column(bad, column)
    assert bad.raw == line(bad_record)[:1024]
    assert parsed.good.column("id").to_pylist() == [1, 4]


def test_jsonl_positions_of_several_bad_records() -> None:
    data = jsonl({**GOOD, "id": "x"}, GOOD, "{", GOOD, "", {**GOOD, "n": 2**40})

    parsed = parse(data, Format.JSONL, validator())

    assert [b.position for b in parsed.bad] == [1, 3, 6]
    assert parsed.good.num_rows == 2


def test_oversized_value_keeps_a_bounded_raw_text() -> None:
    parsed = parse(jsonl({**GOOD, "msg": "y" * 5000}), Format.JSONL, validator(max_value_bytes=100))

    bad = only_bad(parsed)
    assert_names_column(bad, "msg")
    assert "5000 bytes exceeds 100" in bad.reason
    assert len(bad.raw) == 1024


# -- JSON lines: good records -------------------------------------------------------------------


def test_jsonl_types_come_out_right() -> None:
    record = {
        "id": 7,
        "n": -5,
        "ts": "2026-03-04T05:06:07",  # naive: UTC
        "day": "2026-03-04",
        "amount": 1.5,
        "msg": "hello",
        "ok": True,
        "score": 2,
        "tag": "t",
        "extra": {"ignored": True},  # fields outside the schema are ignored
    }

    parsed = parse(jsonl(record), Format.JSONL, validator())

    assert parsed.bad == []
    assert parsed.good.schema == data_schema(SCHEMA)
    [row] = parsed.good.to_pylist()
    assert set(row) == {c.name for c in SCHEMA}
    assert row["id"] == 7 and row["n"] == -5
    assert row["ts"] == datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert row["ts"].utcoffset() == timedelta(0)
    assert row["day"] == date(2026, 3, 4)
    assert row["amount"] == Decimal("1.50") and row["amount"].as_tuple().exponent == -2
    assert row["msg"] == "hello" and row["ok"] is True and row["score"] == 2.0 and row["tag"] == "t"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-03-04T05:06:07Z", datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)),
        ("2026-03-04T05:06:07", datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)),
        ("2026-03-04 05:06:07.250000", datetime(2026, 3, 4, 5, 6, 7, 250000, tzinfo=UTC)),
        ("2026-03-04T07:06:07+02:00", datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)),
        (1_700_000_000, datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)),
        (1_700_000_000.5, datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=UTC)),
        (0, EPOCH),
    ],
)
def test_timestamps_are_utc(value: Any, expected: datetime) -> None:
    parsed = parse(jsonl({**GOOD, "ts": value}), Format.JSONL, validator())

    assert parsed.bad == []
    assert parsed.good.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    [ts] = parsed.good.column("ts").to_pylist()
    assert ts == expected
    assert ts.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, "3.00"), ("2.5", "2.50"), (0.1, "0.10"), ("-999.99", "-999.99"), (1.004, "1.00")],
)
def test_decimals_are_quantized_to_the_scale(value: Any, expected: str) -> None:
    parsed = parse(jsonl({**GOOD, "amount": value}), Format.JSONL, validator())

    assert parsed.bad == []
    assert [str(d) for d in parsed.good.column("amount").to_pylist()] == [expected]


def test_integers_accept_integral_floats_and_numeric_strings() -> None:
    data = jsonl({**GOOD, "id": 1000.0}, {**GOOD, "id": " 42 "}, {**GOOD, "id": -(2**63)})

    parsed = parse(data, Format.JSONL, validator())

    assert parsed.bad == []
    assert parsed.good.column("id").to_pylist() == [1000, 42, -(2**63)]


def test_numbers_are_accepted_for_strings_and_absent_columns_are_null() -> None:
    parsed = parse(jsonl({**GOOD, "msg": 12}), Format.JSONL, validator())

    assert parsed.bad == []
    [row] = parsed.good.to_pylist()
    assert row["msg"] == "12"
    assert row["n"] is None and row["day"] is None and row["amount"] is None


def test_empty_input_gives_an_empty_table() -> None:
    parsed = parse(b"\n\n", Format.JSONL, validator())

    assert parsed.bad == []
    assert parsed.good.num_rows == 0
    assert parsed.good.schema == data_schema(SCHEMA)


def test_string_at_the_size_limit_is_accepted() -> None:
    parsed = parse(jsonl({**GOOD, "msg": "z" * MAX_VALUE_BYTES}), Format.JSONL, validator())

    assert parsed.bad == []
    assert parsed.good.column("msg").to_pylist() == ["z" * MAX_VALUE_BYTES]


# -- CSV ----------------------------------------------------------------------------------------

CSV_HEADER = "id,n,ts,day,amount,msg,tag"


def csv_bytes(*rows: str, header: str = CSV_HEADER) -> bytes:
    return "\n".join([header, *rows]).encode()


def test_csv_good_rows_and_empty_fields() -> None:
    data = csv_bytes(
        "1,2,2026-01-01T00:00:00Z,2026-01-02,1.5,hello,a",
        ",,2026-01-01 01:00:00,,,,b",  # empty fields: null, except for string columns
    )

    parsed = parse(data, Format.CSV, validator())

    assert parsed.bad == []
    first, second = parsed.good.to_pylist()
    assert first["id"] == 1 and first["n"] == 2
    assert first["ts"] == datetime(2026, 1, 1, tzinfo=UTC)
    assert first["day"] == date(2026, 1, 2)
    assert str(first["amount"]) == "1.50"
    assert first["msg"] == "hello" and first["tag"] == "a"
    assert second["id"] is None and second["n"] is None and second["day"] is None and second["amount"] is None
    assert second["ts"] == datetime(2026, 1, 1, 1, tzinfo=UTC)
    assert second["msg"] == ""
    assert first["ok"] is None and first["score"] is None  # columns not in the header are null


def test_csv_header_may_list_columns_in_any_order_with_spaces() -> None:
    parsed = parse(csv_bytes("a,2026-01-01T00:00:00Z,5", header="tag, ts ,id"), Format.CSV, validator())

    assert parsed.bad == []
    assert parsed.good.select(["id", "tag"]).to_pylist() == [{"id": 5, "tag": "a"}]


BAD_CSV_ROWS = [
    pytest.param("1,2,2026-01-01T00:00:00Z,,,hello", None, "expected 7 fields, got 6", id="too-few-fields"),
    pytest.param("1,2,2026-01-01T00:00:00Z,,,hi,a,x", None, "expected 7 fields, got 8", id="too-many-fields"),
    pytest.param("abc,,2026-01-01T00:00:00Z,,,,a", "id", "expected an integer", id="string-for-bigint"),
    pytest.param("1.5,,2026-01-01T00:00:00Z,,,,a", "id", "expected an integer", id="float-for-bigint"),
    pytest.param("true,,2026-01-01T00:00:00Z,,,,a", "id", "expected an integer", id="bool-for-bigint"),
    pytest.param("1,2147483648,2026-01-01T00:00:00Z,,,,a", "n", "out of range", id="int-out-of-range"),
    pytest.param("1,,,,,,a", "ts", "required", id="empty-time-column"),
    pytest.param("1,,not-a-time,,,,a", "ts", "ISO-8601 timestamp", id="bad-timestamp"),
    pytest.param("1,,2026-01-01T00:00:00Z,2026-13-01,,,a", "day", "ISO-8601 date", id="bad-date"),
    pytest.param("1,,2026-01-01T00:00:00Z,,1000,,a", "amount", "does not fit DECIMAL(5,2)", id="decimal-big"),
    pytest.param("1,,2026-01-01T00:00:00Z,,,xxxxxxxxxxxxxxxxx,a", "msg", "exceeds 16", id="oversized-string"),
]


@pytest.mark.parametrize(("row", "column", "fragment"), BAD_CSV_ROWS)
def test_csv_bad_row_names_line_and_column(row: str, column: str | None, fragment: str) -> None:
    # line 1 is the header, line 3 an empty line: the bad row is on line 4
    data = csv_bytes("1,,2026-01-01T00:00:00Z,,,,a", "", row, "4,,2026-01-01T00:00:00Z,,,,a")

    parsed = parse(data, Format.CSV, validator())

    bad = only_bad(parsed)
    assert bad.position == 4
    assert fragment in bad.reason
    if column is not None:
        assert_names_column(bad, column)
    assert parsed.good.column("id").to_pylist() == [1, 4]


def test_csv_not_null_string_column_may_be_empty_but_not_absent() -> None:
    data = csv_bytes("1,2026-01-01T00:00:00Z,", header="id,ts,tag")

    parsed = parse(data, Format.CSV, validator())
    assert parsed.bad == []
    assert parsed.good.column("tag").to_pylist() == [""]

    parsed = parse(csv_bytes("1,2026-01-01T00:00:00Z", header="id,ts"), Format.CSV, validator())
    bad = only_bad(parsed)
    assert bad.position == 2
    assert_names_column(bad, "tag")


def test_csv_header_with_unknown_column_fails_the_chunk() -> None:
    with pytest.raises(MalformedChunkError, match="bogus") as info:
        parse(csv_bytes("1,2026-01-01T00:00:00Z,a,zz", header="id,ts,tag,bogus"), Format.CSV, validator())
    assert "line 1" in str(info.value)
    assert "'id'" not in str(info.value)  # only the unknown column is named


def test_csv_empty_input_gives_an_empty_table() -> None:
    for data in (b"", CSV_HEADER.encode()):
        parsed = parse(data, Format.CSV, validator())
        assert parsed.bad == []
        assert parsed.good.num_rows == 0


# -- Parquet ------------------------------------------------------------------------------------


def test_parquet_good_rows() -> None:
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            # a naive timestamp column: taken as UTC
            "ts": pa.array([datetime(2026, 1, 1, 0, 0), datetime(2026, 1, 1, 1, 0)], pa.timestamp("us")),
            "day": pa.array([date(2026, 1, 1), None], pa.date32()),
            "msg": pa.array(["a", None]),
            "tag": pa.array(["x", "y"]),
            "unrelated": pa.array([0.5, 1.5]),
        }
    )

    parsed = parse(parquet_bytes(table), Format.PARQUET, validator())

    assert parsed.bad == []
    assert parsed.good.schema == data_schema(SCHEMA)
    rows = parsed.good.to_pylist()
    assert [r["id"] for r in rows] == [1, 2]
    assert [r["ts"] for r in rows] == [datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 1, tzinfo=UTC)]
    assert all(r["ts"].utcoffset() == timedelta(0) for r in rows)
    assert [r["day"] for r in rows] == [date(2026, 1, 1), None]
    assert [r["n"] for r in rows] == [None, None]


def test_parquet_bad_rows_are_named_by_row_number() -> None:
    table = pa.table(
        {
            "id": pa.array(["1", "abc", "3", "4"]),
            "ts": pa.array([datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC), None, EPOCH]),
            "tag": pa.array(["x", "x", "x", "x"]),
        }
    )

    parsed = parse(parquet_bytes(table), Format.PARQUET, validator())

    assert [b.position for b in parsed.bad] == [2, 3]
    assert_names_column(parsed.bad[0], "id")
    assert "expected an integer" in parsed.bad[0].reason
    assert_names_column(parsed.bad[1], "ts")
    assert "required" in parsed.bad[1].reason
    assert parsed.good.column("id").to_pylist() == [1, 4]


def test_parquet_lacking_a_not_null_column_fails_the_chunk() -> None:
    table = pa.table({"id": pa.array([1], pa.int64()), "ts": pa.array([EPOCH], pa.timestamp("us", tz="UTC"))})

    with pytest.raises(MalformedChunkError, match="tag"):
        parse(parquet_bytes(table), Format.PARQUET, validator())


@pytest.mark.parametrize(
    "data", [b"", b"not parquet at all", b"PAR1" + b"\0" * 32], ids=["empty", "text", "truncated"]
)
def test_unreadable_parquet_fails_the_chunk(data: bytes) -> None:
    with pytest.raises(MalformedChunkError, match="not a readable Parquet file"):
        parse(data, Format.PARQUET, validator())


def test_format_guess() -> None:
    assert Format.guess("a/b.csv") is Format.CSV
    assert Format.guess("B.PARQUET") is Format.PARQUET
    assert Format.guess("x.pq") is Format.PARQUET
    assert Format.guess("x.jsonl") is Format.JSONL
    assert Format.guess("-") is Format.JSONL


# -- fixed product bugs (regression tests) ------------------------------------------------------


def test_max_value_bytes_counts_bytes_not_characters() -> None:
    value = "é" * 10  # 10 characters, 20 bytes
    parsed = parse(jsonl({**GOOD, "msg": value}), Format.JSONL, validator())

    bad = only_bad(parsed)
    assert_names_column(bad, "msg")


def test_jsonl_string_may_hold_unicode_line_separators() -> None:
    data = (json.dumps({**GOOD, "msg": "a\u2028b"}, ensure_ascii=False) + "\n" + json.dumps(GOOD)).encode()

    parsed = parse(data, Format.JSONL, validator())

    assert parsed.bad == []
    assert parsed.good.column("msg").to_pylist() == ["a\u2028b", None]


def test_wide_decimal_that_fits_is_accepted() -> None:
    columns = parse_schema("ts TIMESTAMP, big DECIMAL(38,2)")
    value = "123456789012345678901234567890.12"  # 32 digits

    parsed = parse(jsonl({"ts": 0, "big": value}), Format.JSONL, validator(columns))

    assert parsed.bad == []
    assert [str(d) for d in parsed.good.column("big").to_pylist()] == [value]


def test_parquet_decimal_column_is_accepted() -> None:
    table = pa.table(
        {
            "ts": pa.array([EPOCH], pa.timestamp("us", tz="UTC")),
            "amount": pa.array([Decimal("1.50")], pa.decimal128(5, 2)),
            "tag": pa.array(["x"]),
        }
    )

    parsed = parse(parquet_bytes(table), Format.PARQUET, validator())

    assert parsed.bad == []
    assert [str(d) for d in parsed.good.column("amount").to_pylist()] == ["1.50"]


def test_decimal_nan_is_a_bad_record() -> None:
    parsed = parse(jsonl(GOOD, {**GOOD, "amount": "NaN"}), Format.JSONL, validator())

    bad = only_bad(parsed)
    assert bad.position == 2
    assert_names_column(bad, "amount")


@pytest.mark.parametrize(
    "value",
    ['"Infinity"', '"-inf"', '"sNaN"', "NaN", "Infinity"],
    ids=["inf", "-inf", "snan", "json-nan", "json-inf"],
)
def test_decimal_that_is_not_finite_is_a_bad_record(value: str) -> None:
    data = jsonl(GOOD, '{"id": 2, "ts": 0, "tag": "x", "amount": ' + value + "}")

    parsed = parse(data, Format.JSONL, validator())

    bad = only_bad(parsed)
    assert bad.position == 2
    assert_names_column(bad, "amount")
    assert "finite" in bad.reason


def test_decimal_of_more_digits_than_any_decimal_does_not_fit() -> None:
    columns = parse_schema("ts TIMESTAMP, big DECIMAL(38,0)")
    data = jsonl({"ts": 0, "big": "9" * 38}, {"ts": 0, "big": "9" * 39}, {"ts": 0, "big": "1e400"})

    parsed = parse(data, Format.JSONL, validator(columns))

    assert [b.position for b in parsed.bad] == [2, 3]
    assert all("does not fit DECIMAL(38,0)" in b.reason for b in parsed.bad)
    assert [str(d) for d in parsed.good.column("big").to_pylist()] == ["9" * 38]


def test_string_with_an_unpaired_surrogate_is_a_bad_record() -> None:
    parsed = parse(
        jsonl(GOOD, '{"id": 2, "ts": 0, "tag": "x", "msg": "a\\ud800"}'), Format.JSONL, validator()
    )

    bad = only_bad(parsed)
    assert bad.position == 2
    assert_names_column(bad, "msg")


def test_jsonl_crlf_line_ends_and_byte_order_mark() -> None:
    data = b"\xef\xbb\xbf" + jsonl(GOOD, {**GOOD, "id": 2, "msg": "a\u0085b\u2029c"}).replace(b"\n", b"\r\n")

    parsed = parse(data, Format.JSONL, validator())

    assert parsed.bad == []
    assert parsed.good.column("id").to_pylist() == [1, 2]
    assert parsed.good.column("msg").to_pylist() == [None, "a\u0085b\u2029c"]


def test_csv_with_byte_order_mark() -> None:
    data = b"\xef\xbb\xbf" + csv_bytes("1,2026-01-01T00:00:00Z,a", header="id,ts,tag")

    parsed = parse(data, Format.CSV, validator())

    assert parsed.bad == []
    assert parsed.good.column("id").to_pylist() == [1]


def test_invalid_utf8_is_a_bad_record() -> None:
    data = jsonl(GOOD) + b'\n{"id": 2, "ts": 0, "tag": "caf\xe9"}'

    parsed = parse(data, Format.JSONL, validator())

    bad = only_bad(parsed)
    assert bad.position == 2
    assert "invalid UTF-8" in bad.reason
    assert parsed.good.column("id").to_pylist() == [1]


def test_csv_invalid_utf8_is_a_bad_record() -> None:
    # line 3 is Latin-1, not UTF-8; line 4 is UTF-8
    data = b"id,ts,tag\n1,2026-01-01T00:00:00Z,a\n2,2026-01-01T00:00:00Z,caf\xe9\n3,1970-01-01,\xc3\xa9"

    parsed = parse(data, Format.CSV, validator())

    bad = only_bad(parsed)
    assert bad.position == 3
    assert_names_column(bad, "tag")
    assert "invalid UTF-8" in bad.reason
    assert bad.raw == "2,2026-01-01T00:00:00Z,caf\ufffd"
    assert parsed.good.column("tag").to_pylist() == ["a", "\xe9"]


def test_csv_header_with_invalid_utf8_fails_the_chunk() -> None:
    with pytest.raises(MalformedChunkError, match="line 1: CSV header is not valid UTF-8"):
        parse(b"id,ts,t\xe4g\n1,2026-01-01T00:00:00Z,a", Format.CSV, validator())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1700000000", datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)),
        ("1700000000.5", datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=UTC)),
        ("0", EPOCH),
        ("-60", EPOCH - timedelta(minutes=1)),
    ],
)
def test_csv_epoch_timestamps_as_in_json(value: str, expected: datetime) -> None:
    from_csv = parse(csv_bytes(f"1,{value},a", header="id,ts,tag"), Format.CSV, validator())
    from_json = parse(jsonl({**GOOD, "ts": json.loads(value)}), Format.JSONL, validator())

    assert from_csv.bad == [] and from_json.bad == []
    assert from_csv.good.column("ts").to_pylist() == from_json.good.column("ts").to_pylist() == [expected]


@pytest.mark.parametrize("value", ["1e300", "0x10", "1_000", "12 34"])
def test_csv_timestamp_that_is_not_a_time(value: str) -> None:
    parsed = parse(csv_bytes(f"1,{value},a", header="id,ts,tag"), Format.CSV, validator())

    assert_names_column(only_bad(parsed), "ts")


# -- metastore.models parsing helpers -----------------------------------------------------------


def test_parse_schema() -> None:
    columns = parse_schema(
        "id BIGINT, ts timestamp, amount DECIMAL( 10 , 2 ), msg STRING NOT NULL, n int not null"
    )

    assert columns == (
        Column(name="id", type="long", nullable=True),
        Column(name="ts", type="timestamp", nullable=True),
        Column(name="amount", type="decimal(10,2)", nullable=True),
        Column(name="msg", type="string", nullable=False),
        Column(name="n", type="integer", nullable=False),
    )
    assert [c.sql_type for c in columns] == ["BIGINT", "TIMESTAMP", "DECIMAL(10,2)", "STRING", "INT"]


@pytest.mark.parametrize(
    ("ddl", "fragments"),
    [
        pytest.param("id BIGINT, ts BIGNUM", ["'ts'", "BIGNUM"], id="unknown-type"),
        pytest.param("id BIGINT, ID STRING", ["'ID'", "twice"], id="duplicate-column"),
        pytest.param("id BIGINT,, ts TIMESTAMP", ["column 2", "empty"], id="empty-column"),
        pytest.param("id BIGINT,", ["column 2", "empty"], id="trailing-comma"),
        pytest.param("", ["column 1", "empty"], id="empty-schema"),
        pytest.param("'id' BIGINT", ["column 1", "'id'"], id="quoted-name"),
        pytest.param('x"y STRING', ["column 1", 'x"y'], id="name-with-quote"),
        pytest.param("a/b STRING", ["column 1", "a/b"], id="name-with-slash"),
        pytest.param("id", ["column 1", "NAME TYPE"], id="no-type"),
        pytest.param("amount DECIMAL(40,2)", ["'amount'", "DECIMAL(40,2)"], id="decimal-too-wide"),
        pytest.param("amount DECIMAL(5,6)", ["'amount'", "DECIMAL(5,6)"], id="decimal-scale-over-precision"),
    ],
)
def test_parse_schema_errors_name_the_column(ddl: str, fragments: list[str]) -> None:
    with pytest.raises(UserInputError) as info:
        parse_schema(ddl)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_table_name_parse() -> None:
    name = TableName.parse("ns_1.events")

    assert (name.namespace, name.table) == ("ns_1", "events")
    assert str(name) == "ns_1.events"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("ns/x.t", "path separator", id="slash-in-namespace"),
        pytest.param("ns.a/b", "path separator", id="slash-in-table"),
        pytest.param("../t", "path separator", id="dotdot-slash"),
        pytest.param("ns.t\\x", "path separator", id="backslash"),
        pytest.param("ns..t", "NAMESPACE.TABLE", id="dotdot"),
        pytest.param("..", "NAMESPACE.TABLE", id="only-dots"),
        pytest.param("ns.t'", "quote", id="single-quote"),
        pytest.param('ns."t"', "quote", id="double-quote"),
        pytest.param("ns.`t`", "quote", id="backtick"),
        pytest.param("nst", "NAMESPACE.TABLE", id="missing-dot"),
        pytest.param("a.b.c", "NAMESPACE.TABLE", id="too-many-dots"),
        pytest.param(".t", "empty", id="empty-namespace"),
        pytest.param("ns.", "empty", id="empty-table"),
        pytest.param("ns.1t", "not a valid name", id="leading-digit"),
        pytest.param("ns.t-x", "not a valid name", id="dash"),
    ],
)
def test_table_name_parse_errors(text: str, fragment: str) -> None:
    with pytest.raises(UserInputError, match=fragment.replace(".", r"\.")):
        TableName.parse(text)


@pytest.mark.parametrize(
    ("ts", "every", "expected"),
    [
        (datetime(2026, 1, 1, 10, 37, 12, tzinfo=UTC), "1h", datetime(2026, 1, 1, 10, tzinfo=UTC)),
        (datetime(2026, 1, 1, 10, 37, 12, tzinfo=UTC), "15m", datetime(2026, 1, 1, 10, 30, tzinfo=UTC)),
        (datetime(2026, 1, 1, 10, 37, 12, tzinfo=UTC), "1d", datetime(2026, 1, 1, tzinfo=UTC)),
        (datetime(2026, 1, 1, 10, tzinfo=UTC), "1h", datetime(2026, 1, 1, 10, tzinfo=UTC)),  # on the boundary
        (datetime(2026, 1, 1, 10, 59, 59, 999999, tzinfo=UTC), "1h", datetime(2026, 1, 1, 10, tzinfo=UTC)),
        (datetime(2026, 1, 1, 10, 37), "1h", datetime(2026, 1, 1, 10, tzinfo=UTC)),  # naive is UTC
        (
            datetime(2026, 1, 1, 1, 37, tzinfo=timezone(timedelta(hours=2))),
            "1d",
            datetime(2025, 12, 31, tzinfo=UTC),
        ),
        (EPOCH + timedelta(minutes=20), "7m", EPOCH + timedelta(minutes=14)),  # aligned to the epoch
        (datetime(1969, 12, 31, 23, 30, tzinfo=UTC), "1h", datetime(1969, 12, 31, 23, tzinfo=UTC)),
    ],
)
def test_period_start(ts: datetime, every: str, expected: datetime) -> None:
    start = period_start(ts, parse_duration(every))

    assert start == expected
    assert start.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (PartitionState.STREAMING, PartitionState.ROLLING),
        (PartitionState.ROLLING, PartitionState.STANDARD),
        (ChunkState.RESERVED, ChunkState.COMMITTING),
        (ChunkState.RESERVED, ChunkState.ABORTED),
        (ChunkState.RESERVED, ChunkState.EXPIRED),
        (ChunkState.COMMITTING, ChunkState.COMMITTED),
        (ChunkState.COMMITTING, ChunkState.ABORTED),
        (RollState.SEALING, RollState.SWEEPING),
        (RollState.SWEEPING, RollState.DONE),
    ],
)
def test_allowed_transitions(current: Any, target: Any) -> None:
    check_transition(current, target)  # does not raise


P, C, R = PartitionState, ChunkState, RollState


@pytest.mark.parametrize(
    ("current", "target", "message"),
    [
        (P.STREAMING, P.STANDARD, "a partition cannot go from streaming to standard"),
        (P.STANDARD, P.STREAMING, "a partition cannot go from standard to streaming"),
        (P.ROLLING, P.STREAMING, "a partition cannot go from rolling to streaming"),
        (P.STANDARD, P.STANDARD, "a partition cannot go from standard to standard"),
        (C.RESERVED, C.COMMITTED, "a chunk cannot go from reserved to committed"),
        (C.COMMITTED, C.ABORTED, "a chunk cannot go from committed to aborted"),
        (C.ABORTED, C.COMMITTING, "a chunk cannot go from aborted to committing"),
        (C.EXPIRED, C.RESERVED, "a chunk cannot go from expired to reserved"),
        (R.SEALING, R.DONE, "a roll cannot go from sealing to done"),
        (R.DONE, R.SEALING, "a roll cannot go from done to sealing"),
    ],
)
def test_illegal_transitions(current: Any, target: Any, message: str) -> None:
    with pytest.raises(IllegalTransitionError) as info:
        check_transition(current, target)
    assert str(info.value) == message


# -- poison inputs: nothing a producer sends may stop a stream or exhaust memory -----------------

DEEP_JSON = '{"id": 1, "ts": "2026-01-01T00:00:00Z", "tag": "x", "msg": ' + "[" * 100_000 + "]" * 100_000
DEEP_JSON += "}"


def test_json_nested_deeper_than_any_parser_goes_is_a_bad_record() -> None:
    parsed = parse(jsonl(DEEP_JSON, GOOD), Format.JSONL, validator())
    bad = only_bad(parsed)
    assert bad.position == 1 and "nested more than 1024 levels deep" in bad.reason
    assert parsed.good.num_rows == 1


def test_csv_field_over_the_csv_modules_limit_is_just_a_long_value() -> None:
    long = "y" * 200_000  # csv's default field limit is 131,072 characters
    data = f"id,ts,tag,msg\n1,2026-01-01T00:00:00Z,x,{long}\n2,2026-01-01T00:00:00Z,x,short\n".encode()
    parsed = parse(data, Format.CSV, validator(max_value_bytes=1 << 20))
    assert parsed.bad == [] and parsed.good.column("msg").to_pylist() == [long, "short"]
    too_long = parse(data, Format.CSV, validator(max_value_bytes=1000))
    assert only_bad(too_long).position == 2 and "exceeds 1000" in too_long.bad[0].reason


def test_a_converter_failing_in_an_unforeseen_way_is_a_bad_record() -> None:
    v = validator()
    v._conv[0] = lambda value: 1 // 0  # stands for a bug or a value no converter foresaw
    parsed = parse(jsonl(GOOD), Format.JSONL, v)
    assert "ZeroDivisionError" in only_bad(parsed).reason


def _constant_parquet(rows: int) -> bytes:
    """A few kilobytes of Parquet holding ``rows`` identical rows (dictionary + RLE)."""
    block = pa.table(
        {
            "id": pa.array([7] * 100_000, pa.int64()),
            "ts": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * 100_000, pa.timestamp("us", tz="UTC")),
            "tag": pa.array(["x"] * 100_000),
        }
    )
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, block.schema) as writer:
        for _ in range(rows // 100_000):
            writer.write_table(block)
    return buf.getvalue()


def test_a_small_parquet_file_of_many_rows_is_validated_without_python_rows() -> None:
    import tracemalloc

    data = _constant_parquet(1_000_000)
    assert len(data) < 100_000
    tracemalloc.start()
    try:
        parsed = parse(data, Format.PARQUET, validator())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parsed.bad == [] and parsed.good.num_rows == 1_000_000
    # Python rows of a million records take hundreds of MB (about +460 MB at 12 KB before);
    # Arrow arrays are not Python objects and batches of Python rows are bounded
    assert peak < 64 * 1024 * 1024, peak


def test_a_parquet_file_of_more_rows_than_a_chunk_holds_is_refused_before_reading() -> None:
    v = RecordValidator(SCHEMA, required=["ts"], max_rows=500_000)
    with pytest.raises(MalformedChunkError, match=r"1000000 records or more, over the limit of 500000"):
        parse(_constant_parquet(1_000_000), Format.PARQUET, v)
    lines = RecordValidator(SCHEMA, required=["ts"], max_rows=3)
    with pytest.raises(MalformedChunkError, match=r"chunk\.max_rows"):
        parse(jsonl(GOOD, GOOD, GOOD, GOOD), Format.JSONL, lines)


def test_parquet_bad_values_in_one_batch_are_named_while_other_batches_stay_arrow() -> None:
    from ingest import formats

    good = pa.table({"id": pa.array(range(10), pa.int64()), "ts": pa.array([EPOCH] * 10, pa.timestamp("us")),
                     "tag": pa.array(["x"] * 9 + [None])})  # fmt: skip
    buf = io.BytesIO()
    pq.write_table(good, buf)
    old, formats.PARQUET_BATCH_ROWS = formats.PARQUET_BATCH_ROWS, 4
    try:
        parsed = parse(buf.getvalue(), Format.PARQUET, validator())
    finally:
        formats.PARQUET_BATCH_ROWS = old
    assert [b.position for b in parsed.bad] == [10] and "'tag' is required" in parsed.bad[0].reason
    assert parsed.good.column("id").to_pylist() == list(range(9))


@pytest.mark.parametrize("text", ["ns.t\n", "ns\n.t", "ns.t\r"])
def test_names_with_line_breaks_are_refused(text: str) -> None:
    with pytest.raises(UserInputError, match="not a valid name"):
        TableName.parse(text)


def test_a_format_may_be_given_as_its_name() -> None:
    assert parse(jsonl(GOOD), "jsonl", validator()).good.num_rows == 1  # was parsed as Parquet
    with pytest.raises(UserInputError, match="format must be one of jsonl, csv, parquet; got 'xml'"):
        parse(b"<a/>", "xml", validator())
