"""A command's input file (``write``, ``dev produce``): a path, or ``-`` for standard input; every
way it cannot be read is one user error naming it."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from metastore.errors import UserInputError


def check_input(file: Path) -> None:
    """A user error naming ``file`` unless it is ``-`` (standard input) or a file that exists: cheap,
    so a command tells a typo before its heavy imports."""
    if str(file) == "-":
        return
    if not file.exists():
        raise UserInputError(f"file {file} does not exist")
    if file.is_dir():
        raise UserInputError(f"{file} is a directory, not a file")


@contextlib.contextmanager
def input_file(file: Path) -> Iterator[IO[bytes]]:
    """``file`` (``-``: standard input) opened for reading, or a user error naming it."""
    if str(file) == "-":
        yield sys.stdin.buffer
        return
    try:
        handle = open(file, "rb")  # noqa: SIM115 (closed below, after the caller's reading)
    except FileNotFoundError:
        raise UserInputError(f"file {file} does not exist") from None
    except IsADirectoryError:
        raise UserInputError(f"{file} is a directory, not a file") from None
    except OSError as exc:
        raise UserInputError(f"cannot read {file}: {exc.strerror or exc}") from None
    with handle:
        yield handle
