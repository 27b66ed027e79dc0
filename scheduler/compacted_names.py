"""The names a sweep attempt writes under, which crash safety reads back (see ``Roller._remove_leftovers``).

A compacted file is ``part-<roll>-v<version>-<attempt>-<k>.snappy.parquet`` (while the local
engine writes it to a local disk, ``.<name>.<hex>.tmp``: ``metastore.storage.open_output``, and
``.<name>.tmp`` before that; in a bucket an upload has no name until it completes), where
<version> is the Delta version its sweep's snapshot was loaded at. The Spark engine first
writes into the hidden directory ``.part-<roll>-v<version>-<attempt>.spark`` inside the
partition directory, then renames each file to a compacted name. Files of releases before the
version was named have no ``v<version>-``: they count as -1.
"""

from __future__ import annotations

import re

_COMPACTED = re.compile(
    r"^\.?part-[0-9a-f]{8}-(?:v(\d+)-)?[0-9a-f]{8}-\d{5}\.snappy\.parquet(?:(?:\.[0-9a-f]{32})?\.tmp)?$"
)
_SPARK_ATTEMPT = re.compile(r"^\.part-[0-9a-f]{8}-v(\d+)-[0-9a-f]{8}\.spark$")


def compacted_name(roll_id: str, base_version: int, attempt: str, k: int) -> str:
    """The name of the ``k``-th file of a sweep attempt based on Delta version ``base_version``."""
    return f"part-{roll_id[:8]}-v{base_version}-{attempt}-{k:05d}.snappy.parquet"


def spark_attempt_dir(roll_id: str, base_version: int, attempt: str) -> str:
    """The hidden directory a Spark sweep attempt writes into before its files get compacted names."""
    return f".part-{roll_id[:8]}-v{base_version}-{attempt}.spark"


def compacted_version(name: str) -> int | None:
    """The snapshot version of the sweep attempt that wrote ``name`` (a file, or a Spark attempt's
    directory); None: not written by a sweep."""
    m = _COMPACTED.match(name) or _SPARK_ATTEMPT.match(name)
    if m is None:
        return None
    return int(m.group(1)) if m.group(1) is not None else -1
