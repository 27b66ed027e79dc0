"""The metastore database: engine, SQLite pragmas, transactions, migrations, error translation.

Two kinds of transaction, because SQLite serialises writers:

- :meth:`Database.tx` writes. On SQLite it begins ``BEGIN IMMEDIATE``, taking the write lock
  up front, so a read-then-write transaction never fails to upgrade its lock half-way
  (SQLite's deadlock case).
- :meth:`Database.read_tx` only reads. On SQLite it begins a plain (deferred) ``BEGIN``: in
  WAL mode it reads a snapshot and never waits for a writer. On PostgreSQL it is a ``READ
  ONLY`` transaction, so a write slipped into a read path fails loudly instead of passing.

Either way, the database being unreachable or locked for too long becomes
:class:`~metastore.errors.MetastoreUnavailableError`, which callers may retry.

Times cross the database boundary here too: stored as naive UTC (SQLite has no time zones),
handed out timezone-aware; "now" is always :func:`metastore.clock.now`.
"""

from __future__ import annotations

import bisect
import math
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

from metastore import clock
from metastore.errors import (
    ConflictError,
    MetastoreDownError,
    MetastoreUnavailableError,
    MissingStoreError,
    UserInputError,
)
from metastore.models import PRIMARY, utc

# Why 30 s: SQLite serialises writers; under several writer processes plus a roller a write
# transaction may wait behind a few others. Each holds the lock for milliseconds, so 30 s only
# trips when the database is truly stuck, and then the error says so. Reads never wait for it
# (see read_tx); only transactions that write do.
SQLITE_BUSY_TIMEOUT_S: float = 30

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
"""The Alembic script directory of the metastore's schema."""

# PostgreSQL's SQLSTATE for "permission denied" (a role without the privileges a migration needs).
_INSUFFICIENT_PRIVILEGE = "42501"


def head_revision() -> str | None:
    """The newest migration's revision, as alembic finds it (the one no other script revises), read
    from the scripts' text; None unless there is exactly one."""
    revisions: set[str] = set()
    revised: set[str] = set()
    for script in (MIGRATIONS / "versions").glob("*.py"):
        text = script.read_text()
        revision = _REVISION.search(text)
        if revision is not None:
            revisions.add(revision.group(1))
        revised.update(_QUOTED.findall(m.group(1)) if (m := _DOWN_REVISION.search(text)) else ())
    heads = revisions - revised
    return heads.pop() if len(heads) == 1 else None


_REVISION = re.compile(r"""^revision\s*(?::[^=]*)?=\s*["']([^"']+)["']""", re.M)
_DOWN_REVISION = re.compile(r"""^down_revision\s*(?::[^=]*)?=\s*(.+)$""", re.M)
_QUOTED = re.compile(r"""["']([^"']+)["']""")

# The execution option that marks a connection's transaction as read-only (see Database.read_tx).
_READ_ONLY = "streampart_read_only"


def locking(
    conn: Connection, query: Any, *, share: bool = False, no_key: bool = False, of: Any = None
) -> Any:
    """``query``, its rows locked until the transaction ends on PostgreSQL: ``FOR SHARE`` with
    ``share``, ``FOR NO KEY UPDATE`` with ``no_key`` (foreign-key checks of inserts still pass),
    else ``FOR UPDATE``; ``of``: only that table's rows (a join). At READ COMMITTED a plain read can
    be overtaken: another transaction changes the row and commits before this one writes what it
    decided from it. SQLite needs no lock: one writing transaction runs at a time
    (``BEGIN IMMEDIATE``)."""
    if conn.dialect.name != "postgresql":
        return query
    return query.with_for_update(read=share, key_share=no_key, of=of)


# PostgreSQL's SQLSTATEs for a transaction rolled back because of another one: a deadlock, a
# serialization failure. Retrying is safe, and the database is not down.
LOST_RACE_SQLSTATES = frozenset({"40P01", "40001"})


def _lost_to_another_transaction(exc: OperationalError) -> bool:
    orig = exc.orig
    return (getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)) in LOST_RACE_SQLSTATES


def _db(ts: datetime | None) -> datetime | None:
    """A time as the database stores it: naive UTC."""
    return None if ts is None else utc(ts).replace(tzinfo=None)


def _out(ts: datetime | None) -> datetime | None:
    """A time as the database returned it (naive UTC), made timezone-aware."""
    return None if ts is None else ts.replace(tzinfo=UTC)


def _now() -> datetime:
    return clock.now()


def _new_id(result: Any) -> int:
    """The primary key of the row an INSERT just added."""
    key = result.inserted_primary_key
    assert key is not None, "not an INSERT"
    return int(key[0])


def normalize_url(url: str) -> str:
    """Accept ``postgres://`` and ``postgresql://`` URLs and use the psycopg 3 driver for them."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def default_url(warehouse: str | Path) -> str:
    """The embedded metastore: a SQLite file inside the warehouse (hidden from Parquet readers)."""
    return f"sqlite:///{Path(warehouse).resolve() / '_metastore.sqlite'}"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None: not SQLite, or an in-memory database)."""
    if not url.startswith("sqlite"):
        return None
    path = sa.engine.make_url(url).database
    return Path(path) if path and path != ":memory:" else None


