"""A table's columns: SQL type names, Delta types, the ``name TYPE [NOT NULL], …`` schema text, and
the names no column may take."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from metastore.errors import UserInputError
from metastore.models.names import check_identifier

SQL_TYPES = {
    "BOOLEAN": "boolean",
    "BOOL": "boolean",
    "TINYINT": "byte",
    "BYTE": "byte",
    "SMALLINT": "short",
    "SHORT": "short",
    "INT": "integer",
    "INTEGER": "integer",
    "BIGINT": "long",
    "LONG": "long",
    "FLOAT": "float",
    "REAL": "float",
    "DOUBLE": "double",
    "STRING": "string",
    "VARCHAR": "string",
    "TEXT": "string",
    "BINARY": "binary",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
}
_DECIMAL = re.compile(r"^DECIMAL\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_COLUMN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s+(.+?)(\s+NOT\s+NULL)?$", re.IGNORECASE)

# Names a column may not take, because a Spark read of the table's files gives them a meaning: a
# data column of one of these names hides or breaks what the read needs (a table read by Spark
# joins each row to its file's partition value by ``_metadata.file_name``). Matched without regard
# to case, as Spark matches names. Refused when a table is created, by ALTER and by schema
# evolution from data; a table whose log holds one already still reads (``snapshot_frame``).
RESERVED_NAMES = {
    "_metadata": "Spark's file sources read each file's path, name and size under that name",
}
RESERVED_PREFIXES = {
    "_tmp_metadata_": "Spark's Parquet reader names its temporary columns so (_tmp_metadata_row_index)",
    "__sp_": "streampart names the columns of its own reads so",
}


def reserved_refusal(name: str) -> str | None:
    """Why ``name`` may not be a column's name although it is a plain identifier (None: it may).

    The one rule for every way a column is made (``table create``, ``ALTER``, ``CREATE TABLE … AS``,
    the HTTP API, schema evolution from data): see :data:`RESERVED_NAMES` and :data:`RESERVED_PREFIXES`.
    """
    key = name.lower()
    why = RESERVED_NAMES.get(key)
    if why is None:
        why = next((w for prefix, w in RESERVED_PREFIXES.items() if key.startswith(prefix)), None)
    return f"{why}; choose another name" if why is not None else None


def check_column_name(name: str, what: str) -> str:
    """Return ``name`` if a column may take it: a plain identifier that no read reserves.

    Raises:
        UserInputError: naming the column and why (``what`` says which name it is).
    """
    check_identifier(name, what)
    why = reserved_refusal(name)
    if why is not None:
        raise UserInputError(f"{what} {name!r} is reserved: {why}")
    return name


class Column(BaseModel):
    """One column: ``type`` is a Delta primitive type name (``long``, ``timestamp``, ``decimal(p,s)``)."""

    model_config = ConfigDict(frozen=True)

    name: str
    type: str
    nullable: bool = True

    @property
    def sql_type(self) -> str:
        inverse = {
            "boolean": "BOOLEAN",
            "byte": "TINYINT",
            "short": "SMALLINT",
            "integer": "INT",
            "long": "BIGINT",
            "float": "FLOAT",
            "double": "DOUBLE",
            "string": "STRING",
            "binary": "BINARY",
            "date": "DATE",
            "timestamp": "TIMESTAMP",
        }
        return inverse.get(self.type, self.type.upper())


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_schema(ddl: str) -> tuple[Column, ...]:
    """Parse ``"id BIGINT, ts TIMESTAMP, msg STRING NOT NULL"`` into columns.

    Raises:
        UserInputError: naming the column (or position) at fault.
    """
    columns: list[Column] = []
    seen: set[str] = set()
    for position, raw in enumerate(_split_top_level(ddl), start=1):
        item = raw.strip()
        if not item:
            raise UserInputError(f"schema: column {position} is empty (stray comma?)")
        m = _COLUMN.match(item)
        if not m:
            raise UserInputError(f"schema: column {position} {item!r} is not 'NAME TYPE'")
        name, type_text, not_null = m.group(1), m.group(2).strip().upper(), m.group(3)
        check_identifier(name, f"schema: column {position} name")
        if name.lower() in seen:
            raise UserInputError(f"schema: column {name!r} appears twice")
        seen.add(name.lower())
        dec = _DECIMAL.match(type_text)
        if dec:
            precision, scale = int(dec.group(1)), int(dec.group(2))
            if not 1 <= precision <= 38 or scale > precision:
                raise UserInputError(f"schema: column {name!r} has an invalid DECIMAL({precision},{scale})")
            delta_type = f"decimal({precision},{scale})"
        elif type_text in SQL_TYPES:
            delta_type = SQL_TYPES[type_text]
        else:
            known = ", ".join(sorted({*SQL_TYPES, "DECIMAL(p,s)"}))
            raise UserInputError(
                f"schema: column {name!r} has unknown type {type_text!r}; known types: {known}"
            )
        columns.append(Column(name=name, type=delta_type, nullable=not not_null))
    return tuple(columns)


def format_schema(columns: tuple[Column, ...]) -> str:
    return ", ".join(f"{c.name} {c.sql_type}{'' if c.nullable else ' NOT NULL'}" for c in columns)
