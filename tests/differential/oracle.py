"""The independent engine, and how answers are compared.

The oracle reads each table (and link, and each version a statement names) with **delta-rs**
only, writes the rows to a Parquet directory and registers it in a plain Spark session's own
catalog (``CREATE DATABASE shop; CREATE TABLE shop.orders USING parquet LOCATION …``): Spark
resolves the names itself and reads data that streampart never touched. Only the oracle's copy
of a statement is edited: ``ns.t VERSION AS OF n`` names the table registered for that version
(``ns.t__v{n}``), ``TIMESTAMP AS OF`` the version delta-rs' history gives, and ``t@b`` the
link's full name; a leading ``USE ns;`` becomes the oracle session's ``USE``.

Spark's session catalog is shared by every session of one SparkContext, and a catalog table
named like a streampart table shadows its staged snapshot (the check rule then refuses the
statement as reading outside its snapshots), so the oracle's tables exist only while the oracle
answers (:meth:`Oracle.registered`), never while streampart runs in this process.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.differential.warehouse import Warehouse


@dataclass
class Answer:
    """What one engine answered: column names and rows, or the error it raised; and how long it took."""

    columns: list[str] | None
    rows: list[tuple[Any, ...]] | None
    error: str | None
    seconds: float

    @property
    def failed(self) -> bool:
        return self.error is not None


def answer(run: Callable[[], tuple[list[str], list[tuple[Any, ...]]]]) -> Answer:
    """``run``'s columns and rows (values normalised), or its error as one line."""
    start = time.monotonic()
    try:
        columns, rows = run()
    except Exception as exc:  # every failure is an answer: compared, counted, reported
        text = " ".join(str(exc).split())
        return Answer(None, None, f"{type(exc).__name__}: {text[:600]}", time.monotonic() - start)
    return Answer(columns, [tuple(normalise(v) for v in r) for r in rows], None, time.monotonic() - start)


