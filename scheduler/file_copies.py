"""One file copied to a secondary cluster and proven equal to its source (size and SHA-256).

Shared by the two replication engines: the copier's own process (``local``) and Spark tasks on
the table's cluster (``spark``, :mod:`scheduler.spark_replication`), so a file is copied and
verified the same way wherever it runs. It depends on nothing but the standard library and
``metastore.storage`` (whose client loads only when a bucket is used), so a Spark worker
imports it cheaply. Either end may be in a bucket (``s3://``): a table on a local cluster
replicates to a bucket and back.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from metastore import storage

# What a copy or a hash of a file in a bucket reads (and uploads) at a time.
_PIECE = 8 * 1024 * 1024
# Source and copy are hashed side by side: two threads for every copier of the process.
_HASHING = ThreadPoolExecutor(2, thread_name_prefix="streampart-sha256")


class CopyMismatchError(Exception):
    """A copy, or its source, is not what it should be (the message says which and how)."""


def sha256_of(path: str | Path) -> tuple[int, str]:
    """Size and SHA-256 of a file, read from disk (or from its bucket)."""
    if storage.is_remote(str(path)):
        with storage.open_input(str(path)) as remote:
            digest, size = hashlib.sha256(), 0
            while piece := remote.read(_PIECE):
                digest.update(piece)
                size += len(piece)
            return size, digest.hexdigest()
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256")
        return f.tell(), digest.hexdigest()


def _kept(final: str, expected_size: int, source: str) -> tuple[int, str] | None:
    """``final``'s size and SHA-256 if it is already a copy of ``source`` (a crashed attempt's)."""
    try:
        if storage.stat(final).size != expected_size:
            return None
    except FileNotFoundError:
        return None
    src, dst = _HASHING.map(sha256_of, (source, final))
    return src if src == dst else None


def _copy_to_bucket(source: str, final: str, expected_size: int) -> tuple[int, str, int]:
    """Upload ``source`` to ``final`` (it appears whole once the upload completes), hashing it as it
    goes, then read the copy back: a copy that differs is deleted. No reader sees it before its
    replica's Delta commit, which comes after every file is verified."""
    digest, size = hashlib.sha256(), 0
    reader = storage.open_input(source) if storage.is_remote(source) else open(source, "rb")  # noqa: SIM115
    with reader as src, storage.open_output(final) as out:
        while piece := src.read(_PIECE):
            digest.update(piece)
            size += len(piece)
            out.write(piece)
    if size != expected_size:
        storage.delete([final])
        raise CopyMismatchError(
            f"source file {source} has {size} bytes, but the Delta log says {expected_size}"
        )
    if sha256_of(final) != (size, digest.hexdigest()):
        storage.delete([final])
        raise CopyMismatchError(f"the copy of {source} at {final} differs from the source")
    return size, digest.hexdigest(), size


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
    kept = _kept(final, expected_size, source)
    if kept is not None:
        return kept[0], kept[1], 0
    if storage.is_remote(final):
        return _copy_to_bucket(source, final, expected_size)
    target = Path(final)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{attempt}.tmp")
    try:
        if storage.is_remote(source):
            with storage.open_input(source) as remote, open(tmp, "wb") as out:
                shutil.copyfileobj(remote, out, _PIECE)
        else:
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
