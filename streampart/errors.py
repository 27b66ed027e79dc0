"""Errors of streampart's front (queries); they derive from the root in metastore.errors."""

from __future__ import annotations

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
