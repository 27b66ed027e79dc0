"""Errors of streampart's front (queries); they derive from the root in metastore.errors."""

from __future__ import annotations

import re

from metastore.errors import RetriableError, StreampartError, UserInputError


class QueryError(StreampartError):
    """Spark could not run the query (unknown table or column, syntax error, …)."""


class QueryRefusedError(UserInputError):
    """The query names something streampart does not let a query touch."""


class SparkUnavailableError(RetriableError):
    """The Spark master a job needs cannot be reached (it may come up: retriable)."""


class SparkHooksError(StreampartError):
    """streampart's Java hooks for Spark cannot be compiled (no JDK, or javac failed)."""


class SqlServerError(StreampartError):
    """The SQL server cannot start (the port is taken, …)."""


class ClassArchiveError(StreampartError):
    """No class archive for the Spark driver could be written (:mod:`streampart.class_archive`); the
    message says why. Spark runs without one, only slower to start."""


class ClassArchiveTimeoutError(ClassArchiveError):
    """A JVM building the class archive ran out of its time (a busy machine): a longer limit may do."""


class SparkWorkerStartError(RetriableError):
    """A Python process Spark started did not connect back to it in time: Spark gives it a fixed 10 s
    (``PythonWorkerFactory``, not configurable in Spark 4.2; its Python streaming sources' runner
    starts so), and a busy machine can take longer to start a Python process. The step that failed
    committed nothing: running the command again is safe (an ingest resumes from its checkpoint)."""


# Spark's words for it, in its exception's message (and so in every error that quotes it)
WORKER_DID_NOT_CONNECT = "Python worker failed to connect back"
_FAILED = re.compile(r"([^:\n]{1,80} failed): ")  # "ingest ns.t failed: ", "query failed: "


def worker_start_error(exc: BaseException) -> SparkWorkerStartError | None:
    """``exc`` as a :class:`SparkWorkerStartError` (one line: what happened, what to do) if Spark
    raised it, or an error quoting Spark's, because a Python worker did not connect back in time;
    else None. ``exc`` may be Py4J's or PySpark's (the JVM's exception read from its message) or a
    :class:`StreampartError` that quotes one (what it says failed is kept)."""
    if isinstance(exc, SparkWorkerStartError):
        return exc
    try:
        text = str(exc)
    except Exception:  # a Py4J error's message asks the JVM, which may be gone
        return None
    if WORKER_DID_NOT_CONNECT not in text:
        return None
    failed = _FAILED.match(text) if isinstance(exc, StreampartError) else None
    return SparkWorkerStartError(
        f"{failed.group(0) if failed else ''}a Python process Spark started did not connect back within "
        f"Spark's fixed 10 s (Spark: {WORKER_DID_NOT_CONNECT!r}), most likely as the machine was too busy "
        "to start it sooner. The step that failed committed nothing: run the command again (an ingest "
        "resumes from its checkpoint), when the machine is less busy if it happens again"
    )
