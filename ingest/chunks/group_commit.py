"""Group commit: the commits of one table in flight in one process land together, as one.

Many threads of a process (the HTTP server's request threads, a program's writer threads, the
Kafka ingest's micro-batches) commit chunks of the same table. Each Delta commit costs a log
write and, when two race, a conflict check and a retry; so instead of racing, the threads of a
process queue up per table (:class:`CommitGroups`). The first to arrive *leads*: it takes
everything queued at that moment as one group, commits it (:func:`_commit_group`), hands each
member its own outcome, and passes the lead to the first member that queued meanwhile. Under
load a group is everything that arrived during the previous group's commit; a lone writer leads
a group of one at once, so its latency does not grow.

``linger``: after a group of more than one, the next leader waits up to this long for company
before it takes the queue (0: never). A table that sees one commit at a time never lingers.

The queue knows nothing of chunks: a member carries an item, and ``commit`` must settle every
member of its group (``resolve`` or ``fail``); an exception out of ``commit`` fails the members
it left unsettled with that exception. Processes do not group with each other: across
processes, Delta's optimistic concurrency orders the groups (appends do not conflict).

A group of chunks lands as one Delta commit and one metastore transaction. The "snapshot" it
commits on is the newest version of the log, found with a few file checks
(``metastore.delta.log.newest_version``); the partition states are read after it, so the fencing is
exactly a lone chunk's (see ``ingest/chunks/__init__.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import random
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from ingest.chunks.base import CommitResult, Writer, remove_staged
from ingest.chunks.evolving import GroupSchema, schema_change_of
from ingest.chunks.late import commit_dead_letters, route_late
from ingest.commit_holders import commit_holder
from ingest.errors import ChunkBusyError, ChunkStateError, CommitTimeoutError
from metastore import clock
from metastore.crashpoints import crashpoint, pausepoint
from metastore.delta import staging
from metastore.delta.errors import first_line
from metastore.delta.files import file_exists, live_files
from metastore.delta.log import (
    CHUNKS_KEY,
    GROUP_KEY,
    SCHEMA_KEY,
    commit_chunks,
    commit_info,
    newest_version,
    verify_newest,
)
from metastore.delta.stats import stats_by_path
from metastore.errors import (
    CommitStateUnknownError,
    ConflictError,
    StorageFullError,
    StreampartError,
    TableIntegrityError,
)
from metastore.models import Chunk, ChunkState, Column, Mode, PartitionState, StagedFile

T = TypeVar("T")
R = TypeVar("R")


class UnsettledError(RuntimeError):
    """A group's commit returned without settling this member (a bug in ``commit``)."""


@dataclass(eq=False)
class Member(Generic[T, R]):
    """One caller's item in a group, and what became of it."""

    item: T
    _wake: threading.Event = field(default_factory=threading.Event, repr=False)
    _settled: bool = False
    _result: R | None = None
    _error: BaseException | None = None

    @property
    def settled(self) -> bool:
        return self._settled

    def resolve(self, result: R) -> None:
        if not self._settled:
            self._settled, self._result = True, result
            self._wake.set()

    def fail(self, error: BaseException) -> None:
        if not self._settled:
            self._settled, self._error = True, error
            self._wake.set()

    def outcome(self) -> R:
        assert self._settled
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]


@dataclass
class _Queue(Generic[T, R]):
    pending: list[Member[T, R]] = field(default_factory=list)
    leader: Member[T, R] | None = None
    last_size: int = 0
    # what leaders keep between groups (the table's Delta snapshot): only the leader touches it
    context: dict[str, Any] = field(default_factory=dict)


