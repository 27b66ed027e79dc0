"""The checker: pure functions over a history and an independent final read of the table.

What it proves (architecture.md, invariants 1–5, and issue 30's deletes). A row may leave the table
only by a delete of the history whose predicate it matches (:class:`Deletes`): a delete that
finished removes the matching rows acknowledged before it was invoked (later ones it may or may not);
one that failed or died may still be resumed by the next delete, so its matches may go any time.

- ``lost``: an acknowledged write's row is missing from the final read, and no delete may have
  removed it;
- ``duplicated``: a row is in the final read more than once (whatever its write's outcome);
- ``failed_present``: a row of a write that failed for sure (a 4xx) is in the final read;
- ``failed_read``: a read saw a row of a write that failed for sure (no aborted row is ever read);
- ``deleted_present``: a row acknowledged before a delete matching it was invoked is in the final
  read or in a read of a version at or after that delete's commit, once the delete finished;
- ``phantom``: a row nobody wrote is read;
- ``two_partitions``: a row is in two partitions of the final read;
- ``partial_chunk``: a read (or the final read) holds some but not all rows of one chunk;
- ``not_monotonic``: a reader's latest-version reads go back in version, or lose rows;
- ``not_repeatable``: two reads of one version saw different rows;
- ``stale_read``: a read invoked after a write was acknowledged does not hold its rows (a
  committed chunk is visible to queries at once);
- error classes (:func:`classify`): every failed or unknown operation's message is one the product
  means to give: ``internal_error`` (an HTTP 500, "internal"), ``claims_damage`` (a message saying
  something is damaged, corrupt or to be restored: the nemesis never damages anything, it only makes
  processes, the metastore and the store unavailable), ``traceback`` (a Python traceback where one
  clear line is due) and ``unclassified_error`` (a message none of the known classes matches);
- ``untruthful_failure``: a write said nothing of it was committed, and it was (a retry under its
  key was answered with the version of a commit a reader had seen before the retry was sent);
- ``check_error``: ``streampart check`` after the run found an error problem.

Reads through the SQL server (``sql_read``, ``sql_read_at``, ``sql_count``). A statement reads each
table at one pinned Delta version, pinned again once it is ``freshness`` old; the server does not
say which version a statement of the newest snapshot read. So what is checkable, and checked:

- ``sql_read_at`` (``VERSION AS OF v``) is a read of version ``v`` like delta-rs' ``read_at``: the
  same rows as any other read of ``v`` by either engine (``not_repeatable``), whole chunks, no
  phantom, no failed write's row, no row a finished delete removed before ``v``;
- ``sql_read`` (the newest snapshot, version unknown): no row twice, no phantom, no failed write's
  row, whole chunks (a union of whole chunks, rows a delete may have removed left aside); per
  reader, no row it saw is gone from a later read unless a delete may have removed it (its reads
  go forward: a restarted server pins the newest version anew); ``stale_sql_read``: a write
  acknowledged more than ``freshness`` (+ :data:`SQL_MARGIN`) before the read was invoked is in it
  — the server's promise, "a commit is visible to a statement that starts at most freshness after
  it"; and ``deleted_present``: a row a finished delete must have removed is absent from a read
  invoked more than ``freshness`` after that delete finished;
- ``sql_count``: ``count(*)`` equals ``count(DISTINCT id)`` (``duplicated``); at a version any read
  saw, it equals the rows that read saw (``not_repeatable``).

What is not checkable there: that a newest-snapshot read goes forward in version (no version is
given; its rows going forward is checked instead), or which version it was.

SQL errors: a refused connection while the server is down (``SqlServerUnavailableError``: "nothing
listens") is ``unavailable``; every other message is classified like any other operation's.

Known product defects (:data:`KNOWN_DEFECTS`): errors the runs found, each only under the fault
that provokes it, are counted by name in :attr:`Report.known_defects` instead of as anomalies, so a
run goes on showing what else it finds; the same message without that fault is an anomaly:

None is open. Fixed, and anomalies again: Thrift's raw ``TTransportException`` from a statement
whose server was killed under it; a stalled roller's storage error on the temporary file of the roller
that took its roll over; a valid login refused while the SQL server started; delta-rs' multi-line
log-gap error from a listing that raced a commit, escaping ``streampart delete``.

Roll daemons (``roll`` operations of the client ``daemon``, observed in the metastore after the run,
key: the partition's value): ``rolled_twice``: two attempts finished the same partition's roll
(each partition rolls exactly once); a failed attempt's error is classified like any other. Rows in
one partition, exactly once and nothing lost across rolls are the final read's checks above.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.history.history import Op

# The reasons a producer gives, at invocation, for a write it sends to be refused.
EXPECTED_REFUSALS = ("malformed record", "acknowledged key")
# What a CLI write's error says when, for sure, nothing of it landed.
NOT_COMMITTED = ("nothing was committed", "nothing of this content was written")
# What a failed write's error says when sending it again under its key is the way on.
RETRY_SAME_KEY = "retry with the same idempotency key"

# An error message's class, by the first pattern (case-insensitive) it matches: the ones first in
# this list are anomalies whatever else the message says.
ANOMALOUS = {"internal_error", "claims_damage", "traceback"}
ERROR_CLASSES: tuple[tuple[str, str], ...] = (
    ("traceback", r"Traceback \(most recent call last\)"),
    ("internal_error", r"HTTP 500|\binternal\b"),
    ("claims_damage", r"damaged|corrupt|\brestore"),
    ("killed", r"killed by signal"),
    ("refused", r"malformed|expected an integer|idempotency key .* used for different|HTTP 4\d\d"),
    ("not_committed", r"nothing was committed|nothing of this content was written"),
    ("unknown_outcome", r"may have landed|outcome is unknown|not in the Delta log"),
    ("unavailable", r"unavailable|HTTP 503|HTTP 50[24]|connection (refused|failed|reset)|timed? ?out|"
                    r"ConnectError|ReadError|RemoteProtocolError|no success in|(did|does) not answer|"
                    r"server closed the connection|closed the connection during the statement|"
                    r"terminating connection|Slow ?Down"),
    ("conflict", r"conflict|busy|taken over|another (delete|roll|process)|lease|is rolling|raced a commit"),
    # a daemon's roll attempt stopped at a step boundary (leadership lost, shut down): resumed later
    ("abandoned", r"abandoned at step [\w-]+; it resumes from there"),
)  # fmt: skip


# What a message says to rule damage out ("…; nothing was found damaged: retry once the store answers").
NOT_DAMAGED = re.compile(r"nothing (was|is) (found |known to be )?damaged", re.IGNORECASE)


def classify(detail: str) -> str:
    """The class of an error message (see :data:`ERROR_CLASSES`), or ``unclassified``."""
    detail = NOT_DAMAGED.sub("", detail)
    for name, pattern in ERROR_CLASSES:
        if re.search(pattern, detail, re.IGNORECASE):
            return name
    return "unclassified"


# Why 0.25 s: the client's clock reading and the server's pin are on one host, but the statement
# reaches the server (and its pin's "now") a little after the client invoked it; this margin only
# widens what is forgiven as at most ``freshness`` old.
SQL_MARGIN = 0.25
SQL_KINDS = ("sql_read", "sql_read_at", "sql_count")
# name -> (the kinds of operation, the message, the faults (or ``log`` operations, by key) one of
# which must overlap the operation — any time in the run when the operation's own time is not
# comparable: a daemon's roll attempt; none: any time)
KNOWN_DEFECTS: dict[str, tuple[tuple[str, ...], str, tuple[str, ...]]] = {
    # none open: each one the runs found is fixed, and its message is an anomaly again
}  # fmt: skip


_DELETE = re.compile(r"msg = 'g(\d)' AND id BETWEEN (\d+) AND (\d+)")


@dataclass(frozen=True)
class Delete:
    """A delete of the history, as the checker reads its predicate (the deleter's one shape)."""

    op: Op
    group: int
    lo: int
    hi: int

    @classmethod
    def of(cls, op: Op) -> Delete:
        m = _DELETE.fullmatch(op.where)
        assert m, f"not a predicate of the deleter's shape: {op.where!r}"
        return cls(op, int(m[1]), int(m[2]), int(m[3]))

    def matches(self, i: int) -> bool:
        return i % 10 == self.group and self.lo <= i <= self.hi


class Deletes:
    """What the deletes of a history allow and demand, row by row."""

    def __init__(self, history: list[Op]) -> None:
        self.all = [Delete.of(op) for op in history if op.kind == "delete"]
        self.done = [d for d in self.all if d.op.outcome == "ok"]
        self._removable: dict[str, frozenset[int]] = {}

    def removable(self, write: Op) -> frozenset[int]:
        """The rows of ``write`` some delete may have removed: one that finished after ``write`` was
        invoked, or one that did not finish (the next delete may resume it at a later snapshot)."""
        if (found := self._removable.get(write.id)) is None:
            found = frozenset(
                i
                for d in self.all
                if d.op.outcome != "ok" or d.op.completed is None or write.invoked < d.op.completed
                for i in write.ids
                if d.matches(i)
            )
            self._removable[write.id] = found
        return found

    def must_remove(self, i: int, write: Op) -> Delete | None:
        """A finished delete that must have removed row ``i`` of acknowledged ``write``: one matching
        it, invoked after ``write`` was acknowledged."""
        if write.outcome != "ok" or write.completed is None:
            return None
        for d in self.done:
            if d.matches(i) and write.completed < d.op.invoked:
                return d
        return None


@dataclass(frozen=True)
class FinalRead:
    """The table as an independent reader (delta-rs) saw it after the run: (id, partition) rows."""

    version: int
    rows: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class Anomaly:
    kind: str
    message: str


@dataclass
class Report:
    operations: int
    faults: int
    outcomes: dict[str, Counter[str]] = field(default_factory=dict)  # kind -> outcome -> count
    faults_by_kind: Counter[str] = field(default_factory=Counter)  # "kill ok", "pg-pause ok", …
    errors_by_class: Counter[str] = field(default_factory=Counter)  # "write unavailable", …
    anomalies: list[Anomaly] = field(default_factory=list)
    # writes refused for sure (4xx) that their producer did not send to be refused (no reason given
    # at invocation): not an anomaly of the invariants, but a refusal nobody asked for
    unexplained_refusals: list[str] = field(default_factory=list)
    # errors of known product defects, under the faults that provoke them (see KNOWN_DEFECTS)
    known_defects: list[str] = field(default_factory=list)

    def kinds(self) -> set[str]:
        return {a.kind for a in self.anomalies}

    def summary(self) -> str:
        by_kind = ", ".join(f"{k}: {dict(c)}" for k, c in sorted(self.outcomes.items()))
        lines = [f"operations: {self.operations} ({by_kind})", f"faults injected: {self.faults}",
                 f"  by kind: {dict(sorted(self.faults_by_kind.items()))}",
                 f"errors by class: {dict(sorted(self.errors_by_class.items()))}",
                 f"known product defects: {dict(Counter(d.split(':', 1)[0] for d in self.known_defects))}",
                 f"anomalies: {len(self.anomalies)}"]  # fmt: skip
        lines += [f"  {a.kind}: {a.message}" for a in self.anomalies[:20]]
        return "\n".join(lines)


def _short(ids: Iterable[int]) -> str:
    s = sorted(ids)
    return f"{s[:8]}{'…' if len(s) > 8 else ''} ({len(s)} rows)"


def check_final(writes: list[Op], final: FinalRead, deletes: Deletes | None = None) -> list[Anomaly]:
    """Invariants 1, 2 and 4 on the final read: exactly once, nothing failed, one partition each;
    and what the deletes removed gone, nothing else."""
    deletes = deletes or Deletes([])
    out: list[Anomaly] = []
    counts = Counter(i for i, _ in final.rows)
    partitions: dict[int, set[str]] = defaultdict(set)
    for i, p in final.rows:
        partitions[i].add(p)
    written = {i for w in writes for i in w.ids}
    if doubled := {i for i, n in counts.items() if n > 1}:
        out.append(
            Anomaly("duplicated", f"rows read more than once at version {final.version}: {_short(doubled)}")
        )
    if phantom := set(counts) - written:
        out.append(Anomaly("phantom", f"rows nobody wrote, at version {final.version}: {_short(phantom)}"))
    if spread := {i for i, ps in partitions.items() if len(ps) > 1}:
        out.append(Anomaly("two_partitions", f"rows in two partitions: {_short(spread)}"))
    again = _sent_again(writes)
    for w in writes:
        ids = set(w.ids)
        present = ids & counts.keys()
        missing = ids - present - deletes.removable(w)
        if w.outcome == "ok" and missing:
            out.append(Anomaly("lost", f"{w.client} {w.key}: acknowledged rows missing: {_short(missing)}"))
        if kept := {i: d for i in present if (d := deletes.must_remove(i, w))}:
            where = next(iter(kept.values())).op.where
            out.append(Anomaly("deleted_present", f"{w.client} {w.key}: in the final read, rows acknowledged "
                               f"before delete [{where}] was invoked: {_short(kept)}"))  # fmt: skip
        if w.outcome == "fail" and (present := present - again.get(w.key, set())):
            out.append(
                Anomaly("failed_present", f"{w.client} {w.key} ({w.detail}): rows present: {_short(present)}")
            )
    out += _partial(writes, set(counts), f"final read at version {final.version}", deletes)
    return out


def _sent_again(writes: list[Op]) -> dict[str | None, set[int]]:
    """Per key, the rows of its writes that did not fail for sure (a retry of a write that failed,
    retriably, may land them: whether the failure told the truth, :func:`check_truthful_failures` asks)."""
    out: dict[str | None, set[int]] = defaultdict(set)
    for w in writes:
        if w.outcome != "fail":
            out[w.key].update(w.ids)
    return out


def check_truthful_failures(writes: list[Op], reads: list[Op]) -> list[Anomaly]:
    """``untruthful_failure``: a write acknowledged with the version of an earlier commit (a replay
    under its key), that a read had seen before it was invoked, though every earlier attempt under
    that key failed for sure ("nothing was committed"): one of them did commit."""
    out = []
    seen_by: list[tuple[float, int]] = sorted(
        (r.completed, r.version) for r in reads if r.outcome == "ok" and r.completed is not None
        and r.version is not None
    )  # fmt: skip
    for w in writes:
        if w.outcome != "ok" or w.version is None:
            continue
        earlier = [e for e in writes if e.key == w.key and e.ids == w.ids and e.invoked < w.invoked]
        if not earlier or any(e.outcome != "fail" for e in earlier):
            continue
        if any(done < w.invoked and version >= w.version for done, version in seen_by):
            said = earlier[-1].detail[:200]
            what = f"committed at version {w.version}, read before its retry was sent"
            out.append(Anomaly("untruthful_failure", f"{w.client} {w.key}: {what}, though it said: {said}"))
    return out


def _partial(writes: list[Op], seen: set[int], where: str, deletes: Deletes) -> list[Anomaly]:
    """Chunks partly in ``seen``, their rows that a delete may have removed left aside."""
    out = []
    for w in writes:
        ids = set(w.ids) - deletes.removable(w)
        if ids & seen and not ids <= seen:
            out.append(Anomaly("partial_chunk", f"{where}: {len(ids & seen)} of the {len(ids)} rows of "
                                                f"{w.client} {w.key}"))  # fmt: skip
    return out


def check_reads(writes: list[Op], reads: list[Op], deletes: Deletes | None = None) -> list[Anomaly]:
    """Invariant 3 on every read: repeatable by version, monotonic per reader, whole chunks,
    no phantom rows, no row of a failed write, and every write acknowledged before the read began
    visible in it (rows a delete may have removed left aside; rows a finished delete must have
    removed absent from every version at or after its commit)."""
    deletes = deletes or Deletes([])
    out: list[Anomaly] = []
    written = {i for w in writes for i in w.ids}
    again = _sent_again(writes)
    failed = {i: w for w in writes if w.outcome == "fail" for i in w.ids if i not in again.get(w.key, ())}
    gone_from: dict[int, Delete] = {}  # row -> a finished delete that must have removed it
    removable = frozenset().union(*(deletes.removable(w) for w in writes))
    for w in writes:
        for i in w.ids:
            if (d := deletes.must_remove(i, w)) and d.op.version is not None:
                gone_from[i] = d
    by_version: dict[int, tuple[Op, frozenset[int]]] = {}
    last: dict[str, tuple[Op, frozenset[int]]] = {}
    # a chunk's rows may be split among several write ops only when they share its key (retries)
    chunks = list({(w.key, w.ids): w for w in writes if w.ids}.values())
    for r in sorted(reads, key=lambda op: op.invoked):
        if r.outcome != "ok" or r.version is None:
            continue
        seen = frozenset(r.ids)
        if len(seen) != len(r.ids):
            out.append(Anomaly("duplicated", f"{r.client} read a row twice at version {r.version}"))
        if first := by_version.get(r.version):
            if first[1] != seen:
                out.append(Anomaly("not_repeatable", f"version {r.version}: {first[0].client} read "
                                   f"{len(first[1])} rows, {r.client} {len(seen)}"))  # fmt: skip
        else:
            by_version[r.version] = (r, seen)
        if r.kind == "read" and (prev := last.get(r.client)):
            p_op, p_seen = prev
            assert p_op.version is not None
            if r.version < p_op.version:
                out.append(
                    Anomaly("not_monotonic", f"{r.client} read version {p_op.version}, then {r.version}")
                )
            elif vanished := p_seen - seen - removable:
                gone = f"rows seen at version {p_op.version} gone at {r.version}: {_short(vanished)}"
                out.append(Anomaly("not_monotonic", f"{r.client}: {gone}"))
        if r.kind == "read":
            last[r.client] = (r, seen)
        if phantom := seen - written:
            out.append(
                Anomaly("phantom", f"{r.client} at version {r.version}: rows nobody wrote: {_short(phantom)}")
            )
        if aborted := seen & failed.keys():
            w = failed[next(iter(aborted))]
            why = f"rows of a write that failed for sure ({w.client} {w.key}: {w.detail[:200]})"
            out.append(Anomaly("failed_read", f"{r.client} at version {r.version}: {why}: {_short(aborted)}"))
        kept = {
            i
            for i in seen
            if (d := gone_from.get(i)) and d.op.version is not None and r.version >= d.op.version
        }
        if kept:
            out.append(Anomaly("deleted_present", f"{r.client} at version {r.version}: rows a finished "
                               f"delete removed at an earlier version: {_short(kept)}"))  # fmt: skip
        out += _partial(chunks, set(seen), f"{r.client} at version {r.version}", deletes)
        if r.kind == "read":
            for w in writes:
                acked_before = w.outcome == "ok" and w.completed is not None and w.completed < r.invoked
                if acked_before and (missing := set(w.ids) - seen - deletes.removable(w)):
                    after = f"invoked after {w.client} {w.key} was acknowledged"
                    out.append(
                        Anomaly(
                            "stale_read",
                            f"{r.client} at version {r.version} ({after}) misses {_short(missing)}",
                        )
                    )
    return out


def known_defect(op: Op, history: list[Op]) -> str | None:
    """The name of the known product defect (:data:`KNOWN_DEFECTS`) ``op``'s error is, if any."""
    for name, (kinds, pattern, faults) in KNOWN_DEFECTS.items():
        if op.kind not in kinds or not re.search(pattern, op.detail):
            continue
        if not faults:
            return name
        overlap = op.kind in SQL_KINDS  # a daemon's roll, a log line: any time in the run
        end = op.completed if op.completed is not None else float("inf")
        for f in history:
            if f.kind not in ("fault", "log") or f.key not in faults:
                continue
            f_end = f.completed if f.completed is not None else float("inf")
            if not overlap or (f.invoked <= end and op.invoked <= f_end):
                return name
    return None


def check_errors(history: list[Op]) -> list[Anomaly]:
    """Every failed or unknown operation's message is of a class the product means to give."""
    out = []
    for op in history:
        if op.kind in ("fault", "read", "read_at", "check") or op.outcome == "ok":
            continue
        if op.outcome == "unknown" and not op.detail:
            continue  # its client died with it: nothing was said
        if known_defect(op, history):
            continue  # counted in Report.known_defects
        cls = classify(op.detail)
        if cls in ANOMALOUS or cls == "unclassified":
            kind = "unclassified_error" if cls == "unclassified" else cls
            out.append(Anomaly(kind, f"{op.client} {op.kind} {op.outcome}: {op.detail[:400]}"))
    return out


def check_sql_reads(writes: list[Op], history: list[Op], deletes: Deletes, freshness: float) -> list[Anomaly]:
    """The SQL server's newest-snapshot reads and counts (see the module's docstring); its reads of
    a version (``sql_read_at``) are checked with the other reads, by :func:`check_reads`."""
    out: list[Anomaly] = []
    written = {i for w in writes for i in w.ids}
    again = _sent_again(writes)
    failed = {i: w for w in writes if w.outcome == "fail" for i in w.ids if i not in again.get(w.key, ())}
    removable = frozenset().union(*(deletes.removable(w) for w in writes))
    chunks = list({(w.key, w.ids): w for w in writes if w.ids}.values())
    gone_after: dict[int, float] = {}  # row -> when a finished delete that must remove it finished
    for w in writes:
        for i in w.ids:
            if (d := deletes.must_remove(i, w)) and d.op.completed is not None:
                gone_after[i] = min(gone_after.get(i, d.op.completed), d.op.completed)
    by_version = {
        r.version: frozenset(r.ids)
        for r in history
        if r.kind in ("read", "read_at", "sql_read_at") and r.outcome == "ok" and r.version is not None
    }
    last: dict[str, tuple[Op, frozenset[int]]] = {}
    lag = freshness + SQL_MARGIN
    for r in sorted(history, key=lambda op: op.invoked):
        if r.outcome != "ok" or r.kind not in ("sql_read", "sql_count"):
            continue
        if r.kind == "sql_count":
            distinct = int(r.detail.rsplit("distinct ", 1)[1]) if "distinct " in r.detail else r.count
            at = f"at version {r.version}" if r.version is not None else "at the newest snapshot"
            if r.count != distinct:
                out.append(
                    Anomaly("duplicated", f"{r.client} {at}: count(*) {r.count}, {distinct} distinct ids")
                )
            if (
                r.version is not None
                and (ids := by_version.get(r.version)) is not None
                and len(ids) != r.count
            ):
                out.append(Anomaly("not_repeatable", f"version {r.version}: {r.client} counted {r.count} "
                                   f"rows through the SQL server, a read saw {len(ids)}"))  # fmt: skip
            continue
        seen = frozenset(r.ids)
        where = f"{r.client} (SQL, newest snapshot, invoked at {r.invoked:.2f})"
        if len(seen) != len(r.ids):
            out.append(Anomaly("duplicated", f"{where}: a row read twice"))
        if phantom := seen - written:
            out.append(Anomaly("phantom", f"{where}: rows nobody wrote: {_short(phantom)}"))
        if aborted := seen & failed.keys():
            w = failed[next(iter(aborted))]
            why = f"rows of a write that failed for sure ({w.client} {w.key}: {w.detail[:200]})"
            out.append(Anomaly("failed_read", f"{where}: {why}: {_short(aborted)}"))
        if kept := {i for i in seen if (t := gone_after.get(i)) is not None and t + lag < r.invoked}:
            out.append(Anomaly("deleted_present", f"{where}: rows a delete finished more than {lag:.2f}s "
                               f"earlier removed: {_short(kept)}"))  # fmt: skip
        out += _partial(chunks, set(seen), where, deletes)
        if (prev := last.get(r.client)) and (vanished := prev[1] - seen - removable):
            out.append(Anomaly("not_monotonic", f"{where}: rows its read invoked at {prev[0].invoked:.2f} "
                               f"saw are gone: {_short(vanished)}"))  # fmt: skip
        last[r.client] = (r, seen)
        for w in writes:
            acked = w.outcome == "ok" and w.completed is not None and w.completed + lag < r.invoked
            if acked and (missing := set(w.ids) - seen - deletes.removable(w)):
                out.append(Anomaly("stale_sql_read", f"{where}: misses {_short(missing)} of {w.client} "
                                   f"{w.key}, acknowledged more than {lag:.2f}s before"))  # fmt: skip
    return out


def check_daemon_rolls(history: list[Op]) -> list[Anomaly]:
    """``rolled_twice``: two roll attempts of the daemons finished one partition's roll."""
    done = Counter(
        op.key for op in history if op.kind == "roll" and op.client == "daemon" and op.outcome == "ok"
    )
    return [Anomaly("rolled_twice", f"partition {k}: {n} rolls finished") for k, n in done.items() if n > 1]


def check(history: list[Op], final: FinalRead, freshness: float = 1.0) -> Report:
    """Every check over ``history`` and ``final``; the report's ``anomalies`` must be empty
    (``freshness``: the SQL server's, for its reads)."""
    writes = [op for op in history if op.kind == "write"]
    deletes = Deletes(history)
    reads = [op for op in history if op.kind in ("read", "read_at", "sql_read_at")]
    outcomes: dict[str, Counter[str]] = defaultdict(Counter)
    for op in history:
        outcomes[op.kind][op.outcome] += 1
    report = Report(
        operations=sum(1 for op in history if op.kind not in ("fault", "log")),
        faults=sum(1 for op in history if op.kind == "fault" and op.outcome == "ok"),
        outcomes=dict(outcomes),
        faults_by_kind=Counter(f"{op.key} {op.outcome}" for op in history if op.kind == "fault"),
        errors_by_class=Counter(
            f"{op.kind} {classify(op.detail)}"
            for op in history
            if op.outcome != "ok" and op.detail and op.kind not in ("fault", "check")
        ),
    )
    report.anomalies = check_final(writes, final, deletes) + check_reads(writes, reads, deletes)
    report.anomalies += check_errors(history)
    report.anomalies += check_sql_reads(writes, history, deletes, freshness)
    report.anomalies += check_daemon_rolls(history)
    report.known_defects = [f"{name}: {op.client} {op.kind}: {op.detail[:300]}" for op in history
                            if op.outcome != "ok" and (name := known_defect(op, history))]  # fmt: skip
    report.anomalies += check_truthful_failures(writes, reads)
    report.anomalies += [
        Anomaly("check_error", f"streampart check: {op.detail[:600]}")
        for op in history
        if op.kind == "check" and op.outcome != "ok"
    ]
    report.unexplained_refusals = [
        f"{w.client} {w.key}: {w.detail}"
        for w in writes
        if w.outcome == "fail"
        and not w.detail.startswith(EXPECTED_REFUSALS)
        and RETRY_SAME_KEY not in w.detail
    ]
    return report
