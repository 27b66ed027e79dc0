"""Namespaces: their rows, what they hold, and the ledger their quotas are checked against.

**Quota.** A namespace's *committed bytes* are, over its tables, the bytes of its standard
partitions (as their rolls recorded them; an expiring one still counts, an expired one no
more) plus the bytes committed into its other partitions
(``sp_partitions.staged_bytes``, added by ``finish_commit`` in the same transaction that makes a
chunk COMMITTED) plus every chunk COMMITTING right now (in flight: counted before it lands).
``begin_commit`` checks, in its own transaction, that a chunk's bytes fit under the quota and
takes the namespace's row lock first, exclusively where the namespace has a quota (SQLite's write
lock serialises it anyway), so concurrent writers are checked one after another against each
other's in-flight chunks: the quota is not passed by commits of user data (:func:`fence_commit`).
Never refused, but counted: the dead-letter and late-data chunks
that belong to a main chunk's commit (refusing one half-way would split that commit), and rolls
(compaction may change a partition's bytes).

Namespaces are locked the same way when a table or a link is made in them or they are dropped,
so a name is never both a table and a link, and a namespace is never dropped under a new table.

**Moves.** A namespace being moved to another metastore is *fenced* in this one: its row's
``moving_to`` is set (see ``metastore/moves.py``). Every transaction that writes the namespace
reads its row under a lock first (:func:`fence_namespace`, :func:`fence_table`) and refuses with
:class:`~metastore.errors.NamespaceMovingError` while it is fenced: a chunk's reserve, staging
and ``begin_commit``, every step of a roll, table and link changes. On PostgreSQL the row lock
makes the fence wait for such transactions in flight and them wait for the fence (then they see
it); SQLite's write lock serialises them anyway. So once the fence is committed, nothing of the
namespace can change here but what was in flight: commits that had begun (``finish_commit`` is
not fenced; the move waits for them) and chunks giving up (abort, expiry).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from metastore import schema as s
from metastore.crashpoints import pausepoint
from metastore.errors import (
    AlreadyExistsError,
    NamespaceMovingError,
    NotFoundError,
    QuotaExceededError,
    TableChangedError,
    UserInputError,
)
from metastore.models import ChunkState, PartitionState, TableKind
from metastore.namespaces import Namespace, check_namespace, format_size
from metastore.store.engine import Database, _db, _now, _out, locking
from metastore.store.federation import bump_route_version

_UNSET: Any = object()


def _seconds(d: timedelta | None) -> int | None:
    return None if d is None else int(d.total_seconds())


def namespace_from_row(row: Any) -> Namespace:
    m = row._mapping
    return Namespace(
        name=m["name"],
        isolated=bool(m["isolated"]),
        quota_bytes=m["quota_bytes"],
        description=m["description"] or "",
        created_at=_out(m["created_at"]),
        moving_to=m.get("moving_to"),
        default_retain=None
        if m.get("default_retain_s") is None
        else timedelta(seconds=m["default_retain_s"]),
    )


def lock_namespace(conn: Connection, name: str, *, share: bool = False) -> Any:
    """The namespace's row, locked until the transaction ends (PostgreSQL; SQLite holds its write lock).

    ``share``: a shared lock (``FOR SHARE``), enough to hold a fence off; such a transaction must
    not ask for the exclusive lock later (two of them would deadlock).
    """
    q = sa.select(s.namespaces).where(s.namespaces.c.name == name)
    return conn.execute(locking(conn, q, share=share)).first()


def moving_error(name: str, target: str, since: datetime | None) -> NamespaceMovingError:
    when = f" since {_out(since).isoformat()}" if since is not None else ""  # type: ignore[union-attr]
    return NamespaceMovingError(
        f"namespace {name} is moving to metastore {target}{when}: its writes wait for the switch, "
        "which takes seconds; retry (the retry goes to its new metastore once the route flips)"
    )


def refuse_if_moving(row: Any) -> None:
    """Raise NamespaceMovingError if the namespace row ``row`` is fenced by a move."""
    if row is not None and row._mapping.get("moving_to") is not None:
        raise moving_error(row.name, row.moving_to, row.moving_since)


def fence_namespace(conn: Connection, name: str, *, share: bool = False) -> Any:
    """The namespace's row, locked; NamespaceMovingError if a move fences it (see the module's docstring)."""
    row = lock_namespace(conn, name, share=share)
    refuse_if_moving(row)
    return row


def fence_table(
    conn: Connection, table_id: int, label: str, *, share: bool = True, main_only: bool = False
) -> None:
    """Refuse a write to table ``table_id`` while its namespace is fenced by a move (in ``conn``'s tx).

    ``main_only``: a companion's (dead-letter, late-data) chunk passes: it belongs to a main
    chunk's commit that began before the fence, and the move waits for that commit to end.

    Raises:
        NamespaceMovingError: its namespace is being moved; NotFoundError: the table is not in this
            metastore (dropped, or its namespace moved away and its rows here were removed).
    """
    t, n = s.tables.c, s.namespaces.c
    # one statement: the table's kind and its namespace's row, locked (a companion's too: it waits
    # for a move's fence to commit, then passes)
    q = (
        sa.select(t.kind, n.name, n.moving_to, n.moving_since)
        .select_from(s.tables.join(s.namespaces, n.name == t.namespace))
        .where(t.id == table_id)
    )
    row = conn.execute(locking(conn, q, share=share, of=s.namespaces)).first()
    if row is None:  # no such table here, or its namespace has no row (then nothing fences it)
        if conn.execute(sa.select(t.id).where(t.id == table_id)).first() is None:
            raise NotFoundError(
                f"table #{table_id} does not exist in metastore {label} (dropped, or its namespace moved)"
            )
        return
    if main_only and row.kind != TableKind.MAIN.value:
        return
    refuse_if_moving(row)


def missing_namespace(name: str) -> NotFoundError:
    """The error for a namespace that must exist first (``namespaces.require_explicit``)."""
    return NotFoundError(
        f"namespace {name} does not exist (namespaces.require_explicit is set): create it with "
        f"`streampart namespace create {name}`"
    )


def ensure_namespace(conn: Connection, name: str, create: bool, now: datetime) -> Any:
    """The namespace's row, locked; made first if missing and ``create`` (else NotFoundError)."""
    row = fence_namespace(conn, name)
    if row is not None:
        return row
    if not create:
        raise missing_namespace(name)
    values = {"name": name, "isolated": False, "description": "", "created_at": _db(now)}
    insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(s.namespaces)
    conn.execute(insert.values(**values).on_conflict_do_nothing(index_elements=["name"]))
    return lock_namespace(conn, name)


def committed_bytes(conn: Connection, namespace: str) -> int:
    """The namespace's bytes as its quota counts them (see the module's docstring).

    One statement, so PostgreSQL reads one snapshot for both sums: a chunk whose commit finishes
    meanwhile is counted once, as committing or as committed, never in neither.
    """
    t, p, c = s.tables.c, s.partitions.c, s.chunks.c
    mine = sa.select(t.id).where(t.namespace == namespace).scalar_subquery()
    partitions = (
        sa.select(
            sa.func.coalesce(
                sa.func.sum(
                    sa.case(
                        (
                            p.state.in_([PartitionState.STANDARD.value, PartitionState.EXPIRING.value]),
                            sa.func.coalesce(p.bytes, 0),
                        ),
                        (p.state == PartitionState.EXPIRED.value, 0),  # its files left the table
                        else_=p.staged_bytes,
                    )
                ),
                0,
            )
        )
        .where(p.table_id.in_(mine))
        .scalar_subquery()
    )
    in_flight = (
        sa.select(sa.func.coalesce(sa.func.sum(c.bytes), 0))
        .where(c.state == ChunkState.COMMITTING.value, c.table_id.in_(mine))
        .scalar_subquery()
    )
    return int(conn.execute(sa.select(partitions + in_flight)).scalar() or 0)


class QuotaSetMeanwhile(Exception):
    """:func:`fence_commit` found a quota set after its first read, under a shared lock that cannot
    become the exclusive one the check needs: run the transaction again (it will take that lock)."""


def fence_commit(
    conn: Connection,
    chunk_id: str,
    table_id: int,
    label: str,
    *,
    exclusive: bool = False,
    keyed: bool | None = None,
) -> None:
    """``begin_commit``'s fence and quota check of chunk ``chunk_id`` (of table ``table_id``).

    Refuses the chunk while its namespace is fenced by a move (:func:`fence_table`), and if its bytes
    would take the namespace past its quota. A namespace with a quota is locked exclusively until the
    transaction ends, so the next writer's check counts this chunk (writers are checked one after
    another); one without is locked shared, enough to hold a move's fence or a new quota off until
    this chunk is COMMITTING (counted), so commits there do not queue behind each other. The quota is
    read once without a lock to choose; if it was set meanwhile, :class:`QuotaSetMeanwhile` (retry
    with ``exclusive``).

    A companion's chunk (dead letters, late rows) is part of a main chunk's commit that was checked
    already; refusing it half-way would split that commit. It passes both (its bytes still count).

    ``keyed``: whether the writer staged the chunk for a keyed table; a chunk staged without the key
    that the table was given since (``TableStore.declare_keys``) is refused (TableChangedError).
    """
    t, c, n = s.tables.c, s.chunks.c, s.namespaces.c
    found = conn.execute(
        sa.select(t.namespace, t.kind, c.bytes, n.quota_bytes, t["keys"])
        .select_from(
            s.chunks.join(s.tables, c.table_id == t.id).outerjoin(s.namespaces, n.name == t.namespace)
        )
        .where(c.id == chunk_id)
    ).first()
    if found is None or found.kind != TableKind.MAIN.value:
        fence_table(conn, table_id, label, main_only=True)  # a table that is gone says so
        return
    namespace, _, chunk_bytes, quota, keys = found
    if keyed is False and keys is not None:
        raise TableChangedError(
            f"chunk {chunk_id} was written before its table was given a primary key: it was not "
            "committed; write it again"
        )
    if quota is None:
        pausepoint("chunk-quota-read")  # tests: a quota is set meanwhile
    row = fence_namespace(conn, namespace, share=quota is None and not exclusive)
    if row is None or row.quota_bytes is None:
        return
    if quota is None and not exclusive:
        raise QuotaSetMeanwhile(namespace)
    used = committed_bytes(conn, namespace)
    pausepoint("chunk-quota-checked")  # tests: other writers' checks arrive meanwhile
    if used + chunk_bytes > row.quota_bytes:
        raise QuotaExceededError(
            f"namespace {namespace} is over its quota: it holds {format_size(used)} ({used} bytes) of "
            f"{format_size(row.quota_bytes)} ({row.quota_bytes} bytes), and this chunk adds "
            f"{chunk_bytes} bytes; nothing was committed. Free space (drop a table) or raise the "
            f"quota: streampart namespace alter {namespace} --quota SIZE"
        )


class NamespaceStore(Database):
    """Namespaces."""

    def create_namespace(
        self,
        name: str,
        *,
        isolated: bool = False,
        quota_bytes: int | None = None,
        description: str = "",
        default_retain: timedelta | None = None,
        now: datetime | None = None,
    ) -> Namespace:
        check_namespace(name)
        with self.tx() as conn:
            if lock_namespace(conn, name) is not None:
                raise AlreadyExistsError(f"namespace {name} exists already")
            conn.execute(
                sa.insert(s.namespaces).values(
                    name=name,
                    isolated=isolated,
                    quota_bytes=quota_bytes,
                    description=description,
                    default_retain_s=_seconds(default_retain),
                    created_at=_db(now or _now()),
                )
            )
        return self.get_namespace(name)

    def get_namespace(self, name: str) -> Namespace:
        with self.read_tx() as conn:
            row = conn.execute(sa.select(s.namespaces).where(s.namespaces.c.name == name)).first()
        if row is None:
            raise NotFoundError(f"namespace {name} does not exist")
        return namespace_from_row(row)

    def find_namespace(self, name: str) -> Namespace | None:
        try:
            return self.get_namespace(name)
        except NotFoundError:
            return None

    def list_namespaces(self) -> list[Namespace]:
        with self.read_tx() as conn:
            rows = conn.execute(sa.select(s.namespaces).order_by(s.namespaces.c.name)).all()
        return [namespace_from_row(r) for r in rows]

    def alter_namespace(
        self,
        name: str,
        *,
        isolated: bool | None = None,
        quota_bytes: int | None = _UNSET,
        description: str | None = None,
        default_retain: timedelta | None = _UNSET,
    ) -> Namespace:
        """Change a namespace's settings (``quota_bytes=None`` removes its quota, ``default_retain=None``
        its default retention)."""
        values: dict[str, Any] = {}
        if isolated is not None:
            values["isolated"] = isolated
        if quota_bytes is not _UNSET:
            values["quota_bytes"] = quota_bytes
        if description is not None:
            values["description"] = description
        if default_retain is not _UNSET:
            values["default_retain_s"] = _seconds(default_retain)
        with self.tx() as conn:
            if fence_namespace(conn, name) is None:
                raise NotFoundError(f"namespace {name} does not exist")
            if values:
                conn.execute(sa.update(s.namespaces).where(s.namespaces.c.name == name).values(**values))
        return self.get_namespace(name)

    def drop_namespace(self, name: str) -> None:
        """Remove an empty namespace's row (the catalog empties it first, or refuses)."""
        with self.tx() as conn:
            if fence_namespace(conn, name) is None:
                raise NotFoundError(f"namespace {name} does not exist")
            tables, links = _members(conn, name)
            if tables or links:
                held = ", ".join([*tables, *links])
                raise UserInputError(f"namespace {name} is not empty: it holds {held}")
            conn.execute(sa.delete(s.namespaces).where(s.namespaces.c.name == name))
            # its explicit route goes with it: a route to nothing would keep its metastore in use
            if conn.execute(sa.delete(s.routes).where(s.routes.c.namespace == name)).rowcount:
                bump_route_version(conn)

    def namespace_members(self, name: str) -> tuple[list[str], list[str]]:
        """The names of the namespace's tables and of its links."""
        with self.read_tx() as conn:
            return _members(conn, name)

    def committed_bytes(self, namespace: str) -> int:
        """The bytes the namespace's quota counts now (see :func:`committed_bytes`)."""
        with self.read_tx() as conn:
            return committed_bytes(conn, namespace)


def _members(conn: Connection, name: str) -> tuple[list[str], list[str]]:
    tables = conn.execute(
        sa.select(s.tables.c.name).where(s.tables.c.namespace == name).order_by(s.tables.c.name)
    ).scalars()
    links = conn.execute(
        sa.select(s.links.c.name).where(s.links.c.namespace == name).order_by(s.links.c.name)
    ).scalars()
    return [f"{name}.{t}" for t in tables], [f"{name}.{x}" for x in links]
