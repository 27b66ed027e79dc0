"""The rule that picks a statement's cluster (streampart.query_cluster), on the seed's own examples.

HIVE's multi-cluster seed: T11, T12, T21, T31 belong to clusters C1, C1, C2 and C3; first with no
secondaries, then with T11 replicated whole to C2. Each row: the tables read, the table written
(new or existing), the cluster asked for, --replicated-only; and the seed's outcome — a cluster
(and, for a new table, that it is created there) or a failure naming what is missing where.
"""

from __future__ import annotations

import pytest

from streampart.query_cluster import Choice, Input, NoClusterError, Target, choose

PRIMARY = {"T11": "C1", "T12": "C1", "T21": "C2", "T31": "C3", "T13": None}


def world(t11_on_c2: str | None) -> dict[str, Input]:
    """The seed's tables; ``t11_on_c2``: None (no secondary), "whole", or "partly" (a lagging copy)."""
    tables = {name: Input(name, p, frozenset({p})) for name, p in PRIMARY.items() if p is not None}
    if t11_on_c2 == "whole":
        tables["T11"] = Input("T11", "C1", frozenset({"C1", "C2"}), frozenset({"C2"}))
    elif t11_on_c2 == "partly":
        gap = "2 of its 5 partitions with data are not copied there"
        tables["T11"] = Input("T11", "C1", frozenset({"C1"}), frozenset({"C2"}), {"C2": gap})
    return tables


def target(name: str | None) -> Target | None:
    return None if name is None else Target(name, PRIMARY[name])


# (T11 on C2, tables read, table written, cluster asked for, --replicated-only) → cluster, or
# the error's words; with a comment naming the seed's line where it is the seed's example
SEED = [
    # no secondaries
    (None, ["T11"], None, None, False, "C1"),  # select .. from T11: C1
    (None, ["T11", "T12"], None, None, False, "C1"),  # T11 join T12: C1
    (None, ["T21"], None, None, False, "C2"),  # select .. from T21: C2
    (None, ["T11", "T21"], None, None, False, "fail: on C1: T21 (primary C2) has no copy there"),  # fails
    (None, ["T11"], "T13", None, False, "C1 creates T13"),  # insert T13 select .. T11: C1, T13 made in C1
    (None, ["T11"], "T21", None, False, "fail: writes T21, so it runs on its primary cluster C2"),  # fails
    # T11's secondary is C2, all its data there
    ("whole", ["T11"], None, None, False, "C1"),  # select .. from T11: C1
    ("whole", ["T11", "T12"], None, None, False, "C1"),  # T11 join T12: C1
    ("whole", ["T21"], None, None, False, "C2"),  # T21: C2
    ("whole", ["T11", "T21"], None, None, False, "C2"),  # T11 join T21: C2
    ("whole", ["T11", "T31"], None, None, False, "fail: on C3: T11 (primary C1) has no copy there"),  # fails
    ("whole", ["T11"], "T13", None, False, "C1 creates T13"),  # insert T13 select .. T11: C1, made in C1
    ("whole", ["T11"], "T21", None, False, "C2"),  # insert T21 select .. T11: C2, T21 stays in C2
    # the order tables are named in decides between clusters that both work
    ("whole", ["T21", "T11"], None, None, False, "C2"),
    # USE CLUSTER C / --cluster C: run there, or fail saying why
    ("whole", ["T11"], None, "C2", False, "C2"),
    ("whole", ["T11", "T12"], None, "C2", False, "fail: cannot run on cluster C2 (as asked): T12"),
    (None, ["T11"], None, "C2", False, "fail: cannot run on cluster C2 (as asked): T11 (primary C1)"),
    ("whole", ["T11"], "T21", "C1", False, "fail: writes T21, whose primary cluster is C2"),
    ("whole", ["T11"], "T13", "C2", False, "C2 creates T13"),  # a new table is made where it runs
    ("whole", [], None, "C3", False, "C3"),
    # a statement that reads no table: the default cluster, or its output's primary
    (None, [], None, None, False, "default"),
    (None, [], "T21", None, False, "C2"),
    # T11 only partly on C2 (its streaming partition holds data, or a copy lags): not fully present
    ("partly", ["T11", "T21"], None, None, False, "fail: on C2: T11 (primary C1): 2 of its 5 partitions"),
    ("partly", ["T11"], "T21", None, False, "fail: --replicated-only reads what a secondary holds"),
    # … unless the statement opts into the cut replicated there
    ("partly", ["T11", "T21"], None, None, True, "C2 cuts T11"),
    ("partly", ["T11"], "T21", None, True, "C2 cuts T11"),
    ("partly", ["T11"], None, None, True, "C1"),  # on its primary a table is read whole
    ("partly", ["T11"], None, "C2", True, "C2 cuts T11"),
    ("partly", ["T11", "T31"], None, None, True, "fail: on C3: T11 (primary C1) has no copy there"),
]


@pytest.mark.parametrize(("t11_on_c2", "reads", "writes", "forced", "replicated_only", "outcome"), SEED)
def test_the_seeds_examples(
    t11_on_c2: str | None,
    reads: list[str],
    writes: str | None,
    forced: str | None,
    replicated_only: bool,
    outcome: str,
) -> None:
    tables = world(t11_on_c2)
    inputs = [tables[name] for name in reads]
    if outcome.startswith("fail: "):
        with pytest.raises(NoClusterError) as caught:
            choose(inputs, target(writes), forced, replicated_only)
        assert outcome.removeprefix("fail: ") in str(caught.value), str(caught.value)
        return
    got = choose(inputs, target(writes), forced, replicated_only)
    cluster, *rest = outcome.split()
    assert got.cluster == cluster, got
    assert ("creates" in rest) == (f"{writes} is created there" in got.reason), got.reason
    assert got.cuts == (tuple(rest[1:]) if rest[:1] == ["cuts"] else ()), got
    assert got.reason.startswith(f"cluster {cluster}: "), got.reason


def test_an_error_lists_every_cluster_tried_and_what_is_missing_there() -> None:
    tables = world(None)
    with pytest.raises(NoClusterError) as caught:
        choose([tables["T11"], tables["T21"], tables["T31"]])
    message = str(caught.value)
    assert "\n" not in message
    for fragment in (
        "on C1: T21 (primary C2) has no copy there; T31 (primary C3) has no copy there",
        "on C2: T11 (primary C1) has no copy there; T31 (primary C3) has no copy there",
        "on C3: T11 (primary C1) has no copy there; T21 (primary C2) has no copy there",
    ):
        assert fragment in message, message


def test_the_reason_says_why() -> None:
    tables = world("whole")
    got = choose([tables["T11"], tables["T21"]])
    assert got == Choice(
        "C2", "cluster C2: the primary of T21, where every table the statement reads is present (not on C1)"
    )
    got = choose([tables["T11"]], Target("T13", None))
    assert got.reason == (
        "cluster C1: the primary of T11, where every table the statement reads is present; "
        "T13 is created there"
    )
