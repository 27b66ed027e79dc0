"""What a listing or a stat of stored files answers, the same for every backend."""

from __future__ import annotations

from typing import NamedTuple


class FileStat(NamedTuple):
    size: int
    mtime_ms: int


class Entry(NamedTuple):
    """A file or directory directly in a listed directory (a bucket's common prefix is a directory,
    with no time of its own: ``mtime_ms`` 0)."""

    name: str
    is_dir: bool
    size: int
    mtime_ms: int
