"""Old data made to fit the columns of now: ``conform`` (metastore/delta/arrow.py)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from metastore.delta.arrow import conform
from metastore.errors import TableIntegrityError
from metastore.models import parse_schema

OLD = pa.table(
    {
        "id": pa.array([1, 2], pa.int64()),
        "qty": pa.array([-(2**31), 2**31 - 1], pa.int32()),
        "small": pa.array([-128, None], pa.int8()),
        "price": pa.array([0.1, 3.0e38], pa.float32()),
        "amount": pa.array([Decimal("-999.99"), Decimal("999.99")], pa.decimal128(5, 2)),
        "msg": pa.array(["a", "b"]),
    }
)
NOW = parse_schema(
    "msg STRING, id BIGINT, qty BIGINT, small BIGINT, price DOUBLE, amount DECIMAL(9,2), coupon STRING, n INT"
)


@pytest.mark.parametrize("as_batch", [False, True])
def test_old_data_gets_the_new_columns_as_nulls_in_order_with_exact_widened_values(as_batch: bool) -> None:
    data = OLD.to_batches()[0] if as_batch else OLD
    got = conform(data, NOW)
    assert isinstance(got, pa.RecordBatch if as_batch else pa.Table)
    assert got.schema == pa.schema(
        [
            ("msg", pa.string()),
            ("id", pa.int64()),
            ("qty", pa.int64()),
            ("small", pa.int64()),
            ("price", pa.float64()),
            ("amount", pa.decimal128(9, 2)),
            ("coupon", pa.string()),
            ("n", pa.int32()),
        ]
    )
    assert got.to_pylist() == [
        {
            "msg": "a",
            "id": 1,
            "qty": -(2**31),
            "small": -128,
            "price": 0.10000000149011612,  # the float 0.1, exactly
            "amount": Decimal("-999.99"),
            "coupon": None,
            "n": None,
        },
        {
            "msg": "b",
            "id": 2,
            "qty": 2**31 - 1,
            "small": None,
            "price": 3.0000000054977558e38,
            "amount": Decimal("999.99"),
            "coupon": None,
            "n": None,
        },
    ]


def test_columns_the_table_no_longer_names_are_left_out() -> None:
    got = conform(OLD, parse_schema("id BIGINT"))
    assert got.column_names == ["id"] and got.column("id").to_pylist() == [1, 2]


def test_data_already_in_the_columns_types_is_unchanged() -> None:
    columns = parse_schema("id BIGINT, qty INT, small TINYINT, price FLOAT, amount DECIMAL(5,2), msg STRING")
    assert conform(OLD, columns).equals(OLD)


@pytest.mark.parametrize(
    ("columns", "words"),
    [
        ("qty SMALLINT", ["'qty'", "narrower"]),
        ("price INT", ["'price'", "kind"]),
        ("amount DECIMAL(8,4)", ["'amount'", "scale"]),
        ("msg BIGINT", ["'msg'", "kind"]),
        ("id STRING", ["'id'", "kind"]),
        ("coupon STRING NOT NULL", ["'coupon'", "NOT NULL"]),
    ],
)
def test_data_that_does_not_widen_to_the_columns_is_refused(columns: str, words: list[str]) -> None:
    with pytest.raises(TableIntegrityError) as exc:
        conform(OLD, parse_schema(columns))
    for word in words:
        assert word in str(exc.value)


def test_a_type_that_is_not_a_delta_type_is_refused() -> None:
    data = pa.table({"id": pa.array([1], pa.uint32())})
    with pytest.raises(TableIntegrityError, match="not a Delta type"):
        conform(data, parse_schema("id BIGINT"))


@pytest.mark.parametrize(
    ("layout", "column"),
    [
        (pa.large_string(), "s STRING"),
        (pa.string_view(), "s STRING"),  # delta-rs appending a polars frame stores this one
        (pa.large_binary(), "s BINARY"),
        (pa.binary_view(), "s BINARY"),
    ],
)
def test_another_arrow_layout_of_the_same_delta_type_is_cast(layout: pa.DataType, column: str) -> None:
    values = ["a", None] if "STRING" in column else [b"a", None]
    got = conform(pa.table({"s": pa.array(values, layout)}), parse_schema(column))
    assert got.column("s").type == (pa.string() if "STRING" in column else pa.binary())
    assert got.column("s").to_pylist() == values
