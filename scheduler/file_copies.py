"""One file copied to a secondary cluster and proven equal to its source (size and SHA-256).

Shared by the two replication engines: the copier's own process (``local``) and Spark tasks on
the table's cluster (``spark``, :mod:`scheduler.spark_replication`), so a file is copied and
verified the same way wherever it runs. It depends on nothing but the standard library, so
a Spark worker imports it cheaply.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# Source and copy are hashed side by side: two threads for every copier of the process.
_HASHING = ThreadPoolExecutor(2, thread_name_prefix="streampart-sha256")


class CopyMismatchError(Exception):
    """A copy, or its source, is not what it should be (the message says which and how)."""


def sha256_of(path: str | Path) -> tuple[int, str]:
    """Size and SHA-256 of a file, read from disk."""
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256")
        return f.tell(), digest.hexdigest()


def copy_verified(source: str, final: str, expected_size: int, attempt: str) -> tuple[int, str, int]:
    """Copy ``source`` to ``final``, verified; its size, SHA-256 and the bytes written (0: kept).

    The copy goes to a hidden ``.<name>.<attempt>.tmp`` beside ``final`` (by the kernel where it
    can: copy_file_range, sendfile), is flushed to disk, and is renamed to ``final`` only once
    the size and SHA-256 of the source and of the copy as read back agree. A ``final`` already
    there with the right size and checksum (a crashed attempt's) is kept.

    Raises:
        CopyMismatchError: the source is not ``expected_size`` bytes, or the copy differs.
        OSError: the copy could not be made (no space, no directory, no permission).
    """
    target = Path(final)
    if target.is_file() and target.stat().st_size == expected_size:
        src, dst = _HASHING.map(sha256_of, (source, final))
        if src == dst:
            return src[0], src[1], 0
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{attempt}.tmp")
    try:
        shutil.copyfile(source, tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        src, dst = _HASHING.map(sha256_of, (source, tmp))  # both read back after the copy
        if src[0] != expected_size:
            raise CopyMismatchError(
                f"source file {source} has {src[0]} bytes, but the Delta log says {expected_size}"
            )
        if dst != src:
            raise CopyMismatchError(f"the copy of {source} at {final} differs from the source")
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return src[0], src[1], src[0]