class CommitGroups(Generic[T, R]):
    """Per key, callers' items committed in groups by one leader at a time (see the module doc)."""

    def __init__(self, linger: float = 0.0) -> None:
        self.linger = linger
        self._lock = threading.Lock()
        self._queues: dict[Hashable, _Queue[T, R]] = {}

    def context(self, key: Hashable) -> dict[str, Any]:
        """What the leaders of ``key`` keep (read-only outside a leader; empty if none yet)."""
        queue = self._queues.get(key)
        return queue.context if queue is not None else {}

    def submit(
        self,
        key: Hashable,
        item: T,
        commit: Callable[[list[Member[T, R]], dict[str, Any]], None],
        linger: float | None = None,
    ) -> R:
        """Queue ``item`` under ``key``; return its outcome once a group holding it is committed.

        ``commit`` is the caller's, used if this caller comes to lead a group.
        """
        member: Member[T, R] = Member(item)
        with self._lock:
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _Queue()
            queue.pending.append(member)
            leads = queue.leader is None
            if leads:
                queue.leader = member
        if not leads:
            member._wake.wait()
            if member.settled:
                return member.outcome()
        self._lead(queue, key, commit, self.linger if linger is None else linger)
        return member.outcome()

    def _lead(
        self,
        queue: _Queue[T, R],
        key: Hashable,
        commit: Callable[[list[Member[T, R]], dict[str, Any]], None],
        linger: float,
    ) -> None:
        if linger > 0 and queue.last_size > 1:
            time.sleep(linger)  # a busy table: let the writers now staging catch this group
        with self._lock:
            group, queue.pending = queue.pending, []
        try:
            commit(group, queue.context)
        except BaseException as exc:
            for m in group:
                m.fail(exc)
            raise
        finally:
            for m in group:
                m.fail(UnsettledError("the group's commit left this chunk's outcome unknown; retry"))
            with self._lock:
                queue.last_size = len(group)
                if queue.pending:
                    queue.leader = queue.pending[0]
                    queue.leader._wake.set()  # not settled: it wakes to lead the next group
                else:
                    queue.leader = None
                    if not queue.context:
                        del self._queues[key]


# -- a group of chunks ---------------------------------------------------------------------------
# A planned file: (its path in the log, its partition, its rows).
Placed = tuple[str, datetime, int]


@dataclass(eq=False)
class _Pending:
    """A COMMITTING chunk waiting in its table's commit group, and what its commit found so far."""

    writer: Writer
    chunk: Chunk
    may_have_landed: bool  # a taken-over attempt: an earlier one may have committed it
    late_rows: int = 0
    diverted: set[str] = field(default_factory=set)  # late files sent to the late table already
    columns: tuple[Column, ...] = ()  # the log's columns, once its files brought some (evolving.py)

    @property
    def deadline(self) -> datetime:
        assert self.chunk.committing_since is not None
        return self.chunk.committing_since + self.writer.config.commit_timeout


_Member = Member[_Pending, CommitResult]

# One queue per table per process.
_GROUPS: CommitGroups[_Pending, CommitResult] = CommitGroups()


def _group_key(writer: Writer) -> tuple[str, str, str]:
    # the uid, not the row id: SQLite may give a table made again the id of a dropped one
    return (writer.store.url, writer.table.uid, writer.table.location)


def base_version(writer: Writer) -> int:
    """A version the writer's next commit will land after (where a search for it may stop)."""
    known = _GROUPS.context(_group_key(writer)).get("version")
    return int(known) if known is not None else writer.store.newest_version(writer.table.id)


def commit_in_group(writer: Writer, chunk: Chunk, may_have_landed: bool) -> CommitResult:
    """Commit the COMMITTING ``chunk`` together with its table's other commits now in flight.

    ``may_have_landed``: a taken-over attempt, whose earlier attempt may have committed it.
    """
    pending = _Pending(writer, chunk, may_have_landed)
    if chunk.dead_letter_rows:
        try:
            commit_dead_letters(writer, chunk)
        except Exception as exc:
            _release(pending, exc)
            raise
    return _GROUPS.submit(
        _group_key(writer), pending, _commit_group, linger=writer.config.group_wait.total_seconds()
    )


def _commit_group(group: list[_Member], context: dict[str, Any]) -> None:
    """:func:`_commit_group_once`; if it fails before its Delta commit could have landed, the chunks
    it leaves unanswered are released (COMMITTING → RESERVED), so their retries begin at once
    rather than wait out this attempt's deadline as busy."""
    landing = {"maybe": False}
    try:
        _commit_group_once(group, context, landing)
    except BaseException as exc:
        if not landing["maybe"]:
            for m in group:
                if not m.settled:
                    _release(m.item, exc)
        raise


def _require_live(members: list[_Member]) -> None:
    """The fence of a group's Delta commit: every member's holder lease live, and unbroken since its
    attempt began (``CommitHolder.require_live``); members may come through several store objects."""
    by_holder: dict[int, tuple[Any, list[str]]] = {}
    for m in members:
        holder = commit_holder(m.item.writer.store)
        by_holder.setdefault(id(holder), (holder, []))[1].append(m.item.chunk.id)
    for holder, ids in by_holder.values():
        holder.require_live(ids)


