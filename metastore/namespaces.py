"""Namespaces: self-contained virtual warehouses (HIVE-2989's "namespaces", on streampart).

A namespace owns tables (``NS.TABLE``) and links (``NS.LOCAL``, imports of other namespaces'
tables, see :mod:`metastore.links`); tables and links share one name space inside it. It is
the unit of isolation and of capacity: an **isolated** namespace's queries read only its own
tables and its links, and a **quota** caps the bytes its tables hold (checked at every chunk
commit, see ``metastore/store/namespaces.py``). Every namespace a table uses has a row; one is
made on first use unless ``namespaces.require_explicit`` is set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from metastore.errors import UserInputError
from metastore.models import check_identifier

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?i?B?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1}
for _k, _p in zip("KMGTP", range(1, 6), strict=True):
    _UNITS[f"{_k}IB"] = 1024**_p  # binary: KiB, MiB, GiB, …
    _UNITS[f"{_k}B"] = 1000**_p  # decimal: KB, MB, GB, …
    _UNITS[_k] = 1024**_p  # a bare K/M/G/T/P is binary, as in Spark's and the JVM's sizes


def parse_size(text: str | int, what: str = "size") -> int:
    """A byte count: ``500GiB``, ``1.5TB``, ``10G``, ``123456`` (plain bytes).

    Raises:
        UserInputError: naming ``what`` and the value.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE.match(str(text))
        unit = m.group(2).upper() if m else None
        if m is None or unit not in _UNITS:
            raise UserInputError(
                f"{what} {text!r} is not a size such as 500GiB, 1.5TB, 10G or a number of bytes"
            )
        value = int(float(m.group(1)) * _UNITS[unit])
    if value < 0:
        raise UserInputError(f"{what} {text!r} is negative")
    return value


def format_size(n: int | None) -> str:
    """``n`` bytes for people: ``1.5 GiB``, ``512 B`` (None: ``none``)."""
    if n is None:
        return "none"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def check_namespace(name: str) -> str:
    """A namespace's name: a plain identifier (it becomes a directory name)."""
    return check_identifier(name, "namespace")


class Namespace(BaseModel):
    """A namespace as recorded in the metastore."""

    model_config = ConfigDict(frozen=True)

    name: str
    isolated: bool = False
    quota_bytes: int | None = None  # None: no quota
    description: str = ""
    created_at: datetime
    moving_to: str | None = None  # a move to that metastore fences its writes (see metastore/moves.py)
    default_retain: timedelta | None = None  # the retention of its tables that set none (None: none)


@dataclass
class Holding:
    """What one table or link of a namespace holds (or shows) at one Delta version."""

    name: str
    kind: str  # main, dead-letter, late, or link
    version: int
    standard_bytes: int = 0
    standard_files: int = 0
    standard_rows: int = 0
    streaming_bytes: int = 0
    streaming_files: int = 0
    streaming_rows: int = 0

    @property
    def bytes(self) -> int:
        return self.standard_bytes + self.streaming_bytes


@dataclass
class Usage:
    """A namespace's capacity: what it owns (charged) and what it reads through links (shown).

    A partition shared through links is charged once, to the namespace that owns its table.
    """

    namespace: str
    quota_bytes: int | None
    owned: list[Holding] = field(default_factory=list)
    linked: list[Holding] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # a link whose source cannot be read

    def total(self, holdings: list[Holding], attr: str) -> int:
        return sum(getattr(h, attr) for h in holdings)

    @property
    def owned_bytes(self) -> int:
        return self.total(self.owned, "bytes")

    @property
    def linked_bytes(self) -> int:
        return self.total(self.linked, "bytes")

    def to_json(self) -> dict[str, object]:
        def part(hs: list[Holding], kind: str) -> dict[str, int]:
            return {
                "bytes": self.total(hs, f"{kind}_bytes"),
                "files": self.total(hs, f"{kind}_files"),
                "rows": self.total(hs, f"{kind}_rows"),
            }

        return {
            "namespace": self.namespace,
            "quota_bytes": self.quota_bytes,
            "owned": {
                "bytes": self.owned_bytes,
                "standard": part(self.owned, "standard"),
                "streaming": part(self.owned, "streaming"),
                "tables": [vars(h) | {"bytes": h.bytes} for h in self.owned],
            },
            "linked": {
                "bytes": self.linked_bytes,
                "standard": part(self.linked, "standard"),
                "streaming": part(self.linked, "streaming"),
                "links": [vars(h) | {"bytes": h.bytes} for h in self.linked],
            },
            "errors": self.errors,
        }
