"""Copies of a large partition's files by Spark tasks (``[scheduler.replication] engine = "spark"``).

A rolled partition's files are copied in parallel by the executors of the table's cluster, one
task per file, each with :func:`scheduler.file_copies.copy_verified` — the same copy, checksum
comparison and rename the local engine does, so the copy protocol around it (claim, commit
under the partition's Delta application transaction, record) is unchanged. The workers need
the source and the secondary's storage mounted at the same paths as the copier (the README's
"shared file system"). Small partitions stay local: a Spark job's start costs more than their copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metastore.delta.errors import first_line
from scheduler.errors import ReplicationFailedError
from scheduler.file_copies import copy_verified

# (source path, final path, expected size, attempt) of each file
Job = tuple[str, str, int, str]


def _copy(job: Job) -> tuple[str, int, str, int]:
    source, final, size, attempt = job
    return (final, *copy_verified(source, final, size, attempt))


def copy_with_spark(spark: Any, jobs: Sequence[Job]) -> dict[str, tuple[int, str, int]]:
    """Copy every file of ``jobs`` with Spark tasks; per final path: size, SHA-256, bytes written.

    Raises:
        ReplicationFailedError: a task failed (its first line), after Spark's own task retries.
    """
    if not jobs:
        return {}
    sc = spark.sparkContext
    sc.setJobDescription(f"streampart replication: {len(jobs)} file(s)")
    try:
        results = sc.parallelize(list(jobs), len(jobs)).map(_copy).collect()
    except Exception as exc:  # Py4J/PythonException: the task's own error is in its text
        text = str(exc)
        cause = next(
            (line for line in text.splitlines() if "CopyMismatchError" in line or "Error:" in line), None
        )
        raise ReplicationFailedError(
            f"a Spark task copying to the secondary failed: {(cause or first_line(exc)).strip()}"
        ) from None
    return {final: (size, digest, written) for final, size, digest, written in results}