def _release(p: _Pending, why: BaseException) -> None:
    """Release ``p``'s chunk after its attempt failed, known to have committed nothing.

    Not a chunk whose earlier attempt may have landed and was not looked for yet, nor one whose
    late rows went elsewhere already (a retry re-stages the chunk under new file names, and would
    divert them again). Best effort: a metastore that does not answer leaves the chunk to its
    holder's lease and deadline.
    """
    if p.may_have_landed or p.diverted or p.late_rows:
        return
    with contextlib.suppress(StreampartError):
        p.writer.store.release_commit(
            p.chunk, error=f"commit attempt failed, nothing committed: {first_line(why)}"
        )


def _commit_group_once(group: list[_Member], context: dict[str, Any], landing: dict[str, bool]) -> None:
    """Commit a group of one table's COMMITTING chunks in one Delta commit; settle each member.

    Each chunk keeps its own outcome: one whose earlier attempt landed is answered from the log,
    one past its deadline or whose files are gone or whose rows are all late leaves the group
    with its own answer, and the rest land together — one Delta commit naming every chunk it
    adds (CHUNKS_KEY), one metastore transaction recording them all at its version. The fencing
    is one chunk's: (a) the snapshot first, (b) then the partitions' states, so a roll that
    seals meanwhile makes the commit conflict, and the group is planned again.

    ``context`` keeps the newest version of the table's log seen, between groups;
    ``landing["maybe"]`` says whether a Delta commit of the group may have landed.
    """
    lead = group[0].item.writer
    active = _answer_landed(lead, group)
    attempt = 0
    while active:
        active = _drop_unready(active)
        if not active:
            return
        read_version = _newest_version(lead, context)  # (a) the log's newest version first …
        # (b) … then the partitions' states
        table = lead.table
        open_value = lead.store.streaming_partition(table.id).value if table.mode is Mode.ARRIVAL else None
        plans = _plan_group(active, open_value, read_version)
        planned = [m for m in active if m in plans]
        change = schema_change_of(lead, planned, read_version, context, _fail_released)
        active = [m for m in active if not m.settled]
        if not active:
            return
        attempt += 1
        version = _append(lead, active, plans, read_version, landing, attempt, change)
        if version is None:
            if change is not None:
                lead.store.discard_schema_change(lead.table.id, change.key)
            continue  # not landed: plan again
        context["version"] = version
        try:
            _record_group(active, plans, version, change)
        except TableIntegrityError:  # the version was taken again: the next group loads and verifies
            context.pop("version", None)
            raise
        _unstage_committed(lead, active, plans)
        return


def _fail_released(m: _Member, exc: Exception) -> None:
    _release(m.item, exc)
    m.fail(exc)


def _answer_landed(lead: Writer, group: list[_Member]) -> list[_Member]:
    """Answer from the log the members whose earlier attempt landed; the members still to commit."""
    table, warehouse = lead.table, lead.warehouse
    active: list[_Member] = []
    for m in group:
        p = m.item
        if p.may_have_landed:
            try:
                assert p.chunk.base_version is not None
                version = warehouse.find_chunk_commit(table, p.chunk.id, p.chunk.base_version)
                if version is not None:
                    m.resolve(_finish(p.writer, p.chunk, version, 0))
                    continue
                p.may_have_landed = False  # looked for: no earlier attempt landed it
            except Exception as exc:  # this member's own answer: the group goes on without it
                m.fail(exc)
                continue
        active.append(m)
    return active


def _drop_unready(active: list[_Member]) -> list[_Member]:
    """Fail the members past their deadline or whose staged files are gone; the rest."""
    for m in active:
        p = m.item
        try:
            if clock.now() > p.deadline:
                timeout = CommitTimeoutError(
                    f"chunk {p.chunk.id} did not commit before its deadline; nothing was committed: "
                    "retry with the same idempotency key"
                )
                _release(p, timeout)
                raise timeout
            _require_files(p.writer, p.chunk)
        except Exception as exc:
            m.fail(exc)
    return [m for m in active if not m.settled]


def _plan_group(
    active: list[_Member], open_value: datetime | None, read_version: int
) -> dict[_Member, list[Placed]]:
    """Plan each member's files into partitions; route its late rows, and answer a member whose
    rows are all late (or that fails) on its own. The plans of the members with files to add."""
    plans: dict[_Member, list[Placed]] = {}
    for m in active:
        p = m.item
        try:
            plan, late = _plan(p.writer, p.chunk, open_value)
            if late:
                p.late_rows += route_late(p.writer, p.chunk, [f for f in late if f.path not in p.diverted])
                p.diverted.update(f.path for f in late)
            if plan:
                plans[m] = plan
            else:  # all of it late: nothing to add
                m.resolve(_finish(p.writer, p.chunk, read_version, p.late_rows, partitions=()))
        except Exception as exc:
            m.fail(exc)
    return plans


