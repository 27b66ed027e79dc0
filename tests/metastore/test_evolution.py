"""Schema changes (metastore/models/evolution.py): the widening lattice and the checks of an ALTER."""

from __future__ import annotations

import pytest

from metastore.errors import UserInputError
from metastore.models import (
    Column,
    SchemaEvolution,
    parse_column_change,
    parse_schema,
    plan_alter,
    widening_refusal,
)

INTEGERS = ["byte", "short", "integer", "long"]

# every step up within the integers, float→double, decimal precision up at the same scale, identity
ALLOWED = [
    *[(a, b) for i, a in enumerate(INTEGERS) for b in INTEGERS[i + 1 :]],
    ("float", "double"),
    ("decimal(5,2)", "decimal(7,2)"),
    ("decimal(5,2)", "decimal(12,2)"),  # INT32 storage to INT64: measured exact
    ("decimal(10,2)", "decimal(38,2)"),
    ("decimal(1,0)", "decimal(38,0)"),
    *[
        (t, t)
        for t in [
            *INTEGERS,
            "float",
            "double",
            "boolean",
            "binary",
            "string",
            "date",
            "timestamp",
            "decimal(9,3)",
        ]
    ],
]

# (old, new, words the reason must hold)
REFUSED = [
    # narrowing
    *[(b, a, ["narrower"]) for i, a in enumerate(INTEGERS) for b in INTEGERS[i + 1 :]],
    ("double", "float", ["narrower"]),
    ("decimal(7,2)", "decimal(5,2)", ["narrower"]),
    # a decimal's scale: polars cannot read the old files
    ("decimal(5,2)", "decimal(8,4)", ["scale", "polars", "new column"]),
    ("decimal(8,4)", "decimal(8,2)", ["scale", "polars", "new column"]),
    ("decimal(5,2)", "decimal(5,3)", ["scale", "polars", "new column"]),
    # date→timestamp: Spark and polars cannot read old DATE files as TIMESTAMP
    ("date", "timestamp", ["Spark", "polars", "DATE", "TIMESTAMP", "new column"]),
    # a change of kind
    ("timestamp", "date", ["kind"]),
    ("string", "integer", ["kind", "STRING", "INT"]),
    ("integer", "string", ["kind"]),
    ("integer", "double", ["kind"]),
    ("long", "decimal(20,0)", ["kind"]),
    ("decimal(5,2)", "double", ["kind"]),
    ("float", "decimal(10,2)", ["kind"]),
    ("long", "timestamp", ["kind"]),
    ("date", "string", ["kind"]),
    *[
        (t, other, ["kind"])
        for t in ["boolean", "binary", "string"]
        for other in ["boolean", "binary", "string", "long"]
        if t != other
    ],
    *[(other, t, ["kind"]) for t in ["boolean", "binary"] for other in ["byte", "double", "date"]],
]


@pytest.mark.parametrize(("old", "new"), ALLOWED)
def test_a_widening_readers_read_exactly_is_allowed_in_place(old: str, new: str) -> None:
    assert widening_refusal(old, new) is None


@pytest.mark.parametrize(("old", "new", "words"), REFUSED)
def test_a_change_old_files_do_not_survive_is_refused_with_its_reason(
    old: str, new: str, words: list[str]
) -> None:
    reason = widening_refusal(old, new)
    assert reason is not None and "\n" not in reason
    for word in words:
        assert word in reason, (word, reason)


def test_schema_evolution_has_the_three_settings_the_cli_takes() -> None:
    assert [s.value for s in SchemaEvolution] == ["none", "add-columns", "add-and-widen"]
    assert SchemaEvolution("add-and-widen") is SchemaEvolution.ADD_AND_WIDEN


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("coupon STRING", Column(name="coupon", type="string")),
        ("qty BIGINT", Column(name="qty", type="long")),
        ("amount decimal(7, 2)", Column(name="amount", type="decimal(7,2)")),
        ("flag BOOLEAN NOT NULL", Column(name="flag", type="boolean", nullable=False)),
    ],
)
def test_a_column_change_is_parsed_as_one_column_of_a_schema(text: str, expected: Column) -> None:
    assert parse_column_change(text, "--add-column") == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("coupon", "not 'NAME TYPE'"),
        ("coupon STRANG", "unknown type"),
        ("a INT, b INT", "one column"),
        ("", "empty"),
        ("1x INT", "not 'NAME TYPE'"),
    ],
)
def test_a_column_change_that_is_not_one_column_is_refused_naming_the_option(text: str, words: str) -> None:
    with pytest.raises(UserInputError, match="--widen-column") as exc:
        parse_column_change(text, "--widen-column")
    assert words in str(exc.value)


