"""Keyed tables: a primary key, what orders a key's versions, and which records delete a key.

A keyed table holds one current row per key. Every record written to it is a *version* of its
key: an upsert, or — when the table has an op column and the record's op is one of the delete
values — a delete. The version that wins is the greatest by the sequence column (``sequence_by``,
if the table has one), then by arrival: the Delta version whose commit added the row, then the
row's place in that commit (``ARRIVAL`` below). A key whose winning version is a delete has no row.

:class:`Keys` is what a table records; :func:`check_keys` checks it against the table's columns
when the table is made (or altered while empty).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from metastore.errors import UserInputError
from metastore.models.columns import Column

# Debezium's letters and SQL's verbs: what a plain format's op column says by default.
DEFAULT_UPSERT_OPS = ("c", "r", "u", "INSERT", "UPDATE")
DEFAULT_DELETE_OPS = ("d", "DELETE")

# Types a key or a sequence may not have: a float's equality and order are not a key's (NaN, -0.0),
# and a binary value orders by bytes nobody reads.
_UNKEYABLE = {"float", "double", "binary"}
_UNORDERED = {"boolean", "binary"}

# The add actions of a keyed table's chunk commits carry their place in the log under this tag:
# ``<commit version> * ARRIVAL_SPAN + <the add's place in the commit>``; files written by anything
# else (a roll, a delete's rewrite) hold it per row, in ARRIVAL_COLUMN.
ARRIVAL_TAG = "streampart.arrival"
ARRIVAL_SPAN = 1 << 20
ARRIVAL_COLUMN = "__sp_arrival"

# A table with history keeps every version of a key as a row, valid from its sequence value until
# the next version's (None: it is the key's current row): these two columns, added by the table.
VALID_FROM, VALID_TO = "valid_from", "valid_to"


def arrival_of(version: int, place: int) -> int:
    """The arrival of the rows of the ``place``-th add of commit ``version`` (0-based)."""
    if not 0 <= place < ARRIVAL_SPAN:
        raise ValueError(f"a commit of more than {ARRIVAL_SPAN} files")
    return version * ARRIVAL_SPAN + place


class Keys(BaseModel):
    """A keyed table's key, sequence and op column (None on a table of appends)."""

    model_config = ConfigDict(frozen=True)

    columns: tuple[str, ...] = Field(description="The primary key's columns (NOT NULL).")
    sequence_by: str | None = Field(
        None, description="The column whose greatest value wins (ties: the later arrival); None: arrival."
    )
    op_column: str | None = Field(None, description="The column saying whether a record upserts or deletes.")
    upsert_ops: tuple[str, ...] = DEFAULT_UPSERT_OPS
    delete_ops: tuple[str, ...] = DEFAULT_DELETE_OPS
    history: bool = Field(False, description="Keep every version with valid_from/valid_to (SCD type 2).")

    def describe(self) -> str:
        text = f"primary key ({', '.join(self.columns)})"
        if self.history:
            text += f", every version kept in {self.sequence_by} order ({VALID_FROM}, {VALID_TO})"
        else:
            text += f", newest by {self.sequence_by}" if self.sequence_by else ", newest by arrival"
        if self.op_column:
            text += f", deletes where {self.op_column} in ({', '.join(self.delete_ops)})"
        return text


def keys_from_options(
    primary_key: str | None,
    sequence_by: str | None = None,
    op_column: str | None = None,
    delete_ops: str | None = None,
    upsert_ops: str | None = None,
    history: bool | str | None = None,
    *,
    flag: str = "--{}",
) -> Keys | None:
    """The key a table's options declare (``table create``'s flags, ``TBLPROPERTIES``); None: a table
    of appends. ``flag`` spells an option's name in messages (``"--{}"`` → ``--primary-key``).

    Raises:
        UserInputError: a keyed table's option without a key, or a list that is not one.
    """

    def named(option: str) -> str:
        return flag.format(option.replace("_", "-") if flag.startswith("--") else option)

    if isinstance(history, str):  # a TBLPROPERTIES value
        if history.strip().lower() not in ("true", "false"):
            raise UserInputError(f"{named('history')} is true or false, not {history!r}")
        history = history.strip().lower() == "true"
    if primary_key is None:
        given = [
            n
            for n, v in (("sequence_by", sequence_by), ("op_column", op_column), ("delete_ops", delete_ops),
                         ("upsert_ops", upsert_ops), ("history", history or None))
            if v is not None
        ]  # fmt: skip
        if given:
            raise UserInputError(
                f"{named(given[0])} applies to keyed tables only: give {named('primary_key')} too"
            )
        return None
    more: dict[str, tuple[str, ...]] = {}
    if delete_ops is not None:
        more["delete_ops"] = parse_ops(delete_ops, named("delete_ops"))
    if upsert_ops is not None:
        more["upsert_ops"] = parse_ops(upsert_ops, named("upsert_ops"))
    return Keys(
        columns=parse_key_columns(primary_key, named("primary_key")),
        sequence_by=sequence_by or None,
        op_column=op_column or None,
        history=bool(history),
        **more,
    )