def _append(
    lead: Writer,
    active: list[_Member],
    plans: dict[_Member, list[Placed]],
    read_version: int,
    landing: dict[str, bool],
    attempt: int,
    change: GroupSchema | None = None,
) -> int | None:
    """Append the group's planned files to the log after ``read_version``; the version it landed at,
    or None if it did not land and must be planned again (``attempt``: its number, for the backoff).
    ``change``: the schema change the files need, committed in the same version."""
    table, warehouse = lead.table, lead.warehouse
    crashpoint("chunk-before-delta-commit")
    pausepoint("chunk-before-delta-commit")  # tests: chunks of several writers in flight at once
    group_id = uuid.uuid4().hex
    metadata = {GROUP_KEY: group_id, CHUNKS_KEY: ",".join(m.item.chunk.id for m in active)}
    if change is not None:
        metadata[SCHEMA_KEY] = change.key
    files = [f for m in active for f in plans[m]]
    staged = {f.path.rsplit("/", 1)[-1]: f for m in active for f in m.item.chunk.files}
    named = {name: f.stats for name, f in staged.items()}
    # a placed file is its staged file under another name: the size the writer recorded
    sizes = {path: staged[path.rsplit("/", 1)[-1]].bytes for path, _, _ in files}
    landing["maybe"] = True
    try:
        # fenced: written only while this process's commit-holder lease is live (checked last
        # thing before the commit file), never once a successor may take its chunks over
        version: int = warehouse.commit_files(
            table,
            read_version,
            files,
            metadata,
            fence=functools.partial(_require_live, active),
            schema_change=change.action if change is not None else None,
            ranges=stats_by_path(named, [path for path, _, _ in files]),
            sizes=sizes,
        )
        if change is not None:
            crashpoint("chunk-evolving-after-delta-commit")
        crashpoint("chunk-after-delta-commit")
    except (StorageFullError, CommitTimeoutError):  # not written (no space, or the lease ran out)
        landing["maybe"] = False
        raise
    except ConflictError:
        # a roll sealed the table since our snapshot: decide the partitions again
        landing["maybe"] = False
        time.sleep(min(0.5, 0.01 * 2**attempt) * random.random())
        return None
    except CommitStateUnknownError:
        # an ambiguous failure (I/O error mid-commit): find out before committing again
        time.sleep(min(1.0, 0.05 * 2**attempt))
        found: int | None = warehouse.find_commit(table, GROUP_KEY, group_id, read_version)
        if found is None:
            landing["maybe"] = False
        return found
    return version


def _unstage_committed(lead: Writer, active: list[_Member], plans: dict[_Member, list[Placed]]) -> None:
    """Remove the staged names of the files a landed group committed: the log lists their placed paths."""
    for m in active:
        committed = {path for path, _, _ in plans[m]}
        for f in m.item.chunk.files:
            if f.path not in committed:
                staging.unstage(lead.table, f.path)


def _newest_version(lead: Writer, context: dict[str, Any]) -> int:
    """The newest version of the table's log, for a group to commit after (the fencing's snapshot).

    Looked for after the last group's version: a few file checks, and the log's tail since its
    last checkpoint checked to be whole. The first time (or when that version is gone, or the
    tail is damaged) the table is loaded, and its log is checked to hold every commit the
    metastore recorded.
    """
    table, warehouse = lead.table, lead.warehouse
    known = context.get("version")
    version = newest_version(table, known) if known is not None else None
    if version is None:
        recorded = lead.store.newest_version(table.id)  # the metastore first …
        chunks = lead.store.committed_at(table.id, [recorded]).get(recorded)
        dt = warehouse.load(table)  # … then the log
        verify_newest(table, dt, recorded, chunks)
        version = int(dt.version())
    context["version"] = version
    return version


