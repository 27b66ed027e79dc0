"""A table's columns: SQL type names, Delta types, and the ``name TYPE [NOT NULL], …`` schema text."""

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
