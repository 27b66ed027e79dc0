"""Table files on a local (or mounted POSIX) file system: the backend of every plain path.

Atomic writes are a hidden temp file renamed into place; put-if-absent is a hard link to the
target name, which fails if it exists (as delta-rs does it on a local file system).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from metastore.storage.entries import Entry, FileStat


def _tmp(path: str) -> str:
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.{uuid.uuid4().hex}.tmp")


def read(path: str) -> bytes:
    return Path(path).read_bytes()


def write(path: str, data: bytes) -> None:
    _via_tmp(path, data, os.replace)


def create(path: str, data: bytes) -> None:
    """Write ``path`` only if absent; FileExistsError otherwise (nothing written)."""
    _via_tmp(path, data, os.link)


def _via_tmp(path: str, data: bytes, publish: Callable[[str, str], None]) -> None:
    """``data`` written to a hidden temp file beside ``path``, then ``publish(tmp, path)`` (a rename
    replaces; a hard link fails if ``path`` exists); the temp file never stays."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = _tmp(path)
    try:
        Path(tmp).write_bytes(data)
        publish(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def stat(path: str) -> FileStat:
    st = os.stat(path)
    return FileStat(st.st_size, int(st.st_mtime * 1000))


def is_file(path: str) -> bool:
    return os.path.isfile(path)


def is_dir(path: str) -> bool:
    return os.path.isdir(path)


def list_dir(path: str) -> list[Entry]:
    """The entries directly in directory ``path`` (none if it is not one)."""
    try:
        with os.scandir(path) as it:
            out = []
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    out.append(Entry(e.name, True, 0, int(e.stat().st_mtime * 1000)))
                elif e.is_file():
                    st = e.stat()
                    out.append(Entry(e.name, False, st.st_size, int(st.st_mtime * 1000)))
            return sorted(out, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []


def walk(path: str, page: int) -> Iterator[list[tuple[str, Entry]]]:
    """Every file under ``path`` as (path relative to it, entry), ``page`` at a time."""
    batch: list[tuple[str, Entry]] = []
    for root, _dirs, names in os.walk(path):
        rel_root = os.path.relpath(root, path)
        for name in sorted(names):
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except FileNotFoundError:
                continue
            rel = name if rel_root == "." else f"{rel_root}/{name}".replace(os.sep, "/")
            batch.append((rel, Entry(name, False, st.st_size, int(st.st_mtime * 1000))))
            if len(batch) >= page:
                yield batch
                batch = []
    if batch:
        yield batch


def delete(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def delete_tree(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def place(source: str, target: str) -> None:
    """Make ``target`` name the same bytes as ``source``: a hard link (no copy), replacing any other."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.exists(target) and os.path.samefile(source, target):
        return
    tmp = _tmp(target)
    os.link(source, tmp)
    os.replace(tmp, target)


def open_input(path: str) -> IO[bytes]:
    return open(path, "rb")


@contextlib.contextmanager
def open_output(path: str) -> Iterator[IO[bytes]]:
    """A file that appears at ``path`` whole when the block ends, and not at all if it raises."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = _tmp(path)
    try:
        with open(tmp, "wb") as f:
            yield f
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
