"""Shares: named lists of tables and links an admin offers to Delta Sharing recipients."""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from metastore.errors import UserInputError
from metastore.models.names import TableName

_SHARE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,127}$")


def check_share_name(name: str) -> str:
    """A share's name: letters, digits, ``_`` and ``-``, starting with a letter or ``_``; at most 128."""
    if not _SHARE_NAME.fullmatch(name or ""):
        raise UserInputError(
            f"share name {name!r} is not valid: use letters, digits, '_' and '-', starting with a "
            "letter or '_', at most 128 characters"
        )
    return name


class Share(BaseModel):
    """A share and what it holds: tables and links, by name (one that is dropped drops out of it)."""

    model_config = ConfigDict(frozen=True)

    id: int
    name: str
    comment: str | None
    created_at: datetime
    tables: tuple[TableName, ...] = ()
