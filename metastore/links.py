"""Links: a namespace imports a table of another namespace, or some of its partitions, without copying.

HIVE-2989's links, on streaming tables. A link ``A.LOCAL`` points at ``B.T``; a read of it reads
B's own files at one pinned Delta version of B, keeping only the partitions the link admits:

- **dynamic** (the default) follows the source: a partition appears in the link at the very
  Delta version whose sweep made it standard in B (its files moved from ``_staging/`` to the
  partition's directory in one commit), optionally bounded by a range of partition values;
- **static** holds exactly the partitions named (added and dropped by hand); one that is still
  streaming in B appears once it is rolled;
- ``include_streaming`` also shows the source's open streaming partitions (committed chunks
  only: exactly the staged files of the pinned version), with the source's snapshot guarantee;
- ``retention`` hides partitions whose period ended more than that long before the read.

Whether a partition is standard is read from the pinned snapshot itself (where its files are),
never from the metastore at another instant, so a link and its source read in one query agree
row for row. Links are read-only, and point at tables only (never at links), so they form no
chains and no cycles.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from metastore.durations import format_duration
from metastore.errors import UserInputError
from metastore.models import Table, TableName, check_identifier, iso, parse_instant, period_start

if TYPE_CHECKING:
    from metastore.delta.files import LiveFile


class LinkMode(StrEnum):
    DYNAMIC = "dynamic"
    STATIC = "static"


# At most this many partitions are listed by one static link's range (a typo such as a range of
# years over a one-second roll interval must not write millions of rows).
MAX_STATIC_PARTITIONS = 100_000


class PartitionRange(BaseModel):
    """Partition values ``start <= value < end`` (half-open, like Python's ranges); None: unbounded."""

    model_config = ConfigDict(frozen=True)

    start: datetime | None = None
    end: datetime | None = None

    @classmethod
    def parse(cls, text: str) -> PartitionRange:
        """``FROM..TO``, either end may be empty: ``2026-11-01..2026-12-01``, ``2026-11-01T00:00Z..``."""
        start, sep, end = text.partition("..")
        if not sep or (not start.strip() and not end.strip()):
            raise UserInputError(
                f"partition range {text!r} must have the form FROM..TO (ISO-8601 times; either may be "
                "empty), e.g. 2026-11-01..2026-12-01"
            )
        out = cls(
            start=parse_instant(start, "range start") if start.strip() else None,
            end=parse_instant(end, "range end") if end.strip() else None,
        )
        if out.start is not None and out.end is not None and out.end <= out.start:
            raise UserInputError(f"partition range {text!r} is empty: its end is not after its start")
        return out

    def __contains__(self, value: datetime) -> bool:
        return (self.start is None or value >= self.start) and (self.end is None or value < self.end)

    def __str__(self) -> str:
        return f"{iso(self.start) if self.start else ''}..{iso(self.end) if self.end else ''}"

    def values(self, table: Table) -> list[datetime]:
        """The partition values of ``table`` in this range (a static link's list); both ends needed."""
        if self.start is None or self.end is None:
            raise UserInputError("a static link's --partitions range needs both ends (FROM..TO)")
        first = period_start(self.start, table.roll_every)
        if first < self.start:
            first += table.roll_every
        count = max(0, -(-(self.end - first) // table.roll_every))
        if count > MAX_STATIC_PARTITIONS:
            raise UserInputError(
                f"partition range {self} holds {count} partitions of {table.name} (it rolls every "
                f"{format_duration(table.roll_every)}); a static link lists at most {MAX_STATIC_PARTITIONS}"
            )
        return [first + k * table.roll_every for k in range(count)]


class LinkSpec(BaseModel):
    """What a user asks for when creating a link."""

    model_config = ConfigDict(frozen=True)

    name: TableName  # A.LOCAL
    source: TableName  # B.T
    mode: LinkMode = LinkMode.DYNAMIC
    include_streaming: bool = False
    retention: timedelta | None = None
    range: PartitionRange | None = None  # dynamic links: admit only these values
    partitions: tuple[datetime, ...] = ()  # static links: exactly these values


class Link(LinkSpec):
    """A link as recorded in the metastore."""

    id: int
    # The source's row id when it shares the link's metastore (None: it does not, or it was
    # dropped with --force); its uid finds it anywhere in the federation, and after a move.
    source_table_id: int | None
    created_at: datetime
    source_uid: str | None = None

    def admits(self, value: datetime, standard: bool, source: Table, now: datetime) -> bool:
        """Whether a partition of the source, standard or streaming at the read's version, shows here."""
        if not standard and not self.include_streaming:
            return False
        if self.mode is LinkMode.STATIC and value not in self.partitions:
            return False
        if self.range is not None and value not in self.range:
            return False
        return self.retention is None or source.period_end(value) > now - self.retention

    def filter(self, files: Iterable[LiveFile], source: Table, now: datetime) -> list[LiveFile]:
        """The files of one snapshot of the source that this link shows at ``now``."""
        return [f for f in files if self.admits(f.partition, not f.staged, source, now)]

    def describe_rule(self) -> str:
        """The partitions it admits, in words."""
        if self.mode is LinkMode.STATIC:
            what = f"{len(self.partitions)} listed partition(s)"
        else:
            what = "every standard partition" + (f" in {self.range}" if self.range else "")
        if self.include_streaming:
            what += ", and the open streaming partition(s)"
        if self.retention is not None:
            what += f", hiding those whose period ended more than {format_duration(self.retention)} ago"
        return what


@dataclass(frozen=True)
class Resolved:
    """What a name read in a query or a describe stands for.

    Attributes:
        name: The catalog name of the reference: the table's, or the link's (``A.LOCAL``).
        table: The table whose files are read (a link's source).
        link: The link, when the name is one.
    """

    name: TableName
    table: Table
    link: Link | None = None


@dataclass(frozen=True)
class Reference:
    """A name as written: ``NS.T``, or in a namespace ``T`` and ``T@B`` (its link to ``B.T``)."""

    namespace: str | None
    name: str
    via: str | None = None  # T@B: the source's namespace B

    @classmethod
    def parse(cls, text: str) -> Reference:
        text = text.strip()
        if text.count("@") == 1 and "." not in text:
            table, via = text.split("@")
            return cls(None, check_identifier(table, "table"), check_identifier(via, "namespace"))
        if "@" in text:
            raise UserInputError(
                f"{text!r}: name a link as TABLE@NAMESPACE (its source) or by its local name, not both"
            )
        if "." not in text:
            return cls(None, check_identifier(text, "table"))
        qualified = TableName.parse(text)
        return cls(qualified.namespace, qualified.table)

    def __str__(self) -> str:
        if self.via is not None:
            return f"{self.name}@{self.via}"
        return f"{self.namespace}.{self.name}" if self.namespace else self.name


def check_static_values(
    source: Table, values: Sequence[datetime], existing: Iterable[datetime] = ()
) -> tuple[datetime, ...]:
    """Partition values a static link lists: each a partition of the source, or one of its period starts.

    (A forced roll opens the next partition at the moment of the roll, not at a period start:
    such a partition is listed by its own value.)
    """
    have = set(existing)
    out = []
    for v in values:
        start = period_start(v, source.roll_every)
        if start != v and v not in have:
            raise UserInputError(
                f"{iso(v)} is not the start of a partition of {source.name} (it rolls every "
                f"{format_duration(source.roll_every)}); did you mean {iso(start)}?"
            )
        out.append(v)
    return tuple(sorted(set(out)))
