"""The checker: pure functions over a history and an independent final read of the table.

What it proves (architecture.md, invariants 1–5; no delete or expiry is in these histories yet,
so no row may leave the table once seen):

- ``lost``: an acknowledged write's row is missing from the final read;
- ``duplicated``: a row is in the final read more than once (whatever its write's outcome);
- ``failed_present``: a row of a write that failed for sure (a 4xx) is in the final read;
- ``phantom``: a row nobody wrote is read;
- ``two_partitions``: a row is in two partitions of the final read;
- ``partial_chunk``: a read (or the final read) holds some but not all rows of one chunk;
- ``not_monotonic``: a reader's latest-version reads go back in version, or lose rows;
- ``not_repeatable``: two reads of one version saw different rows;
- ``stale_read``: a read invoked after a write was acknowledged does not hold its rows (a
  committed chunk is visible to queries at once).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.history.history import Op

# The reasons a producer gives, at invocation, for a write it sends to be refused.
EXPECTED_REFUSALS = ("malformed record", "acknowledged key")


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
    anomalies: list[Anomaly] = field(default_factory=list)
    # writes refused for sure (4xx) that their producer did not send to be refused (no reason given
    # at invocation): not an anomaly of the invariants, but a refusal nobody asked for
    unexplained_refusals: list[str] = field(default_factory=list)

    def kinds(self) -> set[str]:
        return {a.kind for a in self.anomalies}

    def summary(self) -> str:
        by_kind = ", ".join(f"{k}: {dict(c)}" for k, c in sorted(self.outcomes.items()))
        lines = [f"operations: {self.operations} ({by_kind})", f"faults injected: {self.faults}",
                 f"anomalies: {len(self.anomalies)}"]  # fmt: skip
        lines += [f"  {a.kind}: {a.message}" for a in self.anomalies[:20]]
        return "\n".join(lines)


def _short(ids: Iterable[int]) -> str:
    s = sorted(ids)
    return f"{s[:8]}{'…' if len(s) > 8 else ''} ({len(s)} rows)"


def check_final(writes: list[Op], final: FinalRead) -> list[Anomaly]:
    """Invariants 1, 2 and 4 on the final read: exactly once, nothing failed, one partition each."""
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
    for w in writes:
        ids = set(w.ids)
        present = ids & counts.keys()
        if w.outcome == "ok" and present != ids:
            out.append(
                Anomaly("lost", f"{w.client} {w.key}: acknowledged rows missing: {_short(ids - present)}")
            )
        elif w.outcome == "fail" and present:
            out.append(
                Anomaly("failed_present", f"{w.client} {w.key} ({w.detail}): rows present: {_short(present)}")
            )
    out += _partial(writes, set(counts), f"final read at version {final.version}")
    return out


def _partial(writes: list[Op], seen: set[int], where: str) -> list[Anomaly]:
    out = []
    for w in writes:
        ids = set(w.ids)
        if ids & seen and not ids <= seen:
            out.append(Anomaly("partial_chunk", f"{where}: {len(ids & seen)} of the {len(ids)} rows of "
                                                f"{w.client} {w.key}"))  # fmt: skip
    return out


def check_reads(writes: list[Op], reads: list[Op]) -> list[Anomaly]:
    """Invariant 3 on every read: repeatable by version, monotonic per reader, whole chunks,
    no phantom rows, and every write acknowledged before the read began visible in it."""
    out: list[Anomaly] = []
    written = {i for w in writes for i in w.ids}
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
            elif not p_seen <= seen:
                gone = f"rows seen at version {p_op.version} gone at {r.version}: {_short(p_seen - seen)}"
                out.append(Anomaly("not_monotonic", f"{r.client}: {gone}"))
        if r.kind == "read":
            last[r.client] = (r, seen)
        if phantom := seen - written:
            out.append(
                Anomaly("phantom", f"{r.client} at version {r.version}: rows nobody wrote: {_short(phantom)}")
            )
        out += _partial(chunks, set(seen), f"{r.client} at version {r.version}")
        if r.kind == "read":
            for w in writes:
                acked_before = w.outcome == "ok" and w.completed is not None and w.completed < r.invoked
                if acked_before and (missing := set(w.ids) - seen):
                    after = f"invoked after {w.client} {w.key} was acknowledged"
                    out.append(
                        Anomaly(
                            "stale_read",
                            f"{r.client} at version {r.version} ({after}) misses {_short(missing)}",
                        )
                    )
    return out


def check(history: list[Op], final: FinalRead) -> Report:
    """Every check over ``history`` and ``final``; the report's ``anomalies`` must be empty."""
    writes = [op for op in history if op.kind == "write"]
    reads = [op for op in history if op.kind in ("read", "read_at")]
    outcomes: dict[str, Counter[str]] = defaultdict(Counter)
    for op in history:
        outcomes[op.kind][op.outcome] += 1
    report = Report(
        operations=sum(1 for op in history if op.kind != "fault"),
        faults=sum(1 for op in history if op.kind == "fault"),
        outcomes=dict(outcomes),
    )
    report.anomalies = check_final(writes, final) + check_reads(writes, reads)
    report.unexplained_refusals = [
        f"{w.client} {w.key}: {w.detail}"
        for w in writes
        if w.outcome == "fail" and not w.detail.startswith(EXPECTED_REFUSALS)
    ]
    return report
