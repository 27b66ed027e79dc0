"""Moving a namespace to another metastore, online: ``streampart namespace move NS --to M2``.

The namespace's rows (its row, tables with their uids, partitions, chunks, rolls and their
history, replicas and partition copies, links with the partitions they list, the quota ledger
columns) go from its metastore M1 to M2 with new row ids; data files stay where they are (a
table keeps its location). Writers see at most a retriable error while the route switches.

The protocol, each step recorded in the primary (``sp_moves``) *before* it is taken:

1. **record** the move at step ``fencing`` (refused: an unknown namespace or metastore, the same
   metastore, a target whose access type does not create the namespace, a source that may not be
   written, the namespace present in M2 already, another move of it in progress);
2. **fence** the namespace in M1 (``moving_to``): every transaction that writes it — a chunk's
   reserve, staging and commit, a roll's step, table and link changes — checks the fence inside
   itself and refuses with :class:`NamespaceMovingError` (retriable; HTTP 503 + Retry-After), so
   nothing new lands in M1 after the fence commits (see ``store/namespaces.py``);
3. **drain**: wait until no chunk of the namespace is COMMITTING. A commit that began before the
   fence may have its Delta commit landed and its bookkeeping not yet: it finishes in M1
   (``finish_commit`` is not fenced), and the copy then carries it. A commit whose writer died is
   rolled forward once it is stale, by the caller's ``resolve`` (the chunk protocol lives above
   this package). If the namespace does not drain in ``drain_timeout_s``, the move rolls back;
4. **copy** (step ``copying``): M2's partial copy of an earlier attempt is cleared, then the
   namespace row, each table with all its rows (one transaction per table: see
   ``store/transfer.py``), then the links. Step ``copied``;
   The copy in M2 is fenced too until the flip (a roll daemon serving M2 must not roll it while M1
   is its home);
5. **flip**: one transaction in the primary routes the namespace to M2, bumps the route-table
   version and records step ``flipped``; then M2's fence is lifted. From here on the move only
   goes forward;
6. **grace**: wait one route refresh interval, so every process has seen the new route before a
   single row leaves M1 (a process still reading M1 meanwhile reads the whole namespace there;
   its writes are fenced and retried through the new route);
7. **clean up**: M1's rows go, table by table, then links and the namespace row; then the move's
   record.

**Crash safety.** Rerunning ``namespace move NS --to M2`` after a crash anywhere resumes: before
the flip it fences again (idempotent), drains, clears M2's partial copy and copies again; after
the flip it finishes the cleanup. ``namespace move --abort NS`` rolls a move that has not flipped
back: M2's partial copy is cleared, M1 unfenced, the record removed. Chunks keep their ids and
idempotency keys, so a writer that retries with the same key after the move finds its chunk in M2.
One mover at a time: the record names its mover and a heartbeat (renewed every second by a thread
while the mover runs), every step is guarded by it, and a rerun takes over a mover whose process is
gone on this host at once (elsewhere once its heartbeat is 10 s stale).
Crash points: ``move-after-fence``, ``move-mid-copy``, ``move-before-flip``, ``move-after-flip``,
``move-mid-cleanup``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from metastore import clock
from metastore.crashpoints import crashpoint
from metastore.errors import (
    AlreadyExistsError,
    ConflictError,
    MoveBusyError,
    NamespaceMovingError,
    NotFoundError,
    RetriableError,
    StreampartError,
    UserInputError,
)
from metastore.federation import may_create, may_write
from metastore.models import Chunk, Move, MoveStep
from metastore.namespaces import check_namespace
from metastore.processes import alive
from metastore.router import Router
from metastore.store import Metastore

log = logging.getLogger(__name__)

# Why 180 s: a commit that began before the fence normally ends within milliseconds; one whose
# writer died is taken over only after twice the commit timeout (2 × 60 s by default), and the
# move's ``resolve`` rolls it forward then. Past 180 s the namespace's writers have waited long
# enough: the move rolls back and says which chunk held it.
DRAIN_TIMEOUT_S: float = 180
# Why 0.05 s: draining polls one indexed query of M1; commits in flight end in milliseconds.
DRAIN_POLL_S: float = 0.05
# Why 10 s: a mover shows it is alive (its heartbeat in the move's record) every second from a
# thread of its own, whatever step it is at, so ten seconds without one means its process died or
# froze, or cannot reach the primary (then its next step, guarded by the record's owner, fails
# anyway); a mover on the same host whose process is gone is replaced at once.
STALE_S: float = 10
# Why 1 s: a heartbeat is one write to the primary; once a second is plenty against STALE_S.
HEARTBEAT_S: float = 1


class Progress:
    """What a move reports while it copies (the CLI draws a bar per table from it)."""

    def table(self, name: str, rows: int) -> None:
        """A table's copy begins: ``rows`` rows to go (its own included)."""

    def advance(self, rows: int) -> None:
        """``rows`` more rows of the current table were written to the target."""

    def step(self, text: str) -> None:
        """The move reached a step (fenced, drained, flipped, cleaned up)."""


