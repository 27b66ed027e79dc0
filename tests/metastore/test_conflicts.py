"""A conditional update that loses names the precondition that failed, not only the row's state.

Run against every backend. Each case sets a row up, makes one step fail, and checks the words:
the expected state alone ("chunk … is reserved, expected reserved") does not say why a chunk
that *is* reserved cannot begin its commit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from metastore.catalog import Catalog
from metastore.errors import ConflictError, LeaseLostError, StreampartError
from metastore.models import ChunkState, RollState, iso
from tests.fixtures import make_table

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
S = timedelta(seconds=1)


def expired_chunk(catalog: Catalog) -> tuple[Callable[[], object], str]:
    # reserved with a one-second TTL, never swept to EXPIRED: its state still says "reserved"
    store = catalog.store
    chunk = store.reserve_chunk(make_table(catalog).id, None, S, now=T0)
    return (
        lambda: store.begin_commit(chunk, 0, now=T0 + 2 * S),
        r"chunk \S+ expired at 2026-11-21T10:00:01Z \(its TTL\)",
    )


def chunk_with_other_content(catalog: Catalog) -> tuple[Callable[[], object], str]:
    # another producer re-staged the chunk under the same idempotency key with other data
    store = catalog.store
    chunk = store.reserve_chunk(make_table(catalog).id, "tok", HOUR, now=T0)
    store.record_chunk_files(chunk, [], content_digest="aaa")
    return (
        lambda: store.begin_commit(chunk, 0, now=T0 + S, content_digest="bbb"),
        r"holds other content \(digest aaa\), not bbb",
    )


def replaced_commit_attempt(catalog: Catalog) -> tuple[Callable[[], object], str]:
    # a stalled attempt was taken over; it may neither take over again nor abort
    store = catalog.store
    chunk = store.reserve_chunk(make_table(catalog).id, None, HOUR, now=T0)
    stale = store.begin_commit(chunk, 0, now=T0)
    taken = store.take_over_commit(stale, now=T0 + 10 * S)
    return (
        lambda: store.abort_chunk(stale, error="late"),
        rf"is held by another commit attempt \({taken.attempt}, since 2026-11-21T10:00:10Z\), "
        rf"not {stale.attempt}",
    )


def committed_chunk(catalog: Catalog) -> tuple[Callable[[], object], str]:
    # a stale view of a chunk that has moved on: its state is the failed precondition
    store = catalog.store
    chunk = store.reserve_chunk(make_table(catalog).id, None, HOUR, now=T0)
    store.finish_commit(store.begin_commit(chunk, 0, now=T0), 3, [T0])
    return lambda: store.begin_commit(chunk, 0, now=T0), r"is committed, expected reserved"


def rolling_partition(catalog: Catalog) -> tuple[Callable[[], object], str]:
    # a second roller with a stale view of the partition
    store = catalog.store
    table = make_table(catalog)
    p = store.streaming_partition(table.id)
    store.begin_roll(p, p.value + HOUR, "a", HOUR)
    return (
        lambda: store.begin_roll(p, p.value + 2 * HOUR, "b", HOUR),
        rf"partition {re.escape(iso(p.value))} of table #{table.id} is rolling, expected streaming",
    )


def roll_held_by_another(catalog: Catalog) -> tuple[Callable[[], object], str]:
    # the roll's owner is alive (its lease runs): nobody else may claim it
    store = catalog.store
    p = store.streaming_partition(make_table(catalog).id)
    roll = store.begin_roll(p, p.value + HOUR, "a", 30 * S, now=T0)
    return (
        lambda: store.claim_roll(roll, "b", 30 * S, now=T0 + 5 * S),
        r"is held by a until 2026-11-21T10:00:30Z",
    )


def roll_taken_over(catalog: Catalog) -> tuple[Callable[[], object], str]:
    # the old owner's lease lapsed and b took the roll: a may not move it on
    store = catalog.store
    p = store.streaming_partition(make_table(catalog).id)
    roll = store.begin_roll(p, p.value + HOUR, "a", 30 * S, now=T0)
    store.claim_roll(roll, "b", 30 * S, now=T0 + 31 * S)
    return (
        lambda: store.advance_roll(roll, RollState.SWEEPING, "a", seal_version=1),
        r"is owned by b \(lease until 2026-11-21T10:01:01Z\), not a",
    )


def lapsed_lease(catalog: Catalog) -> tuple[Callable[[], object], str]:
    # nobody took the lease, but it ran out before its holder renewed it
    store = catalog.store
    lease = store.acquire_lease("roll", "a", 10 * S, now=T0)
    assert lease is not None
    return lambda: store.renew_lease(lease, 10 * S, now=T0 + 11 * S), r"lapsed at 2026-11-21T10:00:10Z"


def lease_taken_over(catalog: Catalog) -> tuple[Callable[[], object], str]:
    # the deposed leader's fence: another holder has the lease at a higher epoch
    store = catalog.store
    lease = store.acquire_lease("roll", "a", 10 * S, now=T0)
    assert lease is not None and store.acquire_lease("roll", "b", 10 * S, now=T0 + 11 * S) is not None
    p = store.streaming_partition(make_table(catalog).id)
    return (
        lambda: store.begin_roll(p, p.value + HOUR, "a", HOUR, now=T0 + 12 * S, fence=lease),
        r"lease roll \(epoch 1 of a\) is held by b at epoch 2",
    )


CASES: list[tuple[Callable[[Catalog], tuple[Callable[[], object], str]], type[StreampartError]]] = [
    (expired_chunk, ConflictError),
    (chunk_with_other_content, ConflictError),
    (replaced_commit_attempt, ConflictError),
    (committed_chunk, ConflictError),
    (rolling_partition, ConflictError),
    (roll_held_by_another, ConflictError),
    (roll_taken_over, ConflictError),
    (lapsed_lease, LeaseLostError),
    (lease_taken_over, LeaseLostError),
]


@pytest.mark.parametrize(("case", "error"), CASES, ids=[c.__name__ for c, _ in CASES])
def test_a_failed_precondition_is_named(
    catalog: Catalog, case: Callable[[Catalog], tuple[Callable[[], object], str]], error: type[Exception]
) -> None:
    step, named = case(catalog)
    with pytest.raises(error, match=named):
        step()


def test_a_failed_step_changes_nothing(catalog: Catalog) -> None:
    """The re-read that names the precondition happens in the failed step's own transaction."""
    store = catalog.store
    chunk = store.reserve_chunk(make_table(catalog).id, None, S, now=T0)
    with pytest.raises(ConflictError):
        store.begin_commit(chunk, 0, now=T0 + 2 * S)
    after = store.get_chunk(chunk.id)
    assert after.state is ChunkState.RESERVED and after.attempt is None and after.base_version is None
