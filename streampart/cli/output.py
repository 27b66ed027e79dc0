"""Where a command's result goes: text for people or JSON for programs, chosen once per call.

A command hands its result to the :class:`Output` in its context (``--json`` chose it, see
:mod:`streampart.cli.params`) with a function that prints the result as text; it never asks
which output it has.
"""

from __future__ import annotations

import base64
import json
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeVar

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

T = TypeVar("T")

__all__ = ["JsonOutput", "Output", "TextOutput", "json_value", "listing"]

# What a column that gives way may shrink to before the table no longer fits: a word (a number, a
# state) this long or shorter stays on one line; a longer one (a path, an error) folds over lines.
_GIVING_WAY_MIN = 8


class Output(ABC):
    """A command's results, in one form; people's messages (progress, warnings) go to stderr."""

    def __init__(self) -> None:
        self.console = Console(soft_wrap=True)
        self.err = Console(stderr=True, soft_wrap=True)  # an error stays one line, whatever the width

    @abstractmethod
    def result(self, value: T, text: Callable[[TextOutput, T], None]) -> None:
        """Print a command's result: ``value`` as JSON, or as ``text`` prints it."""

    @abstractmethod
    def rows(self, rows: Iterable[Any], text: Callable[[TextOutput], None]) -> None:
        """Print a stream of results: one JSON value a line, read lazily, or as ``text`` prints them."""

    @abstractmethod
    def note(self, message: str) -> None:
        """A line for people saying what was done, from a command that has no result to print."""

    def warn(self, message: str) -> None:
        """A warning, on stderr as it is (no markup)."""
        self.err.print(message, highlight=False, markup=False)


class TextOutput(Output):
    """Rich text on stdout."""

    def result(self, value: T, text: Callable[[TextOutput, T], None]) -> None:
        text(self, value)

    def rows(self, rows: Iterable[Any], text: Callable[[TextOutput], None]) -> None:
        text(self)

    def note(self, message: str) -> None:
        self.console.print(message)

    def table(self, table: Table) -> None:
        """Print a :func:`listing`: as a table if its name columns fit whole beside the others shrunk
        to a word, else (a narrow terminal, long names) as one record per row, a field a line."""
        console = self.console
        whole = [c.no_wrap for c in table.columns]
        need = 0
        for column, keep in zip(table.columns, whole, strict=True):
            sizes = [console.measure(r) for r in (column.header, *column.cells)]
            width = max(m.maximum for m in sizes) if keep else max(m.minimum for m in sizes)
            need += (width if keep else min(width, _GIVING_WAY_MIN)) + 2  # padding: a space each side
        need += len(table.columns) + 1 if table.box else 0  # the vertical lines
        if need <= console.width:
            console.print(table)
            return
        cells = [list(column.cells) for column in table.columns]
        for i in range(table.row_count):
            first = cells[0][i]
            title = Text(f"{table.columns[0].header}: " if not whole[0] else "")  # a name needs no label
            lines: list[RenderableType] = [
                title.append(console.render_str(first, style="bold")) if isinstance(first, str) else first
            ]
            for column, values in zip(table.columns[1:], cells[1:], strict=True):
                value: RenderableType = values[i]
                if isinstance(value, str) and not value.strip():
                    continue  # an empty cell: nothing to say
                if isinstance(value, str):
                    lines.append(Text("  ").append(f"{column.header}: ").append(console.render_str(value)))
                else:
                    lines.append(Text(f"  {column.header}:"))
                    lines.append(value)
            for line in lines:  # a name or path wider than the terminal runs on, whole (no line break)
                console.print(line, soft_wrap=True)


def listing(*headers: str, whole: Collection[str] | None = None) -> Table:
    """A table for :meth:`TextOutput.table`: rows of names and what is known of them.

    Args:
        *headers: The columns' titles.
        whole: The columns that hold names (a table's, a partition's; [default: the first]): never
            wrapped nor cut. Every other column gives way when the terminal is narrow: it wraps
            between words and folds a longer word (a path) over lines; nothing is cut with "…".
    """
    table = Table(*headers)
    keep = {headers[0]} if whole is None else set(whole)
    for column in table.columns:
        if column.header in keep:
            column.no_wrap = True
        else:
            column.overflow = "fold"
    return table


class JsonOutput(Output):
    """One JSON value a line on stdout, flushed at once (a reader sees each as it is written)."""

    def result(self, value: T, text: Callable[[TextOutput, T], None]) -> None:
        self._emit(value)

    def rows(self, rows: Iterable[Any], text: Callable[[TextOutput], None]) -> None:
        for row in rows:
            self._emit(row)

    def note(self, message: str) -> None:
        self.err.print(message)  # stdout holds JSON only

    @staticmethod
    def _emit(value: Any) -> None:
        sys.stdout.write(json.dumps(value, default=json_value) + "\n")
        sys.stdout.flush()


def json_value(value: Any) -> Any:
    """A JSON value for what :mod:`json` cannot encode (instants as ISO-8601 UTC, bytes as base64)."""
    if isinstance(value, datetime):
        from metastore.models import iso
        from streampart.query import from_spark

        return iso(from_spark(value))
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    return str(value)