def parse_key_columns(text: str, what: str = "--primary-key") -> tuple[str, ...]:
    """``"a, b"`` → ``("a", "b")``; a name given twice or an empty list is refused."""
    names = tuple(n.strip() for n in text.split(","))
    if not names or any(not n for n in names):
        raise UserInputError(f"{what}: give one or more column names separated by commas, not {text!r}")
    if len({n.lower() for n in names}) != len(names):
        raise UserInputError(f"{what}: a column is named twice in {text!r}")
    return names


def parse_ops(text: str, what: str) -> tuple[str, ...]:
    ops = tuple(v.strip() for v in text.split(","))
    if not ops or any(not v for v in ops):
        raise UserInputError(f"{what}: give one or more values separated by commas, not {text!r}")
    return ops


def check_keys(keys: Keys, columns: Sequence[Column], time_column: str) -> tuple[Column, ...]:
    """Check ``keys`` against a table's ``columns``; the columns with the key's made NOT NULL (and with
    ``history``, :data:`VALID_FROM` and :data:`VALID_TO` added, of the sequence column's type).

    Raises:
        UserInputError: naming the column or value at fault.
    """
    by_name = {c.name.lower(): c for c in columns}

    def column(name: str, what: str) -> Column:
        found = by_name.get(name.lower())
        if found is None:
            raise UserInputError(
                f"{what} {name!r} is not a column of the table (its columns: {_names(columns)})"
            )
        if found.name != name:
            raise UserInputError(f"{what} {name!r}: the column is spelled {found.name!r}")
        return found

    required = set()
    for name in keys.columns:
        c = column(name, "primary key column")
        if c.type in _UNKEYABLE:
            raise UserInputError(
                f"primary key column {name!r} is {c.sql_type}: a key may not be a FLOAT, DOUBLE or BINARY"
            )
        required.add(name)
    if keys.sequence_by is not None:
        c = column(keys.sequence_by, "--sequence-by")
        if c.type in _UNORDERED:
            raise UserInputError(f"--sequence-by {c.name!r} is {c.sql_type}, which has no useful order")
        if c.name in required:
            raise UserInputError(
                f"--sequence-by {c.name!r} is a primary key column: it must vary between versions"
            )
        required.add(c.name)
    if keys.op_column is not None:
        c = column(keys.op_column, "--op-column")
        if c.type != "string":
            raise UserInputError(f"--op-column {c.name!r} must be a STRING column, not {c.sql_type}")
        if c.name in keys.columns or c.name == keys.sequence_by:
            raise UserInputError(f"--op-column {c.name!r} is also a key or sequence column")
        overlap = set(keys.upsert_ops) & set(keys.delete_ops)
        if overlap:
            raise UserInputError(f"op value(s) {', '.join(sorted(overlap))} both upsert and delete")
    elif keys.delete_ops != DEFAULT_DELETE_OPS or keys.upsert_ops != DEFAULT_UPSERT_OPS:
        raise UserInputError(
            "--delete-ops and --upsert-ops need --op-column: the column the records carry them in"
        )
    del time_column  # the key may hold the time column or not: both are exact
    out = tuple(c.model_copy(update={"nullable": False}) if c.name in required else c for c in columns)
    if keys.history:
        if keys.sequence_by is None:
            raise UserInputError(
                "--history needs --sequence-by: a version is valid from its sequence value until the next "
                "version's"
            )
        taken = [n for n in (VALID_FROM, VALID_TO) if n in by_name]
        if taken:
            raise UserInputError(
                f"--history adds the columns {VALID_FROM} and {VALID_TO}; the table has {', '.join(taken)} "
                "already: rename it"
            )
        kind = by_name[keys.sequence_by.lower()].type
        out += (Column(name=VALID_FROM, type=kind), Column(name=VALID_TO, type=kind))
    return out


def _names(columns: Sequence[Column]) -> str:
    return ", ".join(c.name for c in columns)
