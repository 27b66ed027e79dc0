"""Which cluster runs a statement: the rules of HIVE's multi-cluster seed, as a pure function.

A table's primary cluster holds all its data and takes every write; a secondary holds whole
copies of some of its standard partitions. A statement runs on one cluster and reads that
cluster's copies, so (:func:`choose`):

1. ``--cluster C`` / ``USE CLUSTER C;`` — run on C, or fail saying why not: C must be the
   primary of the table written (if it exists), and hold every table read.
2. A statement writing an existing table runs on that table's primary, and fails if a table it
   reads is not fully present there. A new table (CREATE TABLE … AS) does not count: it is made
   on the cluster chosen.
3. Otherwise each table read offers its primary, in the order the statement names them; the
   first cluster where every table read is fully present wins. None: one error listing, per
   cluster tried, what is missing there.
4. A statement that reads no table runs on the ``default`` cluster (or its output's primary).

A table is **fully present** on a cluster when that is its primary, or when every partition the
statement reads of it is standard and copied there (a streaming partition holding data lives on
the primary only). With ``--replicated-only`` a secondary also serves a table as the cut of
its partitions replicated there (:class:`Input.cut_on`); which cut, exactly, is the caller's
business (:mod:`streampart.query_copies`).

Nothing here touches the metastore or storage: the facts come in as :class:`Input` and
:class:`Target`, so the rules are tested as a table of the seed's own examples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from metastore.clusters import DEFAULT_CLUSTER
from metastore.errors import UserInputError


class NoClusterError(UserInputError):
    """No cluster can run the statement (or not the one asked for): what is missing where."""


@dataclass(frozen=True)
class Input:
    """A table (or link) a statement reads, and where it can be read."""

    name: str
    primary: str
    full_on: frozenset[str]  # clusters holding every partition the statement reads (the primary too)
    cut_on: frozenset[str] = frozenset()  # secondaries that can serve a replicated cut (--replicated-only)
    # per secondary where it is not fully present: what is missing there (for the error)
    gaps: Mapping[str, str] = field(default_factory=dict)

    def readable_on(self, cluster: str, replicated_only: bool) -> bool:
        return cluster in self.full_on or (replicated_only and cluster in self.cut_on)

    def missing_on(self, cluster: str) -> str:
        """Why it cannot be read on ``cluster``, as a phrase."""
        if cluster in self.gaps:
            return f"{self.name} (primary {self.primary}): {self.gaps[cluster]}"
        return f"{self.name} (primary {self.primary}) has no copy there"


@dataclass(frozen=True)
class Target:
    """The table a statement writes: an existing one (its primary), or a new one (primary None)."""

    name: str
    primary: str | None


@dataclass(frozen=True)
class Choice:
    """The cluster that runs a statement, why, and which tables it reads as replicated cuts there."""

    cluster: str
    reason: str
    cuts: tuple[str, ...] = ()  # inputs read as their replicated cut (--replicated-only)


def choose(
    inputs: Sequence[Input],
    output: Target | None = None,
    forced: str | None = None,
    replicated_only: bool = False,
) -> Choice:
    """The cluster that runs a statement reading ``inputs`` and writing ``output`` (rules above).

    Args:
        inputs: The tables the statement reads, in the order it names them.
        output: The table it writes (None: it only reads).
        forced: The cluster asked for (``--cluster``, ``USE CLUSTER``); None: choose.
        replicated_only: A secondary may serve a table as its replicated cut.

    Raises:
        NoClusterError: naming, per cluster considered, every table missing there.
    """
    existing = output.primary if output is not None else None
    if forced is not None:
        if existing is not None and existing != forced:
            assert output is not None
            raise NoClusterError(
                f"cannot run on cluster {forced}: the statement writes {output.name}, whose primary "
                f"cluster is {existing}, and a table is written on its primary only"
            )
        missing = _missing(inputs, forced, replicated_only)
        if missing:
            raise NoClusterError(f"cannot run on cluster {forced} (as asked): {'; '.join(missing)}")
        return _chosen(forced, "it was asked for (--cluster, USE CLUSTER)", inputs, output, replicated_only)
    if existing is not None:
        assert output is not None
        missing = _missing(inputs, existing, replicated_only)
        if missing:
            raise NoClusterError(
                f"the statement writes {output.name}, so it runs on its primary cluster {existing}, "
                f"where {'; '.join(missing)}{_hint(replicated_only)}"
            )
        return _chosen(
            existing, f"it writes {output.name}, whose primary it is", inputs, output, replicated_only
        )
    candidates = list(dict.fromkeys(i.primary for i in inputs))
    if not candidates:
        return _chosen(DEFAULT_CLUSTER, "the statement reads no table", inputs, output, replicated_only)
    tried = []
    for cluster in candidates:
        missing = _missing(inputs, cluster, replicated_only)
        if not missing:
            first = next(i.name for i in inputs if i.primary == cluster)
            why = f"the primary of {first}, where every table the statement reads is present"
            if cluster != candidates[0]:
                why += f" (not on {', '.join(candidates[: candidates.index(cluster)])})"
            return _chosen(cluster, why, inputs, output, replicated_only)
        tried.append(f"on {cluster}: {'; '.join(missing)}")
    raise NoClusterError(
        f"no cluster holds every table the statement reads — {' — '.join(tried)}{_hint(replicated_only)}"
    )


def _missing(inputs: Sequence[Input], cluster: str, replicated_only: bool) -> list[str]:
    return [i.missing_on(cluster) for i in inputs if not i.readable_on(cluster, replicated_only)]


def _hint(replicated_only: bool) -> str:
    return "" if replicated_only else " (--replicated-only reads what a secondary holds)"


def _chosen(
    cluster: str, why: str, inputs: Sequence[Input], output: Target | None, replicated_only: bool
) -> Choice:
    cuts = tuple(i.name for i in inputs if cluster not in i.full_on)
    assert not cuts or replicated_only
    reason = f"cluster {cluster}: {why}"
    if output is not None and output.primary is None:
        reason += f"; {output.name} is created there"
    if cuts:
        reason += f"; {', '.join(cuts)} read as replicated there (--replicated-only)"
    return Choice(cluster, reason, cuts)
