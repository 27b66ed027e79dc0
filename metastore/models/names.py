"""Names: identifiers, table names (``namespace.table``), the federation's primary metastore."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from metastore.errors import UserInputError

PRIMARY = "primary"
"""The federation's primary metastore: the one a process starts with (``--metastore``)."""


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def check_identifier(value: str, what: str) -> str:
    """Return ``value`` if it is a plain identifier; otherwise raise naming the fault."""
    if not value:
        raise UserInputError(f"{what} is empty")
    if "/" in value or "\\" in value:
        raise UserInputError(f"{what} {value!r} contains a path separator")
    if ".." in value:
        raise UserInputError(f"{what} {value!r} contains '..'")
    if any(q in value for q in "'\"`"):
        raise UserInputError(f"{what} {value!r} contains a quote")
    if not _IDENT.fullmatch(value):
        raise UserInputError(
            f"{what} {value!r} is not a valid name: use letters, digits and '_', "
            "starting with a letter or '_', at most 128 characters"
        )
    return value


class TableName(BaseModel):
    """``namespace.table``; both parts plain identifiers (they become directory names)."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    table: str

    @classmethod
    def parse(cls, text: str) -> TableName:
        if text.count(".") != 1 or ".." in text:
            for bad in ("/", "\\", "'", '"', "`"):
                if bad in text:
                    check_identifier(text, "table name")
            raise UserInputError(f"table name {text!r} must have the form NAMESPACE.TABLE")
        ns, table = text.split(".")
        return cls(namespace=check_identifier(ns, "namespace"), table=check_identifier(table, "table"))

    def __str__(self) -> str:
        return f"{self.namespace}.{self.table}"