def _record_group(
    members: list[_Member], plans: dict[_Member, list[Placed]], version: int, change: GroupSchema | None
) -> None:
    """Record a landed group commit at ``version`` in one metastore transaction (with the schema
    ``change`` it made, if any); answer each member."""
    lead = members[0].item.writer
    store = lead.store
    recorded = store.finish_commits(
        [
            (m.item.chunk, version, sorted({part for _, part, _ in plans[m]}), m.item.late_rows)
            for m in members
        ],
        schema_change=change.key if change is not None else None,
    )
    if change is not None and any(c.key == change.key for c in store.pending_schema_changes(lead.table.id)):
        lead.catalog.schemas.settle(lead.table)  # an earlier change had to finish first
    for m, done in zip(members, recorded, strict=True):
        writer = m.item.writer
        if m.item.columns:
            writer.schema_changed(m.item.columns)
        if isinstance(done, Chunk):
            m.resolve(writer.result(done))
            continue
        # not COMMITTING any more: another attempt recorded this very commit (it is in the log)
        current = store.get_chunk(m.item.chunk.id)
        if current.state is ChunkState.COMMITTED:
            m.resolve(dataclasses.replace(writer.result(current), repeated=True))
        else:
            m.fail(done)


# -- one member's steps ----------------------------------------------------------------------------
def _require_files(writer: Writer, chunk: Chunk) -> None:
    """End the chunk cleanly if a staged file is gone: it can never commit whole.

    Only ever reached for a commit that has not landed (checked just before), so nothing
    of the chunk is visible; the chunk is aborted and its other files go.
    """
    missing = [f.path for f in chunk.files if not file_exists(writer.table, f.path)]
    if not missing:
        return
    message = (
        f"staged file {missing[0]} of chunk {chunk.id} is gone from storage"
        f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; nothing of the chunk "
        "was committed; write its data again under a new idempotency key"
    )
    try:
        writer.store.abort_chunk(chunk, error=message)
    except ConflictError:  # taken over by another attempt: its outcome stands
        raise ChunkBusyError(f"chunk {chunk.id} was taken over by another commit attempt") from None
    remove_staged(writer, chunk)
    raise ChunkStateError(message)


def _plan(writer: Writer, chunk: Chunk, open_value: datetime | None) -> tuple[list[Placed], list[StagedFile]]:
    """Where each staged file goes: ``(path, partition, rows)`` to commit, and the late files.

    ``open_value``: an arrival-mode table's streaming partition (read once for a group).
    Late (event-time tables): rows of a partition that is sealed already, or whose period
    ended more than the table's max-age ago (no partition is opened for those).
    The path committed is the file's link in its partition's staging directory
    (``metastore/delta/staging.py``): a reader that takes partition values from paths finds them.
    """
    table = writer.table
    if table.mode is Mode.ARRIVAL:
        assert open_value is not None
        return [(staging.place(table, f.path, open_value), open_value, f.rows) for f in chunk.files], []
    plan, late = [], []
    now = clock.now()
    for f in chunk.files:
        assert f.period is not None
        if table.too_old(f.period, now):
            late.append(f)
            continue
        partition = writer.store.ensure_partition(table.id, f.period)
        if partition.state is PartitionState.STREAMING:
            plan.append((staging.place(table, f.path, f.period), f.period, f.rows))
        else:
            late.append(f)
    return plan, late


def _finish(
    writer: Writer, chunk: Chunk, version: int, late_rows: int, partitions: Sequence[datetime] | None = None
) -> CommitResult:
    """Record ``chunk`` COMMITTED at ``version`` (which holds it) on its own; its result."""
    named = None
    if partitions is None:  # found in the log after a crash: read the partitions from there
        partitions = _partitions_of_commit(writer, chunk, version)
        info = commit_info(writer.table, version) or {}
        named = commit_chunks(info)
        if SCHEMA_KEY in info:  # it brought columns: finish that change (left pending by the crash)
            writer.catalog.schemas.settle(writer.table)
    try:
        done = writer.store.finish_commit(chunk, version, partitions, late_rows, named=named)
    except ConflictError:
        done = writer.store.get_chunk(chunk.id)
        if done.state is not ChunkState.COMMITTED:
            raise
    return writer.result(done)


def _partitions_of_commit(writer: Writer, chunk: Chunk, version: int) -> list[datetime]:
    # at the very version that added them, the chunk's files cannot have been swept yet; the
    # log lists them by their placed paths (or, committed before placing, their staged ones)
    names = {f.path.rsplit("/", 1)[-1] for f in chunk.files}
    dt = writer.warehouse.load(writer.table, version)
    return sorted({f.partition for f in live_files(dt) if f.staged and f.name in names})
