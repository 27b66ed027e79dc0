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
from collections.abc import Callable, Iterable
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeVar

from rich.console import Console

T = TypeVar("T")

__all__ = ["JsonOutput", "Output", "TextOutput", "json_value"]


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
