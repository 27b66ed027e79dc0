"""Kafka offsets as the source keeps them in Spark's checkpoint.

An offset map says, for each topic-partition, the next offset to read. Spark stores it as a
JSON dict ``{"topic": {"partition": next_offset}}`` (partition keys are strings) and decides
that there is "no new data" when a batch's end offsets are the same *text* as its start, so
:func:`dump_offsets` always writes topics and partitions in sorted order.

In ``startingOffsets``/``endingOffsets`` JSON, ``-2`` stands for the earliest and ``-1`` for
the latest offset of a partition (as in Spark's Kafka source).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TP = tuple[str, int]
"""A topic-partition: (topic, partition)."""

OffsetMap = dict[TP, int]
EARLIEST, LATEST = -2, -1
INITIAL_MARKER = "$initial"
"""Key of the marker of :meth:`KafkaStreamReader.initialOffset` ('$' is never part of a topic name)."""
FROM_KEY = "$from"
"""In a batch's end offsets: where the batch starts reading those partitions instead of the previous
batch's end (an operator's reset, :mod:`ingest.kafka.steering`), so Spark's offset log holds it."""
RESET_KEY = "$reset"
"""In every end offsets since the first reset: the id of the newest reset request applied."""


def dump_offsets(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """The canonical JSON-able form: topics sorted, partitions sorted numerically.

    Spark compares offsets as JSON text ("no new data" = same text as the start), so the
    order of keys must never depend on how the dict was built.
    """
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def load_offsets(offsets: Mapping[str, Any] | None) -> OffsetMap:
    """The offset map of Spark's JSON form (the initial-offset marker left out)."""
    result: OffsetMap = {}
    for topic, parts in (offsets or {}).items():
        if topic.startswith("$"):  # a marker, not a topic ('$' is never part of a topic name)
            continue
        for partition, offset in parts.items():
            result[(topic, int(partition))] = int(offset)
    return result


def tp_name(tp: TP) -> str:
    """``topic-partition``, as messages name a partition."""
    return f"{tp[0]}-{tp[1]}"


def load_from(offsets: Mapping[str, Any] | None) -> OffsetMap:
    """The batch's reset starting offsets (``$from``), if any."""
    return load_offsets((offsets or {}).get(FROM_KEY))


def reset_mark(offsets: Mapping[str, Any] | None) -> int:
    """The id of the newest reset the offsets carry as applied (0: none)."""
    return int((offsets or {}).get(RESET_KEY, 0))