def normalise(value: Any) -> Any:
    """A value as compared: timestamps as UTC instants, arrays and structs as tuples."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, list | tuple):
        return tuple(normalise(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), normalise(v)) for k, v in value.items()))
    if hasattr(value, "asDict"):  # a pyspark Row nested in a row
        return tuple(normalise(v) for v in value)
    return value


def spark_rows(df: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    """A DataFrame's column names and rows, collected.

    PySpark hands TIMESTAMP values over as naive datetimes in this process's local time zone;
    :func:`streampart.query.from_spark`'s conversion makes them instants (both engines run here).
    """
    from streampart.query import from_spark

    rows = df.collect()
    return list(df.columns), [tuple(from_spark(v) for v in r) for r in rows]


def _sort_key(value: Any) -> tuple[Any, ...]:
    if value is None:
        return (0, "")
    if isinstance(value, bool):
        return (1, int(value))
    if isinstance(value, int | Decimal):
        return (2, float(value))
    if isinstance(value, float):
        return (2, float(f"{value:.9g}") if math.isfinite(value) else value)
    if isinstance(value, datetime | date):
        return (3, value.isoformat())
    if isinstance(value, tuple):
        return (4, tuple(_sort_key(v) for v in value))
    return (5, str(value))


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None or isinstance(a, Decimal | str) or isinstance(b, Decimal | str):
            return False
        if math.isnan(a) and math.isnan(b):
            return True
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b if isinstance(a, Decimal | bool) else a == b


def difference(ours: Answer, truth: Answer, ordered: bool = False, names: bool = True) -> str | None:
    """How ``ours`` differs from ``truth`` (None: the same answer).

    Rows compare as multisets (sorted; in order too if ``ordered``): floats to 1e-9 (relative,
    and absolute near zero), timestamps as UTC instants, decimals exactly (value and type).
    """
    if truth.failed:
        return f"the oracle failed (the statement is wrong, not streampart): {truth.error}"
    if ours.failed:
        return f"streampart failed: {ours.error}"
    assert ours.rows is not None and truth.rows is not None and ours.columns is not None
    assert truth.columns is not None
    if len(ours.columns) != len(truth.columns):
        return f"columns {ours.columns} != the oracle's {truth.columns}"
    if names and [c.lower() for c in ours.columns] != [c.lower() for c in truth.columns]:
        return f"column names {ours.columns} != the oracle's {truth.columns}"
    if len(ours.rows) != len(truth.rows):
        shown = f"{_show(ours.rows)} vs {_show(truth.rows)}"
        return f"{len(ours.rows)} rows != the oracle's {len(truth.rows)}: {shown}"
    pairs = (
        zip(ours.rows, truth.rows, strict=True)
        if ordered
        else zip(sorted(ours.rows, key=_row_key), sorted(truth.rows, key=_row_key), strict=True)
    )
    for a, b in pairs:
        if len(a) != len(b) or not all(_same_value(x, y) for x, y in zip(a, b, strict=True)):
            return f"row {a!r} != the oracle's {b!r}" + (" (in order)" if ordered else "")
    return None


def _row_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(_sort_key(v) for v in row)


def _show(rows: list[tuple[Any, ...]]) -> str:
    shown = sorted(rows, key=_row_key)[:6]
    return repr(shown) + (" …" if len(rows) > 6 else "")


# -- the oracle's copy of a statement ------------------------------------------------------------
_USE = re.compile(r"^\s*USE\s+`?(\w+)`?\s*;", re.IGNORECASE)
_NAME = r"(?:`?\w+`?\s*\.\s*)?`?\w+`?"
_VERSION = re.compile(rf"(?P<name>{_NAME})\s+VERSION\s+AS\s+OF\s+(?P<v>\d+)", re.IGNORECASE)
_TIMESTAMP = re.compile(rf"(?P<name>{_NAME})\s+TIMESTAMP\s+AS\s+OF\s+'(?P<t>[^']*)'", re.IGNORECASE)
_LINK = re.compile(r"\b(\w+)@(\w+)\b")


@dataclass(frozen=True)
class OracleStatement:
    namespace: str | None  # the USE before it
    sql: str
    versions: frozenset[tuple[str, int]]  # (catalog name, version) it reads by VERSION AS OF


class Oracle:
    """Plain Spark over delta-rs' reads of the warehouse, registered under the same names."""

    def __init__(self, spark: Any, warehouse: Warehouse, directory: Path) -> None:
        self.session = spark.newSession()  # its own current database; the catalog is shared
        self.warehouse = warehouse
        self.directory = directory
        self.written: dict[tuple[str, int | None], Path] = {}

    def translate(self, sql: str) -> OracleStatement:
        namespace = None
        m = _USE.match(sql)
        if m is not None:
            namespace, sql = m.group(1).lower(), sql[m.end() :]
        links = self.warehouse.links

        def link(m: re.Match[str]) -> str:
            return links[f"{namespace}:{m.group(1).lower()}@{m.group(2).lower()}"]

        sql = _LINK.sub(link, sql)
        versions: set[tuple[str, int]] = set()

        def versioned(name: str, version: int) -> str:
            parts = [p.strip().strip("`").lower() for p in name.split(".")]
            full = ".".join(parts) if len(parts) == 2 else f"{namespace}.{parts[0]}"
            versions.add((full, version))
            return ".".join(f"`{p}`" for p in [*parts[:-1], f"{parts[-1]}__v{version}"])

        sql = _VERSION.sub(lambda m: versioned(m.group("name"), int(m.group("v"))), sql)
        sql = _TIMESTAMP.sub(lambda m: versioned(m.group("name"), self._version_at(m.group("name"),
                                                 m.group("t"), namespace)), sql)  # fmt: skip
        return OracleStatement(namespace, sql, frozenset(versions))

    def _version_at(self, name: str, at: str, namespace: str | None) -> int:
        """The newest version committed at or before ``at``, by delta-rs' history."""
        from deltalake import DeltaTable

        parts = [p.strip().strip("`").lower() for p in name.split(".")]
        full = ".".join(parts) if len(parts) == 2 else f"{namespace}.{parts[0]}"
        dt = DeltaTable(self.warehouse.sources[full][1])
        limit = datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() * 1000
        return max(int(h["version"]) for h in dt.history() if h["timestamp"] <= limit)

    def _parquet(self, name: str, version: int | None) -> Path:
        """The rows of ``name`` (a table, or a link: its source's rows) at ``version``, by delta-rs."""
        import pyarrow.parquet as pq
        from deltalake import DeltaTable

        key = (name, version)
        if key in self.written:
            return self.written[key]
        location = self.warehouse.sources[name][1]
        dt = DeltaTable(location) if version is None else DeltaTable(location, version=version)
        rows = dt.to_pyarrow_table()
        partitions = list(dt.metadata().partition_columns)
        # streampart's column order: the table's columns, then the partition column
        rows = rows.select([c for c in rows.column_names if c not in partitions] + partitions)
        path = self.directory / (name if version is None else f"{name}__v{version}")
        path.mkdir(parents=True)
        pq.write_table(rows, path / "part-00000.parquet")
        self.written[key] = path
        return path

    @contextmanager
    def registered(self, statements: list[OracleStatement]) -> Iterator[None]:
        """Every table and link at its newest version, and each version ``statements`` read, in
        the shared catalog for the time of the block; dropped again after."""
        wanted: set[tuple[str, int | None]] = {(n, None) for n in self.warehouse.sources}
        for s in statements:
            wanted |= set(s.versions)
        namespaces = sorted({n.split(".")[0] for n, _ in wanted})
        try:
            for ns in namespaces:
                self.session.sql(f"CREATE DATABASE `{ns}`")
            for name, version in sorted(wanted, key=lambda k: (k[0], k[1] or 0)):
                ns, table = name.split(".")
                if version is not None:
                    table = f"{table}__v{version}"
                path = self._parquet(name, version)
                self.session.sql(f"CREATE TABLE `{ns}`.`{table}` USING parquet LOCATION '{path}'")
            yield
        finally:
            self.session.sql("USE default")
            for ns in namespaces:
                self.session.sql(f"DROP DATABASE IF EXISTS `{ns}` CASCADE")

    def run(self, statement: OracleStatement) -> tuple[list[str], list[tuple[Any, ...]]]:
        self.session.sql(f"USE `{statement.namespace or 'default'}`")
        return spark_rows(self.session.sql(statement.sql))