@dataclass
class MoveReport:
    """What a move did: the shape of ``namespace move --json``."""

    namespace: str
    source: str
    target: str
    resumed_at: str | None = None  # the step an earlier, interrupted run had reached
    tables: dict[str, int] = field(default_factory=dict)  # table → rows copied
    links: int = 0
    aborted: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "namespace": self.namespace,
            "from": self.source,
            "to": self.target,
            "resumed_at": self.resumed_at,
            "tables": self.tables,
            "links": self.links,
            "rows": sum(self.tables.values()),
            "aborted": self.aborted,
        }


class NamespaceMover:
    """Moves namespaces between the metastores of one federation (see the module's docstring).

    Args:
        router: The process's router (its primary records the move and the route).
        resolve: Called for a COMMITTING chunk that keeps the drain waiting (with its metastore's
            name): roll its commit forward if its writer is gone (the chunk protocol's recovery).
        drain_timeout_s: How long the drain waits for commits in flight before rolling back.
        grace_s: How long to wait between the flip and the cleanup (None: the router's refresh interval).
    """

    def __init__(
        self,
        router: Router,
        *,
        resolve: Callable[[str, Chunk], None] | None = None,
        drain_timeout_s: float = DRAIN_TIMEOUT_S,
        grace_s: float | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.router = router
        self.resolve = resolve
        self.drain_timeout_s = drain_timeout_s
        self.grace_s = router.refresh_s if grace_s is None else grace_s
        self.progress = progress or Progress()
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._beat = 0.0

    @property
    def primary(self) -> Metastore:
        return self.router.primary

    # -- the checks --------------------------------------------------------------------------
    def check(self, namespace: str, target: str) -> str:
        """Refuse a new move of ``namespace`` to ``target`` that cannot be made; its source's name."""
        check_namespace(namespace)
        self.router.refresh(force=True)
        self.router.entry(target)  # NotFoundError naming `federation list`
        source = self.router.metastore_of(namespace)
        if self.router.store(source).find_namespace(namespace) is None:
            raise NotFoundError(f"namespace {namespace} does not exist (in its metastore {source})")
        if source == target:
            raise UserInputError(
                f"namespace {namespace} lives in metastore {target} already: nothing to move"
            )
        may_write(self.router.entry(source), namespace).check()  # its rows there are fenced, then removed
        may_create(self.router.entry(target), namespace).check()
        if self.router.store(target).holds_namespace(namespace):
            raise AlreadyExistsError(
                f"namespace {namespace} is present in metastore {target} already (a namespace lives in one "
                f"metastore only); drop it there first, or choose another target"
            )
        return source

    # -- the move ----------------------------------------------------------------------------
    def move(self, namespace: str, target: str) -> MoveReport:
        """Move ``namespace`` to ``target``, or resume its interrupted move there.

        Raises:
            UserInputError, NotFoundError, AlreadyExistsError, FederationAccessError: refused (see
                :meth:`check`), or another move of it, to another target, is in progress.
            NamespaceMovingError: commits in flight did not drain in time; the move was rolled back.
        """
        found = self.primary.find_move(namespace)
        if found is not None and found.target != target:
            raise UserInputError(
                f"namespace {namespace} is being moved to {found.target} (step {found.step.value}); "
                f"finish that move (streampart namespace move {namespace} --to {found.target}) or roll "
                f"it back (streampart namespace move --abort {namespace}) first"
            )
        if found is None:
            source = self.check(namespace, target)
            move = self.primary.begin_move(namespace, source, target, self.owner)
            report = MoveReport(namespace, source, target)
        else:
            move = self._claim(found)
            report = MoveReport(namespace, move.source, target, resumed_at=move.step.value)
            log.info("resuming the move of %s to %s at step %s", namespace, target, move.step.value)
        with self._alive(move):
            return self._carry(move, report)

    def _carry(self, move: Move, report: MoveReport) -> MoveReport:
        namespace, target = move.namespace, move.target
        if move.step is not MoveStep.FLIPPED:
            move = self._fence_and_copy(move, report)
            crashpoint("move-before-flip")
            move = self.primary.flip_move(move)
            self.router.refresh(force=True)
            self.progress.step(f"route flipped: {namespace} → {target}")
            crashpoint("move-after-flip")
        self._clean_up(move)
        return report

    def _fence_and_copy(self, move: Move, report: MoveReport) -> Move:
        source, target = self.router.store(move.source), self.router.store(move.target)
        if move.step is MoveStep.FENCING:
            source.fence_namespace_for_move(move.namespace, move.target)
            self.progress.step(f"fenced {move.namespace} in {move.source}")
            crashpoint("move-after-fence")
            try:
                self._drain(source, move)
            except NamespaceMovingError:
                self._roll_back(move)
                raise
            move = self.primary.advance_move(move, MoveStep.COPYING)
        if move.step is MoveStep.COPYING:
            # a rerun: the fence holds still (fenced again in case a rollback raced), then copy afresh
            source.fence_namespace_for_move(move.namespace, move.target)
            self._drain(source, move)
            self._clear(target, move.namespace)
            self._copy(source, target, move, report)
            move = self.primary.advance_move(move, MoveStep.COPIED)
        return move

    def _drain(self, source: Metastore, move: Move) -> None:
        """Wait until no chunk of the namespace is COMMITTING in the source (see step 3)."""
        deadline = time.monotonic() + self.drain_timeout_s
        while True:
            in_flight = source.committing_chunks(move.namespace)
            if not in_flight:
                self.progress.step(f"no commit in flight in {move.namespace}")
                return
            if time.monotonic() > deadline:
                oldest = in_flight[0]
                raise NamespaceMovingError(
                    f"the move of {move.namespace} to {move.target} was rolled back: chunk {oldest.id} "
                    f"has been committing since {oldest.committing_since} and did not finish within "
                    f"{self.drain_timeout_s:g} s ({len(in_flight)} in flight); run `streampart housekeep` "
                    "to finish commits whose writer died, then move again",
                    retry_after=self.drain_timeout_s,
                )
            self._heartbeat(move)
            if self.resolve is not None:
                for chunk in in_flight:
                    try:
                        self.resolve(move.source, chunk)
                    except RetriableError as exc:  # its writer is alive (busy), or a lost race
                        log.debug("chunk %s: %s", chunk.id, exc)
            time.sleep(DRAIN_POLL_S)

    def _copy(self, source: Metastore, target: Metastore, move: Move, report: MoveReport) -> None:
        target.copy_namespace_row(source.export_namespace_row(move.namespace))
        ids = source.namespace_table_ids(move.namespace)
        for k, table_id in enumerate(ids):
            rows = source.export_table(table_id)
            self.progress.table(rows.name, rows.count)
            target.import_table(rows, self.progress.advance, now=clock.now())
            report.tables[rows.name] = rows.count
            if k < len(ids) - 1:
                crashpoint("move-mid-copy")
            self._heartbeat(move)
        links = source.export_links(move.namespace)
        target.import_links(links)
        report.links = len(links)
        self.progress.step(f"copied {len(ids)} table(s) and {len(links)} link(s) to {move.target}")

    @staticmethod
    def _clear(store: Metastore, namespace: str) -> None:
        """Remove every row of ``namespace`` from ``store`` (a partial copy, or the source's leftovers)."""
        for table_id in store.namespace_table_ids(namespace):
            store.remove_table_rows(table_id)
        store.remove_namespace_rows(namespace)

    def _clean_up(self, move: Move) -> None:
        self.router.refresh(force=True)  # a resumed move: this process has not seen the flip yet
        self.router.store(move.target).unfence_namespace(move.namespace)  # its home now: writes go on
        if self.grace_s > 0:
            time.sleep(self.grace_s)  # every process re-reads the routes within this (see step 6)
        source = self.router.store(move.source)
        ids = source.namespace_table_ids(move.namespace)
        for k, table_id in enumerate(ids):
            self._heartbeat(move)  # before each removal: a mover taken over stops here
            source.remove_table_rows(table_id)
            if k < len(ids) - 1:
                crashpoint("move-mid-cleanup")
        source.remove_namespace_rows(move.namespace)
        self.primary.end_move(move)
        self.progress.step(f"removed {move.namespace}'s rows from {move.source}")

    # -- one mover at a time -----------------------------------------------------------------
    def _claim(self, move: Move) -> Move:
        """Run ``move`` (resume it): refused while another mover runs it and is alive.

        Raises:
            MoveBusyError: another mover was seen within STALE_S and is not known dead.
        """
        stale_before = clock.now() - timedelta(seconds=STALE_S)
        try:
            return self.primary.claim_move(move, self.owner, stale_before=stale_before)
        except ConflictError:
            current = self.primary.find_move(move.namespace)
            if current is None:
                raise NotFoundError(f"no move of namespace {move.namespace} is in progress") from None
            if current.owner is not None and _died_here(current.owner):
                try:
                    return self.primary.claim_move(
                        current, self.owner, stale_before=stale_before, dead=current.owner
                    )
                except ConflictError:
                    pass  # another mover took it over first
            raise MoveBusyError(
                f"the move of namespace {move.namespace} is run by another mover ({current.owner}, last "
                f"seen {current.heartbeat_at}); wait for it, or, if it died on another host, retry after "
                f"{STALE_S:g} s without a sign of it"
            ) from None

    @contextlib.contextmanager
    def _alive(self, move: Move) -> Iterator[None]:
        """While inside, a thread shows this mover alive every HEARTBEAT_S (a step that runs long,
        such as one table's copy in one transaction, does not make it look dead). It stops once
        another mover took the move over, or the move ended; the steps themselves are guarded
        by the record's owner, so a mover taken over changes nothing more."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                try:
                    self.primary.touch_move(move, self.owner)
                except (ConflictError, NotFoundError):
                    return  # taken over, or the move ended: the next step says so
                except StreampartError as exc:  # the primary is unavailable: the next beat tries again
                    log.warning("move of %s: heartbeat not recorded: %s", move.namespace, exc)

        thread = threading.Thread(target=beat, name=f"mover-{move.namespace}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _heartbeat(self, move: Move, *, force: bool = False) -> None:
        """Show this mover is alive (at most every HEARTBEAT_S); ConflictError if it was taken over."""
        now = time.monotonic()
        if force or now - self._beat >= HEARTBEAT_S:
            self.primary.touch_move(move, self.owner)
            self._beat = now

    # -- rolling back ------------------------------------------------------------------------
    def abort(self, namespace: str) -> MoveReport:
        """Roll back a move of ``namespace`` that has not flipped: M2's copy goes, M1 is unfenced.

        Raises:
            NotFoundError: no move of it is in progress; UserInputError: it flipped already (then
                only finishing it is possible: ``namespace move NS --to M2`` again).
        """
        move = self.primary.find_move(namespace)
        if move is None:
            raise NotFoundError(f"no move of namespace {namespace} is in progress")
        if move.step is MoveStep.FLIPPED:
            raise UserInputError(
                f"the move of {namespace} to {move.target} has flipped its route already: it can only be "
                f"finished (streampart namespace move {namespace} --to {move.target}), not rolled back"
            )
        move = self._claim(move)
        with self._alive(move):
            self._roll_back(move)
        return MoveReport(namespace, move.source, move.target, resumed_at=move.step.value, aborted=True)

    def _roll_back(self, move: Move) -> None:
        self._clear(self.router.store(move.target), move.namespace)
        self.router.store(move.source).unfence_namespace(move.namespace)
        self.primary.end_move(move)
        self.progress.step(f"rolled back the move of {move.namespace} to {move.target}")

    def moves(self) -> list[Move]:
        """The moves in progress (recorded in the primary)."""
        return self.primary.list_moves()


def _died_here(owner: str) -> bool:
    """Whether the mover ``owner`` (host:pid:nonce) ran on this host and its process is gone."""
    rest = owner.rsplit(":", 2)
    if len(rest) != 3 or rest[0] != socket.gethostname() or not rest[1].isdigit():
        return False
    if int(rest[1]) == os.getpid():
        return False  # this process: another mover object in it may be running it
    return not alive(int(rest[1]))