COLUMNS = parse_schema(
    "id BIGINT NOT NULL, ts TIMESTAMP, qty INT, price FLOAT, amount DECIMAL(5,2), msg STRING"
)


def _cols(text: str) -> list[Column]:
    return list(parse_schema(text)) if text else []


def test_an_alter_widens_in_place_and_adds_at_the_end() -> None:
    after = plan_alter(
        COLUMNS,
        "ts",
        "__partition",
        add=_cols("coupon STRING, score DOUBLE"),
        widen=_cols("QTY BIGINT, price DOUBLE, amount DECIMAL(9,2)"),
    )
    assert after == parse_schema(
        "id BIGINT NOT NULL, ts TIMESTAMP, qty BIGINT, price DOUBLE, amount DECIMAL(9,2), msg STRING, "
        "coupon STRING, score DOUBLE"
    )


def test_a_widening_keeps_a_not_null_column_not_null() -> None:
    after = plan_alter(parse_schema("ts TIMESTAMP, n INT NOT NULL"), "ts", "p", widen=_cols("n BIGINT"))
    assert after[1] == Column(name="n", type="long", nullable=False)


# (add, widen, the words of each problem) — every problem is named, none stops the check of the others
BAD_ALTERS = [
    ("msg STRING", "", ["'msg' exists already"]),
    ("MSG STRING", "", ["'MSG' differs from the existing column 'msg' only in case"]),
    ("__partition TIMESTAMP", "", ["partition column"]),
    ("TS DATE", "", ["time column"]),
    ("coupon STRING NOT NULL", "", ["new columns are nullable: old rows have no value"]),
    ("coupon STRING, Coupon INT", "", ["added twice"]),
    ("", "nope BIGINT", ["no column 'nope' to widen"]),
    ("", "ts DATE", ["'ts' is the time column"]),
    ("", "__partition TIMESTAMP", ["partition column"]),
    ("", "qty SMALLINT", ["column 'qty'", "narrower"]),
    ("", "qty STRING", ["column 'qty'", "kind"]),
    ("", "amount DECIMAL(8,4)", ["column 'amount'", "polars"]),
    ("", "msg STRING NOT NULL", ["cannot become NOT NULL"]),
    ("", "qty BIGINT, qty BIGINT", ["widened twice"]),
    ("", "", ["nothing to change"]),
    (
        "msg STRING, coupon INT NOT NULL",
        "nope INT, price INT, amount DECIMAL(9,3)",
        ["'msg' exists already", "nullable", "no column 'nope'", "column 'price'", "column 'amount'"],
    ),
]


@pytest.mark.parametrize(("add", "widen", "words"), BAD_ALTERS)
def test_an_alter_with_problems_is_refused_naming_every_one(add: str, widen: str, words: list[str]) -> None:
    try:
        added, widened = _cols(add), _cols(widen)
    except UserInputError:  # duplicates within one text: built by hand instead
        added = [parse_column_change(t, "--add-column") for t in add.split(", ")] if add else []
        widened = [parse_column_change(t, "--widen-column") for t in widen.split(", ")] if widen else []
    with pytest.raises(UserInputError) as exc:
        plan_alter(COLUMNS, "ts", "__partition", add=added, widen=widened)
    for word in words:
        assert word in str(exc.value), (word, str(exc.value))


def test_an_added_column_with_an_invalid_name_is_refused() -> None:
    bad = Column(name="no-dash", type="string")
    with pytest.raises(UserInputError, match="'no-dash' is not a valid name"):
        plan_alter(COLUMNS, "ts", "__partition", add=[bad])
