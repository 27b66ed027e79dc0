"""Planning: the offset ranges of a micro-batch cut into Spark tasks, and the rate limit.

Both are pure functions of offsets (no broker call), so a batch that Spark replays after a
crash plans the same tasks and reads the same records. A partition missing from the start
offsets (a new partition, or a new topic that matches ``subscribePattern``) starts at offset 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from ingest.kafka.offsets import TP, OffsetMap


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One task: records ``[start, end)`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_ranges(
    start: Mapping[TP, int],
    end: Mapping[TP, int],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[KafkaRange]:
    """Cut each ``[start, end)`` into tasks; a partition missing from ``start`` starts at 0.

    Deterministic (no broker call): replaying a batch plans the same ranges. Empty and
    negative ranges (offsets that went backwards, already reported as data loss) are skipped.
    ``maxRecordsPerPartition`` bounds each task; ``minPartitions`` then splits the larger
    ranges in proportion to their size until there are about that many tasks.
    """
    ranges = [(tp, start.get(tp, 0), end[tp]) for tp in sorted(end)]
    ranges = [(tp, s, e) for tp, s, e in ranges if e > s]
    pieces = [
        max(1, math.ceil((e - s) / max_records_per_partition)) if max_records_per_partition else 1
        for _, s, e in ranges
    ]
    total = sum(e - s for _, s, e in ranges)
    if min_partitions and total and sum(pieces) < min_partitions:
        pieces = [
            max(n, round((e - s) * min_partitions / total))
            for n, (_, s, e) in zip(pieces, ranges, strict=True)
        ]
    out: list[KafkaRange] = []
    for n, ((topic, partition), s, e) in zip(pieces, ranges, strict=True):
        n = max(1, min(n, e - s))
        bounds = [s + (e - s) * i // n for i in range(n + 1)]
        out.extend(KafkaRange(topic, partition, a, b) for a, b in itertools.pairwise(bounds) if b > a)
    return out


def rate_limit(start: Mapping[TP, int], end: Mapping[TP, int], max_rows: int) -> OffsetMap:
    """``end`` cut so that at most ``max_rows`` records are read, spread over the partitions.

    Each partition gets a share in proportion to its backlog (largest remainders first, ties
    in topic-partition order), so a batch never exceeds the limit and always makes progress.
    """
    backlog = {tp: max(0, e - start.get(tp, 0)) for tp, e in end.items()}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(end)
    exact = {tp: b * max_rows / total for tp, b in backlog.items()}
    share = {tp: int(x) for tp, x in exact.items()}
    left = max_rows - sum(share.values())
    for tp in sorted(exact, key=lambda k: (-(exact[k] - share[k]), k))[:left]:
        share[tp] += 1
    return {tp: (start.get(tp, 0) + share[tp] if backlog[tp] else e) for tp, e in end.items()}