def _sqlite_has_schema(path: Path) -> bool:
    """Whether the SQLite file ``path`` holds streampart's schema, read without changing it."""
    import sqlite3

    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.DatabaseError:  # not a database at all, say
        return False
    return found is not None


def make_engine(url: str, connect_timeout_s: float | None = None, *, create: bool = True) -> Engine:
    """An engine for ``url``; on SQLite with WAL, a busy timeout, foreign keys and our own BEGIN.

    ``connect_timeout_s`` bounds a PostgreSQL connect (a federated metastore's host may be gone).
    ``create``: a SQLite file's directory is made if missing (else: MissingStoreError, see
    :class:`Database`).
    """
    if not url.startswith("sqlite"):
        connect_args = (
            {} if connect_timeout_s is None else {"connect_timeout": max(1, round(connect_timeout_s))}
        )
        return sa.create_engine(
            url, pool_pre_ping=True, pool_size=5, max_overflow=5, connect_args=connect_args
        )
    path = sqlite_path(url)
    if path is not None and not create and not path.is_file():
        raise MissingStoreError(str(path))  # Database says which metastore
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    busy_ms = int(SQLITE_BUSY_TIMEOUT_S * 1000)
    engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={busy_ms}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A reader takes no lock up front (WAL: it reads a snapshot, whatever writers do); a
        # writer takes the write lock at once (see the module's docstring).
        read_only = conn.get_execution_options().get(_READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


# Buckets of the metastore's transaction latency (seconds): an indexed update answers in a
# millisecond or two; a SQLite writer may queue behind others for up to its busy timeout.
CALL_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class CallTimes:
    """How long this process's transactions on one metastore took: a histogram kept in the
    :class:`Database` itself (a bisect and three additions under a lock per transaction), read by
    whatever serves metrics (``streampart_metastore_call_seconds``) at scrape time.
    """

    def __init__(self, buckets: tuple[float, ...] = CALL_BUCKETS) -> None:
        self.buckets = buckets
        self._counts = [0] * (len(buckets) + 1)  # the last one: above the largest bucket
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        i = bisect.bisect_left(self.buckets, seconds)
        with self._lock:
            self._counts[i] += 1
            self._sum += seconds

    def snapshot(self) -> tuple[list[tuple[float, int]], float, int]:
        """``([(upper bound, cumulative count), …, (inf, total)], sum, total)``."""
        with self._lock:
            counts, total_sum = list(self._counts), self._sum
        cumulative, running = [], 0
        for bound, n in zip((*self.buckets, float("inf")), counts, strict=True):
            running += n
            cumulative.append((bound, running))
        return cumulative, total_sum, running


class Database:
    """Access to one metastore database. Thread-safe; open one per process.

    Args:
        name: Its name in the federation (``primary``: the one the process started with);
            tables read through it carry it, so they are written through it too.
        fail_fast_s: A federated metastore's circuit breaker: after the database failed, every
            call fails at once (:class:`MetastoreDownError`) for this many seconds, then one call
            tries it again; its namespaces fail fast while every other metastore's carry on.
            None (the primary): every call tries the database.
        connect_timeout_s: How long a PostgreSQL connect may take (None: the driver's default).
        create: Make the metastore if it does not exist (a new SQLite file, the schema in an empty
            database). False: a metastore that does not exist yet — no SQLite file, or a database
            without streampart's schema — is :class:`MissingStoreError`, and nothing is made.
    """

    def __init__(
        self,
        url: str,
        *,
        migrate: bool = True,
        name: str = PRIMARY,
        fail_fast_s: float | None = None,
        connect_timeout_s: float | None = None,
        create: bool = True,
    ) -> None:
        self.url = normalize_url(url)
        self.name = name
        self.fail_fast_s = fail_fast_s
        self._down: tuple[float, str] | None = None  # (monotonic time it may be tried again, why)
        self._down_lock = threading.Lock()
        self.call_times = CallTimes()
        try:
            self.engine = make_engine(self.url, connect_timeout_s, create=create)
        except (sa.exc.ArgumentError, ModuleNotFoundError) as exc:
            raise UserInputError(f"metastore URL {url!r} is not usable: {exc}") from None
        except MissingStoreError as exc:
            raise MissingStoreError(f"metastore {self.safe_url} does not exist (no file {exc})") from None
        if not create:
            self._require_schema()
        if migrate:
            self.migrate()

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        """One transaction that may write (on SQLite it holds the write lock throughout)."""
        with self._unavailable_is_retriable(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def read_tx(self, snapshot: bool = False) -> Iterator[Connection]:
        """One transaction that only reads: it never waits for a writer (nor takes SQLite's lock).

        ``snapshot``: every statement sees the database as the first one did (PostgreSQL's
        REPEATABLE READ; at its default READ COMMITTED each statement sees what committed before
        it). A SQLite read transaction always does."""
        with self._unavailable_is_retriable(), self.engine.connect() as conn:
            if self.is_sqlite:
                conn.execution_options(**{_READ_ONLY: True})
            elif snapshot:
                conn.execution_options(postgresql_readonly=True, isolation_level="REPEATABLE READ")
            else:
                conn.execution_options(postgresql_readonly=True)
            with conn.begin():
                yield conn

    @property
    def label(self) -> str:
        """How messages name it: the primary by its URL, a federated metastore by name and URL."""
        return self.safe_url if self.name == PRIMARY else f"{self.name} ({self.safe_url})"

    @property
    def down(self) -> str | None:
        """Why calls fail fast now (its last failure), or None: calls reach the database."""
        with self._down_lock:
            if self._down is None or self._down[0] <= time.monotonic():
                return None
            return self._down[1]

    @contextmanager
    def _unavailable_is_retriable(self) -> Iterator[None]:
        """The database's operational errors (unreachable, locked too long) as a retriable error;
        with a circuit breaker (``fail_fast_s``), calls during its open interval fail at once."""
        if self.fail_fast_s is not None:
            with self._down_lock:
                down = self._down
            if down is not None and down[0] > time.monotonic():
                wait = down[0] - time.monotonic()
                raise MetastoreDownError(
                    f"metastore {self.label} is down ({down[1]}); its namespaces fail fast until it is "
                    f"tried again in {max(1, math.ceil(wait))} s, every other metastore's carry on",
                    retry_after=wait,
                    metastore=self.name,
                )
        started = time.perf_counter()
        try:
            yield
        except OperationalError as exc:
            self.call_times.observe(time.perf_counter() - started)
            why = " ".join(str(exc.orig).split())
            if _lost_to_another_transaction(exc):  # the database is up: this one lost a race
                raise ConflictError(
                    f"metastore {self.label}: this transaction was rolled back, as it and another "
                    f"each waited for the other ({why}); try it again"
                ) from exc
            if self.fail_fast_s is not None:
                with self._down_lock:
                    self._down = (time.monotonic() + self.fail_fast_s, why)
                raise MetastoreDownError(
                    f"metastore {self.label} is unavailable: {why}",
                    retry_after=self.fail_fast_s,
                    metastore=self.name,
                ) from exc
            raise MetastoreUnavailableError(f"metastore {self.label} is unavailable: {why}") from exc
        except BaseException:
            self.call_times.observe(time.perf_counter() - started)
            raise
        self.call_times.observe(time.perf_counter() - started)
        if self.fail_fast_s is not None and self._down is not None:
            with self._down_lock:
                self._down = None

    @property
    def safe_url(self) -> str:
        """The URL with its password masked: for messages and logs."""
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    def migrate(self) -> None:
        """Bring the schema to the newest migration (safe to run from many processes at once)."""
        if self._at_head():
            return  # the common case, checked without alembic (~150 ms of imports per command)
        from alembic import command
        from alembic.config import Config
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        head = ScriptDirectory.from_config(cfg).get_current_head()
        try:
            with self.tx() as conn:
                if conn.dialect.name == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(4196)"))
                if MigrationContext.configure(conn).get_current_revision() == head:
                    return
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
        except sa.exc.ProgrammingError as exc:
            if getattr(exc.orig, "sqlstate", None) != _INSUFFICIENT_PRIVILEGE:
                raise
            why = str(exc.orig).splitlines()[0]
            raise UserInputError(
                f"metastore {self.safe_url}: the role may not bring its schema to revision {head} "
                f"({why}): run the first start, and the first start after an upgrade, as the role that "
                "owns the schema (see docs/operations.md, PostgreSQL)"
            ) from None

    def _require_schema(self) -> None:
        """MissingStoreError unless the database holds streampart's schema (of any revision); a
        SQLite file is read read-only first (the engine's connection would switch it to WAL)."""
        path = sqlite_path(self.url)
        if path is not None and not _sqlite_has_schema(path):
            self.engine.dispose()
            raise MissingStoreError(
                f"metastore {self.safe_url} does not exist (the file {path} has no streampart schema)"
            )
        with self._unavailable_is_retriable(), self.engine.connect() as conn:
            if not sa.inspect(conn).has_table("alembic_version"):
                self.engine.dispose()
                raise MissingStoreError(
                    f"metastore {self.safe_url} does not exist (the database has no streampart schema)"
                )

    def _at_head(self) -> bool:
        """Whether the schema is at the newest migration already, read with one SELECT; False when
        unsure (no version table yet, a branched history): then alembic decides."""
        head = head_revision()
        if head is None:
            return False
        try:  # not through read_tx: a missing table must not trip the circuit breaker
            with self.engine.connect() as conn:
                if not sa.inspect(conn).has_table("alembic_version"):
                    return False  # a new metastore
                found = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
        except sa.exc.DBAPIError:
            return False  # unreachable, say: the migration that follows reports it as usual
        return found == [head]

    def ping(self) -> None:
        """A round trip to the database (health checks); raises MetastoreUnavailableError."""
        with self.read_tx() as conn:
            conn.execute(sa.text("SELECT 1"))

    def close(self) -> None:
        self.engine.dispose()
