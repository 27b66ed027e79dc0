"""How a statement's failures are told: one line, or Spark's own picture of a syntax error.

A syntax error is worded as Spark words its own and as the SQL server tells a client
(``streampart/java/Reading.java``): the token, where, and the line with a caret under it, whether
sqlglot (streampart's check, before Spark) or Spark found it. Every other error Spark raises while
running a statement becomes one :class:`QueryError` line, a statement the SQL server's check
refused a :class:`QueryRefusedError`, a store that did not serve a file the
:class:`StoreUnavailableError` it relays, and a Python worker that did not start in time a
retriable :class:`SparkWorkerStartError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from metastore.storage import faults
from streampart.errors import QueryError, QueryRefusedError, worker_start_error


def syntax_error(text: str, exc: Any) -> str:
    """sqlglot's syntax error in ``text`` worded as Spark words its own, and as the SQL server tells
    a client (``Reading.syntaxError``, ``streampart/java/Reading.java``): the token it stopped at,
    where (line and column from 1), and the line with a caret under the token."""
    lead = _misplaced_first_word(text)
    if lead is not None:  # where Spark's grammar stops too: no statement begins with it
        return _syntax_message(text, lead[0], lead[1] - lead[0], "")
    first = exc.errors[0] if getattr(exc, "errors", None) else {}
    line_no, col = first.get("line"), first.get("col")
    description = str(first.get("description") or "").split(". Line ")[0]
    if any(s in description for s in ("<class ", "Required keyword", "<Token", "Invalid expression")):
        description = ""  # the parser's internals, or nothing more than "syntax error"
    why = f": {description[:1].lower()}{description[1:]}" if description else ""
    near = str(first.get("highlight") or "").strip()
    lines = text.split("\n")
    if not (line_no and col and 0 < int(line_no) <= len(lines)):
        near_text = f"'{near}'" if near else "end of input"
        return f"query failed: [PARSE_SYNTAX_ERROR] Syntax error at or near {near_text}{why}"
    line_start = sum(len(line) + 1 for line in lines[: int(line_no) - 1])
    start = max(0, int(col) - len(near)) if near else max(0, int(col) - 1)  # (col: the token's last)
    return _syntax_message(text, line_start + start, len(near), why)


# Words a Spark statement may begin with that sqlglot reads as names (its keywords it tells apart)
_STATEMENT_WORDS = frozenset(
    {
        *("ADD", "ALTER", "ANALYZE", "BEGIN", "CACHE", "CALL", "CLEAR", "COMMENT", "COMMIT", "CREATE"),
        *("DECLARE", "DELETE", "DESC", "DESCRIBE", "DROP", "EXECUTE", "EXPLAIN", "EXPORT", "FROM"),
        *("GRANT", "IMPORT", "INSERT", "LIST", "LOAD", "LOCK", "MAP", "MERGE", "MSCK", "REDUCE"),
        *("REFRESH", "REPAIR", "REPLACE", "RESET", "REVOKE", "ROLLBACK", "SELECT", "SET", "SHOW"),
        *("START", "TABLE", "TRUNCATE", "UNCACHE", "UNLOCK", "UPDATE", "USE", "VALUES", "WITH"),
    }
)


def _misplaced_first_word(text: str) -> tuple[int, int] | None:
    """Where the statement's first token is (start, end), if it is a name or a value no Spark
    statement begins with: sqlglot reads ``SELEC 1`` as an expression and stops at ``1``, Spark's
    grammar at ``SELEC``."""
    from sqlglot.dialects.spark import Spark
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    try:
        tokens = Spark().tokenize(text)
    except TokenError:
        return None
    if not tokens:
        return None
    first = tokens[0]
    names = (TokenType.VAR, TokenType.IDENTIFIER, TokenType.NUMBER, TokenType.STRING)
    if first.token_type not in names or first.text.upper() in _STATEMENT_WORDS:
        return None
    return first.start, first.end + 1


# Why 100: the picture of a syntax error shows this many characters of the statement's line at most,
# around the caret (as the SQL server's ``Reading.PICTURE_WIDTH``): a line someone typed, not a
# generated statement's megabyte-long line.
_PICTURE_WIDTH = 100


def _syntax_message(text: str, at: int, length: int, why: str) -> str:
    """The syntax error at ``text[at:at + length]`` (``length`` 0: the end of the statement), with
    the line holding it and a caret line under it — drawn as ``Reading.picture`` draws it."""
    near = f"'{text[at : at + length]}'" if length else "end of input"
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    shown = text[start : len(text) if end < 0 else end].removesuffix("\r")
    column = min(at, start + len(shown)) - start
    first, last = 0, len(shown)
    if len(shown) > _PICTURE_WIDTH:  # a window around the caret
        first = max(0, min(column - _PICTURE_WIDTH // 3, len(shown) - _PICTURE_WIDTH))
        last = first + _PICTURE_WIDTH
    line = ("…" if first else "") + shown[first:last] + ("…" if last < len(shown) else "")
    indent = (" " if first else "") + "".join("\t" if c == "\t" else " " for c in shown[first:column])
    carets = "^" * max(1, min(length, last - column))
    where = f"(line {text.count(chr(10), 0, start) + 1}, column {column + 1})"
    return (
        f"query failed: [PARSE_SYNTAX_ERROR] Syntax error at or near {near}{why} {where}\n"
        f"  {line}\n  {indent}{carets}"
    )


@contextmanager
def spark_errors() -> Iterator[None]:
    """Turn Spark's errors (analysis, a data file that cannot be read, …) into one-line QueryErrors;
    a statement the check rule refused is a :class:`QueryRefusedError`, a syntax error Spark found
    keeps Spark's picture of where (the statement with a caret), and a task that met a store that
    did not serve a table's file (a 503, no answer) the :class:`StoreUnavailableError` it relays
    (``metastore/storage/faults.py``: retriable, never "damaged")."""
    from py4j.protocol import Py4JError
    from pyspark.errors import ParseException, PySparkException

    try:
        yield
    except ParseException as exc:
        raise QueryError(f"query failed: {_parse_message(exc)}") from None
    except (PySparkException, Py4JError) as exc:
        java = getattr(exc, "java_exception", None)
        if java is not None and java.getClass().getName() == REFUSED:
            raise QueryRefusedError(str(java.getMessage())) from None
        unavailable = faults.relayed(f"{exc} {java if java is not None else ''}")
        if unavailable is not None:
            raise unavailable from None
        worker = worker_start_error(exc)
        if worker is not None:  # a busy machine: retriable, and said so
            raise worker from None
        raise QueryError(f"query failed: {_spark_message(exc)}") from None


REFUSED = "streampart.sqlserver.Extensions$Refused"


def _parse_message(exc: Exception) -> str:
    """Spark's syntax error: its first line and the statement with the caret, without its SQLSTATE."""
    text = str(exc).strip()
    return re.sub(r"\s*SQLSTATE: \w+", "", text.split("\n\nJVM stacktrace:")[0]).strip()


_UNREADABLE_FILE = re.compile(r"Encountered error while reading file (\S+?)\.?\s")


def _spark_message(exc: Exception) -> str:
    """One line saying what went wrong: Py4J's own first line only names the Java call."""
    java = getattr(exc, "java_exception", None)
    text = str(java) if java is not None else str(exc)
    unreadable = _UNREADABLE_FILE.search(text + " ")
    if unreadable:
        return (
            f"data file {unreadable.group(1)} cannot be read (damaged, or not Parquet); restore it from "
            "a backup (`streampart check` lists every problem)"
        )
    return _first_line_of(text) or type(exc).__name__


def _first_line_of(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""
