"""Chunks: RESERVED → COMMITTING → COMMITTED | ABORTED | EXPIRED, each step a guarded update.

A producer reserves a chunk (once per idempotency key), records the files it staged, then
commits: ``begin_commit`` stamps one attempt (only one committer wins, and only before the
chunk's TTL), ``finish_commit`` records the Delta version. A commit attempt whose writer
stalled is replaced by ``take_over_commit``; the replaced attempt is fenced out of every later
step. Every step names the precondition that failed when it loses (see ``preconditions.py``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from metastore import schema as s
from metastore.errors import NotFoundError, StreampartError, TableIntegrityError
from metastore.models import Chunk, ChunkState, StagedFile, TableActivity, check_transition, utc
from metastore.store.engine import Database, _db, _now, _out, locking
from metastore.store.namespaces import QuotaSetMeanwhile, fence_commit, fence_table
from metastore.store.preconditions import Precondition, at, failed_precondition, guarded_update, state_in
from metastore.store.schema_changes import finish_change


def chunk_from_row(row: Any) -> Chunk:
    m = row._mapping
    return Chunk(
        id=m["id"],
        table_id=m["table_id"],
        idempotency_key=m["token"],  # the column keeps its first name
        state=ChunkState(m["state"]),
        created_at=_out(m["created_at"]),
        expires_at=_out(m["expires_at"]),
        files=tuple(StagedFile(**f) for f in m["files"]),
        rows=m["rows"],
        bytes=m["bytes"],
        committing_since=_out(m["committing_since"]),
        attempt=m["attempt"],
        base_version=m["base_version"],
        version=m["version"],
        partitions=tuple(utc(datetime.fromisoformat(v)) for v in m["partitions"]),
        dead_letter_rows=m["dead_letter_rows"],
        late_rows=m["late_rows"],
        error=m["error"],
        content_digest=m["content_digest"],
        holder=m["holder"],
    )


def bytes_in(chunk: Chunk, value: datetime) -> int:
    """The bytes a committed chunk put into the partition ``value``.

    Arrival mode: every file went to its one partition (files carry no period). Event time: the
    files of that period (late files went elsewhere: their partitions are not the chunk's).
    """
    return sum(f.bytes for f in chunk.files if f.period is None or utc(f.period) == utc(value))


def committed_files(chunk: Chunk) -> set[str]:
    """The names (last path component) of the data files a COMMITTED chunk's commit added.

    Its files for the partitions it went to (late files went elsewhere). None for a chunk whose
    rows were all late: it is recorded at the version its commit read, and added nothing.
    """
    values = {utc(p) for p in chunk.partitions}
    if not values:
        return set()
    return {f.path.rsplit("/", 1)[-1] for f in chunk.files if f.period is None or utc(f.period) in values}


# -- the preconditions of a chunk's steps --------------------------------------------------------
def _in_state(*expected: ChunkState) -> Precondition:
    return state_in(s.chunks.c.state, expected)


def _unexpired(now: datetime) -> Precondition:
    """Its TTL has not run out (a reserved chunk past it is expired, whether swept yet or not)."""
    c = s.chunks.c
    return Precondition(
        c.expires_at > _db(now),
        lambda m: m["expires_at"] > _db(now),
        lambda m: f"expired at {at(m['expires_at'])} (its TTL)",
    )


def _holds_content(digest: str) -> Precondition:
    """What is staged is ``digest``'s content (or nothing said what it is)."""
    c = s.chunks.c
    return Precondition(
        sa.or_(c.content_digest.is_(None), c.content_digest == digest),
        lambda m: m["content_digest"] in (None, digest),
        lambda m: f"holds other content (digest {m['content_digest']}), not {digest}",
    )


def _attempt_is(attempt: str | None) -> Precondition:
    """The commit attempt stamped on it is still ``attempt`` (none took it over)."""
    c = s.chunks.c
    return Precondition(
        c.attempt == attempt,
        lambda m: m["attempt"] == attempt,
        lambda m: (
            f"is held by another commit attempt ({m['attempt']}, since {at(m['committing_since'])}), "
            f"not {attempt}"
        ),
    )


def insert_chunk(conn: Connection, table_id: int, key: str | None, ttl: timedelta, now: datetime) -> Chunk:
    """Reserve a chunk in the transaction ``conn`` (a table's first, in the table's own: see
    :meth:`TableStore.create_table`). A key taken already raises IntegrityError."""
    chunk_id = str(uuid.uuid4())
    row = conn.execute(
        sa.insert(s.chunks)
        .values(
            id=chunk_id,
            table_id=table_id,
            token=key,
            state=ChunkState.RESERVED.value,
            created_at=_db(now),
            expires_at=_db(now + ttl),
            files=[],
            rows=0,
            bytes=0,
            partitions=[],
            dead_letter_rows=0,
            late_rows=0,
        )
        .returning(*s.chunks.c)  # the new row in the same round trip
    ).one()
    return chunk_from_row(row)


def _refuse_reused_versions(
    conn: Connection,
    done: Sequence[tuple[Chunk, int, Sequence[datetime], int]],
    named: Mapping[int, Collection[str]] | None,
) -> None:
    """Refuse to record chunks at a version the metastore holds other commits at already.

    A Delta version is one commit: if chunks outside this group (or a roll's seal or sweep) were
    recorded at it, its commit file was deleted and the version taken again by this commit —
    the recorded commit's rows are gone from the log. Recording on would acknowledge a log that
    lost acknowledged rows. (Chunks whose rows were all late add nothing: they are recorded at
    the version their commit read, another commit's, and are not compared.)
    """
    group = {chunk.id for chunk, _, _, _ in done}
    for table_id, version in sorted({(chunk.table_id, v) for chunk, v, parts, _ in done if parts}):
        c, r = s.chunks.c, s.rolls.c
        others = [
            row.id
            for row in conn.execute(
                sa.select(c.id, c.partitions).where(
                    c.table_id == table_id, c.version == version, c.state == ChunkState.COMMITTED.value
                )
            )
            if row.id not in group and row.id not in (named or {}).get(version, ()) and row.partitions
        ]
        rolls = (
            conn.execute(
                sa.select(r.id).where(
                    r.table_id == table_id, sa.or_(r.seal_version == version, r.sweep_version == version)
                )
            )
            .scalars()
            .all()
        )
        if not others and not rolls:
            continue
        name = conn.execute(
            sa.select(s.tables.c.namespace, s.tables.c.name).where(s.tables.c.id == table_id)
        ).first()
        table = f"{name.namespace}.{name.name}" if name is not None else f"#{table_id}"
        what = f"chunk {others[0]}" if others else f"roll {rolls[0]}"
        raise TableIntegrityError(
            f"table {table}: a commit landed at Delta version {version}, but the metastore recorded "
            f"{what} committed at that version already: its commit file was deleted from the log and "
            "the version taken again, so its rows are gone; nothing more is recorded or committed "
            "until the table is restored from a backup (`streampart check` names the version)"
        )


class ChunkStore(Database):
    """Chunks and their commit protocol."""

    def reserve_chunk(
        self, table_id: int, key: str | None, ttl: timedelta, now: datetime | None = None
    ) -> Chunk:
        """Reserve a new chunk, or return the chunk already reserved under the idempotency ``key``."""
        return self.reserve_or_find(table_id, key, ttl, now)[0]

    def reserve_or_find(
        self, table_id: int, key: str | None, ttl: timedelta, now: datetime | None = None
    ) -> tuple[Chunk, bool]:
        """:meth:`reserve_chunk`, and whether the chunk is one reserved before under ``key``."""
        now = now or _now()
        if key is not None:
            existing = self.find_chunk_by_key(table_id, key)
            if existing is not None:
                return existing, True
        try:
            with self.tx() as conn:
                fence_table(conn, table_id, self.label, main_only=True)
                return insert_chunk(conn, table_id, key, ttl, now), False
        except IntegrityError:
            if key is None:
                raise
            found = self.find_chunk_by_key(table_id, key)
            assert found is not None
            return found, True

    def find_chunk_by_key(self, table_id: int, key: str) -> Chunk | None:
        """The table's chunk reserved under the idempotency ``key``, if any."""
        with self.read_tx() as conn:
            row = conn.execute(
                sa.select(s.chunks).where(s.chunks.c.table_id == table_id, s.chunks.c.token == key)
            ).first()
        return None if row is None else chunk_from_row(row)

    def get_chunk(self, chunk_id: str) -> Chunk:
        with self.read_tx() as conn:
            row = conn.execute(sa.select(s.chunks).where(s.chunks.c.id == chunk_id)).first()
        if row is None:
            raise NotFoundError(f"chunk {chunk_id} does not exist")
        return chunk_from_row(row)

    def list_chunks(
        self,
        table_id: int | None = None,
        states: Sequence[ChunkState] | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Chunk]:
        """Chunks (of one table, in some states), oldest reserved first; ``limit``: at most that many
        (with ``newest_first``: the newest ones, newest first)."""
        q = sa.select(s.chunks)
        if table_id is not None:
            q = q.where(s.chunks.c.table_id == table_id)
        if states:
            q = q.where(s.chunks.c.state.in_([st.value for st in states]))
        order = s.chunks.c.created_at.desc() if newest_first else s.chunks.c.created_at
        q = q.order_by(order, s.chunks.c.id.desc() if newest_first else s.chunks.c.id)
        if limit is not None:
            q = q.limit(limit)
        with self.read_tx() as conn:
            rows = conn.execute(q).all()
        return [chunk_from_row(r) for r in rows]

    def _update_chunk(self, chunk: Chunk, preconditions: Sequence[Precondition], **values: Any) -> Chunk:
        """One guarded step of ``chunk``; ConflictError names the precondition that failed."""
        with self.tx() as conn:
            row = guarded_update(
                conn, s.chunks, s.chunks.c.id == chunk.id, f"chunk {chunk.id}", preconditions, values
            )
        return chunk_from_row(row)

    def record_chunk_files(
        self,
        chunk: Chunk,
        files: Sequence[StagedFile],
        *,
        dead_letter_rows: int = 0,
        content_digest: str | None = None,
    ) -> tuple[Chunk, tuple[StagedFile, ...]]:
        """Record the files written for a reserved chunk, replacing an earlier attempt's.

        ``content_digest`` identifies the content they hold (see ``begin_commit``).

        Returns:
            The chunk, and the files it had until now (read in the same transaction): the
            caller may delete those the new set does not keep, and only those, only now.

        Raises:
            ConflictError: the chunk is not reserved any more (a commit began, or it was
                aborted or expired); nothing was recorded.
        """
        key, subject = s.chunks.c.id == chunk.id, f"chunk {chunk.id}"
        reserved = [_in_state(ChunkState.RESERVED)]
        with self.tx() as conn:
            fence_table(conn, chunk.table_id, self.label, main_only=True)
            q = sa.select(s.chunks.c.files).where(key, *(p.clause for p in reserved))
            before = conn.execute(locking(conn, q)).first()
            if before is None:
                raise failed_precondition(conn, s.chunks, key, subject, reserved)
            row = guarded_update(
                conn,
                s.chunks,
                key,
                subject,
                reserved,
                {
                    "files": [f.model_dump(mode="json") for f in files],
                    "rows": sum(f.rows for f in files),
                    "bytes": sum(f.bytes for f in files),
                    "dead_letter_rows": dead_letter_rows,
                    "content_digest": content_digest,
                },
            )
        return chunk_from_row(row), tuple(StagedFile(**f) for f in before.files)

    def begin_commit(
        self,
        chunk: Chunk,
        base_version: int,
        now: datetime | None = None,
        content_digest: str | None = None,
        holder: str | None = None,
        keyed: bool | None = None,
    ) -> Chunk:
        """RESERVED → COMMITTING, stamping this attempt; only one committer wins.

        With ``content_digest``, only if the staged content is that content (another producer
        may have re-staged the chunk under the same idempotency key with other data meanwhile).
        ``holder``: the process making the attempt (``ingest/commit_holders.py``). ``keyed``: whether
        the writer staged it for a keyed table (see ``fence_commit``).

        Raises:
            QuotaExceededError: the chunk's bytes would take its namespace past its quota
                (checked here, under the namespace's lock: see ``namespaces.py``).
            NamespaceMovingError: its namespace is being moved to another metastore (retry).
            TableChangedError: the table was given a primary key after the chunk was written.
        """
        now = now or _now()
        check_transition(chunk.state, ChunkState.COMMITTING)
        preconditions = [_in_state(ChunkState.RESERVED), _unexpired(now)]
        if content_digest is not None:
            preconditions.append(_holds_content(content_digest))
        values = {
            "state": ChunkState.COMMITTING.value,
            "committing_since": _db(now),
            "attempt": str(uuid.uuid4()),
            "base_version": base_version,
            "holder": holder,
        }
        for exclusive in (False, True):
            try:
                with self.tx() as conn:
                    fence_commit(conn, chunk.id, chunk.table_id, self.label, exclusive=exclusive, keyed=keyed)
                    row = guarded_update(
                        conn, s.chunks, s.chunks.c.id == chunk.id, f"chunk {chunk.id}", preconditions, values
                    )
                return chunk_from_row(row)
            except QuotaSetMeanwhile:
                continue  # again, under the exclusive lock the check needs
        raise AssertionError("unreachable: the exclusive attempt never asks for another")

    def take_over_commit(self, chunk: Chunk, now: datetime | None = None, holder: str | None = None) -> Chunk:
        """Replace a stale commit attempt (past its deadline, or its holder gone) by a new one."""
        now = now or _now()
        return self._update_chunk(
            chunk,
            [_in_state(ChunkState.COMMITTING), _attempt_is(chunk.attempt)],
            committing_since=_db(now),
            attempt=str(uuid.uuid4()),
            holder=holder,
        )

    def release_commit(self, chunk: Chunk, error: str | None = None) -> Chunk:
        """COMMITTING → RESERVED: the attempt ``chunk.attempt`` failed knowing nothing was committed.

        A retry then begins a new attempt at once instead of waiting out this one's deadline.
        Only the attempt that holds the chunk may release it.

        Raises:
            ConflictError: another attempt holds it now, or it is not COMMITTING.
        """
        check_transition(chunk.state, ChunkState.RESERVED)
        return self._update_chunk(
            chunk,
            [_in_state(ChunkState.COMMITTING), _attempt_is(chunk.attempt)],
            state=ChunkState.RESERVED.value,
            committing_since=None,
            attempt=None,
            base_version=None,
            holder=None,
            error=error,
        )

    def finish_commit(
        self,
        chunk: Chunk,
        version: int,
        partitions: Sequence[datetime],
        late_rows: int = 0,
        named: Collection[str] | None = None,
    ) -> Chunk:
        """COMMITTING → COMMITTED at ``version``, into ``partitions``; their bytes grow by its files'.

        ``named``: the chunks the commit at ``version`` names (see :meth:`finish_commits`).

        Raises:
            ConflictError: the chunk is not COMMITTING (another attempt finished or ended it).
            TableIntegrityError: the version was taken again (see :meth:`finish_commits`).
        """
        (done,) = self.finish_commits(
            [(chunk, version, partitions, late_rows)], None if named is None else {version: named}
        )
        if isinstance(done, StreampartError):
            raise done
        return done

    def finish_commits(
        self,
        done: Sequence[tuple[Chunk, int, Sequence[datetime], int]],
        named: Mapping[int, Collection[str]] | None = None,
        schema_change: str | None = None,
    ) -> list[Chunk | StreampartError]:
        """Record a group commit in one transaction: each ``(chunk, version, partitions, late_rows)``.

        ``schema_change``: the key of the pending schema change the commit made (new columns the
        chunks brought, in its ``metaData``): finished in the same transaction, so the table's
        columns and the chunks that brought them are recorded together — unless an earlier change
        in the log has not finished yet; then it stays pending for ``Schemas.settle``.

        Each chunk goes COMMITTING → COMMITTED as :meth:`finish_commit` says. One that is not
        COMMITTING any more (another attempt got there first) is left as it is, and the error
        that says so takes its place in the answer; the others are recorded all the same.

        ``named``: per version, the chunks its commit names (default: those of ``done``); other
        chunks recorded at that version mean the version was taken again.

        Raises:
            TableIntegrityError: the metastore holds another commit at one of the versions (its
                commit file was deleted and the version reused); nothing is recorded.
        """
        out: dict[int, Chunk | StreampartError] = {}
        committing = [_in_state(ChunkState.COMMITTING)]
        # the chunks recorded alike (one version, the same partitions and late rows: a group commit's
        # members, as a rule) in one UPDATE; the bytes added to each partition in one UPDATE each
        alike: dict[tuple[int, tuple[str, ...], int], list[int]] = {}
        for i, (chunk, version, partitions, late_rows) in enumerate(done):
            check_transition(chunk.state, ChunkState.COMMITTED)
            values = tuple(utc(p).isoformat() for p in partitions)
            alike.setdefault((version, values, late_rows), []).append(i)
        added: Counter[tuple[int, datetime]] = Counter()
        with self.tx() as conn:
            _refuse_reused_versions(conn, done, named)
            for (version, values, late_rows), members in alike.items():
                ids = [done[i][0].id for i in members]
                q = (
                    sa.update(s.chunks)
                    .where(s.chunks.c.id.in_(ids), *(p.clause for p in committing))
                    .values(state=ChunkState.COMMITTED.value, version=version,
                            partitions=list(values), late_rows=late_rows)
                )  # fmt: skip
                finished = {r.id: chunk_from_row(r) for r in conn.execute(q.returning(*s.chunks.c))}
                for i in members:
                    chunk = done[i][0]
                    if chunk.id not in finished:  # not COMMITTING any more: say why, record the rest
                        out[i] = failed_precondition(
                            conn, s.chunks, s.chunks.c.id == chunk.id, f"chunk {chunk.id}", committing
                        )
                        continue
                    out[i] = finished[chunk.id]
                    for value in done[i][2]:
                        added[(chunk.table_id, value)] += bytes_in(finished[chunk.id], value)
            for (table_id, value), n in sorted(added.items()):  # (one order: no deadlock between groups)
                conn.execute(
                    sa.update(s.partitions)
                    .where(s.partitions.c.table_id == table_id, s.partitions.c.value == _db(value))
                    .values(staged_bytes=s.partitions.c.staged_bytes + n)
                )
            if schema_change is not None and done:
                chunk, version = done[0][0], done[0][1]
                finish_change(conn, chunk.table_id, schema_change, version, _now(), strict=False)
        return [out[i] for i in range(len(done))]

    def committed_at(
        self, table_id: int, versions: Collection[int] | None = None, since: int | None = None
    ) -> dict[int, dict[str, set[str]]]:
        """What the metastore recorded committed at each Delta version: per version, per chunk,
        the names of the files its commit added (:func:`committed_files`).

        ``versions``: only those; ``since``: only versions after it. Chunks that added nothing
        (all late) are left out, and so are chunks pruned into summaries.
        """
        c = s.chunks.c
        q = sa.select(s.chunks).where(c.table_id == table_id, c.state == ChunkState.COMMITTED.value)
        if versions is not None:
            q = q.where(c.version.in_(list(versions)))
        if since is not None:
            q = q.where(c.version > since)
        with self.read_tx() as conn:
            rows = conn.execute(q).all()
        out: dict[int, dict[str, set[str]]] = {}
        for row in rows:
            chunk = chunk_from_row(row)
            names = committed_files(chunk)
            if names and chunk.version is not None:
                out.setdefault(chunk.version, {})[chunk.id] = names
        return out

    def abort_chunk(self, chunk: Chunk, error: str | None = None) -> Chunk:
        """RESERVED or COMMITTING → ABORTED; a COMMITTING chunk only by the attempt that holds it.

        An attempt that was taken over (it stalled past twice the commit timeout) must not abort
        the chunk its successor may have committed meanwhile, nor then delete its files.
        """
        check_transition(chunk.state, ChunkState.ABORTED)
        preconditions = [_in_state(chunk.state)]
        if chunk.state is ChunkState.COMMITTING:
            preconditions.append(_attempt_is(chunk.attempt))
        return self._update_chunk(chunk, preconditions, state=ChunkState.ABORTED.value, error=error)

    def expire_chunks(
        self, now: datetime | None = None, table_ids: Collection[int] | None = None
    ) -> list[Chunk]:
        """Reserved chunks past their expiry become EXPIRED; returns them (their files may go).

        ``table_ids``: only chunks of these tables (None: of every table).
        """
        now = now or _now()
        overdue = sa.select(s.chunks.c.id).where(
            s.chunks.c.state == ChunkState.RESERVED.value, s.chunks.c.expires_at <= _db(now)
        )
        if table_ids is not None:
            overdue = overdue.where(s.chunks.c.table_id.in_(list(table_ids)))
        with self.read_tx() as conn:  # the usual case, nothing to expire, takes no write lock
            if conn.execute(overdue.limit(1)).first() is None:
                return []
        with self.tx() as conn:
            expired = []
            for chunk_id in conn.execute(overdue).scalars().all():
                if conn.execute(
                    sa.update(s.chunks)
                    .where(s.chunks.c.id == chunk_id, s.chunks.c.state == ChunkState.RESERVED.value)
                    .values(state=ChunkState.EXPIRED.value, error="expired before commit")
                ).rowcount:
                    expired.append(chunk_id)
        return [self.get_chunk(cid) for cid in expired]

    def stale_commits(self, older_than: datetime) -> list[Chunk]:
        """COMMITTING chunks whose attempt began before ``older_than`` (their writer is gone)."""
        with self.read_tx() as conn:
            rows = conn.execute(
                sa.select(s.chunks).where(
                    s.chunks.c.state == ChunkState.COMMITTING.value,
                    s.chunks.c.committing_since < _db(older_than),
                )
            ).all()
        return [chunk_from_row(r) for r in rows]

    def pending_chunk_counts(self) -> dict[int, int]:
        """Per table, chunks reserved or committing (not yet visible, not yet given up)."""
        pending = [ChunkState.RESERVED.value, ChunkState.COMMITTING.value]
        with self.read_tx() as conn:
            rows = conn.execute(
                sa.select(s.chunks.c.table_id, sa.func.count())
                .where(s.chunks.c.state.in_(pending))
                .group_by(s.chunks.c.table_id)
            ).all()
        return {int(t): int(n) for t, n in rows}

    def table_activity(
        self, table_ids: Collection[int], recent: datetime, hour: datetime
    ) -> dict[int, TableActivity]:
        """Per table: its newest commit, its commits since ``recent``, its dead letters since ``hour``.

        A chunk's commit time is when its (winning) commit attempt began (``committing_since``):
        within a commit's few seconds of when it became visible. Each figure is an index probe or
        range on ``(table_id, state, committing_since)``, so the status page may ask every few
        seconds. A table whose chunk rows were all pruned shows its summaries' newest chunk.
        """
        c, summ = s.chunks, s.chunk_summaries
        committed = ChunkState.COMMITTED.value

        def of(table_id: int) -> Any:
            return sa.and_(c.c.table_id == table_id, c.c.state == committed)

        out: dict[int, TableActivity] = {}
        with self.read_tx() as conn:
            for table_id in table_ids:
                newest, recent_n, dead = conn.execute(
                    sa.select(
                        sa.select(sa.func.max(c.c.committing_since)).where(of(table_id)).scalar_subquery(),
                        sa.select(sa.func.count())
                        .where(of(table_id), c.c.committing_since >= _db(recent))
                        .scalar_subquery(),
                        sa.select(sa.func.coalesce(sa.func.sum(c.c.dead_letter_rows), 0))
                        .where(of(table_id), c.c.committing_since >= _db(hour))
                        .scalar_subquery(),
                    )
                ).one()
                if newest is None:  # pruned into summaries (a quiet table): the summaries know
                    newest = conn.execute(
                        sa.select(sa.func.max(summ.c.last_created_at)).where(
                            summ.c.table_id == table_id, summ.c.state == committed
                        )
                    ).scalar()
                out[table_id] = TableActivity(
                    newest_commit=_out(newest), recent_commits=int(recent_n), dead_letter_rows=int(dead)
                )
        return out
