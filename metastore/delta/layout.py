"""Where a table's files live, and how a partition's value is written: in the Delta log, as a
directory, and for a person.

Layout of a table ``ns.t`` (a standard Delta table any Delta reader can open)::

    <warehouse>/ns/t/_delta_log/                 the Delta transaction log
    <warehouse>/ns/t/_staging/<chunk>-<k>.parquet chunk files as staged, before their commit
    <warehouse>/ns/t/_staging/<pcol>=<value>/…    committed chunk files of a streaming partition
    <warehouse>/ns/t/<pcol>=<value>/part-*.parquet a standard partition: exactly its live files
    <warehouse>/ns/t/<pcol>=<value>/_SUCCESS      completeness marker, written after the roll

Names starting with ``_`` are hidden from Hive and Spark Parquet readers, so a plain reader
of the table directory sees standard partitions only, and one pointed at a partition
directory sees exactly that partition's rows. Every file the log lists is under a
``<pcol>=<value>/`` directory naming its partition, as the log's ``partitionValues`` do:
readers that take the value from the path (polars' native Delta reader) find it there. A
chunk's file is staged before its partition is known (arrival mode: the partition open when it
commits); its commit adds a hard link to it in its partition's staging directory
(``metastore/delta/staging.py``).

A partition's value is a UTC timestamp: the start of its period (or, in arrival mode after a
forced roll, the whole second the roll happened in). It appears in three places, which every
Delta reader must find consistent:

- **the Delta log** (``partitionValues``), the truth for readers that follow the Delta protocol
  (delta-rs, delta-spark, DuckDB): :func:`partition_value_text`, delta-rs' own format
  (``2026-11-23 13:00:00.000000``). Unchanged since the first table.
- **the directory** of a file: :func:`partition_dir`. Some readers take the value from the path
  instead of the log (polars' native ``read_delta`` reads every file as a Hive path), so every
  data file lives under ``<pcol>=<value>/``: a standard partition's files in
  ``<pcol>=<value>/``, a streaming partition's committed chunk files in
  ``_staging/<pcol>=<value>/``. The value is written as Hive and Spark write a timestamp
  partition: ``YYYY-MM-DD HH:MM:SS`` with a fraction of a second only when it has one, and only
  ``:`` escaped (``%3A``: a Hadoop path cannot hold a colon), e.g.
  ``ts_period=2026-11-23 13%3A00%3A00``. Every reader that parses the path decodes that.
- **for a person** (``table describe``): :func:`partition_label`, ``2026-11-23 13:00`` (seconds
  and fractions only when not zero), always UTC.

Directories named before this rule (``ts_period=2026-11-23%2013%3A00%3A00.000000``, delta-rs'
escaping) keep their names: :func:`partition_dir` answers the old name for a partition whose
directory already has it, so a partition never has files in two directories, and tables written
before keep working as they are. Nothing in an existing Delta log changes.
"""

from __future__ import annotations

import os
import urllib.parse
from datetime import UTC, datetime
from typing import Any

from metastore import storage
from metastore.durations import format_duration
from metastore.models import Mode, Table, utc

STAGING_DIR = "_staging"
SUCCESS_MARKER = "_SUCCESS"

# Staged files are named ``<chunk id>-<k>.parquet`` (or ``<chunk id>-<task>-<k>.parquet`` when
# Spark tasks stage them, ``<chunk id>-<attempt>-<batch>-<k>.parquet`` for HTTP uploads), and
# chunk ids are UUIDs in their 36-character text form. Files being written are hidden: a ``.``
# before the same name.
CHUNK_ID_LENGTH = 36


def staging_path(prefix: str, k: int) -> str:
    """The path of a chunk's ``k``-th staged file; ``prefix`` starts with the chunk id."""
    return f"{STAGING_DIR}/{prefix}-{k}.parquet"


def chunk_of_staged(name: str) -> str:
    """The id of the chunk whose staged (or hidden, half-written) file is named ``name``."""
    return name.removeprefix(".")[:CHUNK_ID_LENGTH]


def partition_value_text(value: datetime) -> str:
    """A timestamp partition value as the Delta log stores it (delta-rs' own format).

    The year has four digits whatever it is: ``strftime("%Y")`` writes year 1 as ``1``.
    """
    v = utc(value)
    return f"{v.year:04d}-{v:%m-%d %H:%M:%S}.{v.microsecond:06d}"


def parse_partition_value(text: Any) -> datetime:
    if isinstance(text, datetime):
        return utc(text)
    return utc(datetime.fromisoformat(str(text)))


def directory_value_text(value: datetime) -> str:
    """The value as a directory name holds it, unescaped: ``2026-11-23 13:00:00`` (fraction if any)."""
    v = utc(value)
    text = f"{v.year:04d}-{v:%m-%d %H:%M:%S}"
    return f"{text}.{v.microsecond:06d}" if v.microsecond else text


def readable_dir(column: str, value: datetime, bucket: bool = False) -> str:
    """``<column>=<value>`` as Hive and Spark name a timestamp partition: only ``:`` escaped.

    ``bucket``: for a table in a bucket, the space too (``%20``): some S3 readers (polars') do not
    find a key with a space by the path the Delta log gives for it. Every reader that parses the
    path decodes ``%20`` as it decodes ``%3A``.
    """
    text = directory_value_text(value).replace(":", "%3A")
    return f"{column}={text.replace(' ', '%20') if bucket else text}"


def legacy_dir(column: str, value: datetime) -> str:
    """``<column>=<value>`` as delta-rs names it (every character but letters and digits escaped):
    the name of every standard partition rolled before :func:`readable_dir`."""
    return f"{column}={urllib.parse.quote(partition_value_text(value), safe='')}"


def partition_dir(table: Table, value: datetime) -> str:
    """Directory (relative to the table) of a standard partition.

    :func:`readable_dir`, unless the partition's directory exists under its old name
    (:func:`legacy_dir`): then that one, so the files of a partition rolled (or being rolled)
    before the rule changed stay together and are found where they are.
    """
    legacy = legacy_dir(table.partition_column, value)
    # every table in a bucket is newer than the rule: no directory there has the old name
    if not _in_bucket(table) and os.path.isdir(os.path.join(table.location, legacy)):
        return legacy
    return readable_dir(table.partition_column, value, _in_bucket(table))


def _in_bucket(table: Table) -> bool:
    return storage.is_remote(table.location)


def value_of_dir(column: str, name: str) -> datetime | None:
    """The partition value a directory name ``<column>=<value>`` holds (any of the names above), or
    None if it is not one."""
    prefix = f"{column}="
    if not name.startswith(prefix):
        return None
    try:
        return parse_partition_value(urllib.parse.unquote(name[len(prefix) :]))
    except ValueError:
        return None


def staged_dir(table: Table, value: datetime) -> str:
    """Directory (relative to the table) of a streaming partition's committed chunk files."""
    return f"{STAGING_DIR}/{readable_dir(table.partition_column, value, _in_bucket(table))}"


def partition_label(value: datetime) -> str:
    """A partition's value for a person: ``2026-11-23 13:00``, ``… 13:17:39``; UTC, no zero parts."""
    v = utc(value)
    text = f"{v.year:04d}-{v:%m-%d %H:%M}"
    if v.second or v.microsecond:
        text += f":{v.second:02d}"
    if v.microsecond:
        text += f".{v.microsecond:06d}".rstrip("0")
    return text


def placement_text(table: Table) -> str:
    """What the partition column holds and how a row is placed, in the table's mode, for a person."""
    every = format_duration(table.roll_every)
    if table.mode is Mode.EVENT_TIME:
        return (
            f"event time from {table.time_column}: each row goes to the partition of the {every} period "
            f"its own {table.time_column} falls in"
        )
    return (
        f"arrival time of each chunk: a chunk's rows go to the partition that is open when it "
        f"commits ({table.time_column} is not used to place rows)"
    )


def naming_text(table: Table) -> str:
    """How partitions are named (``table describe``): what :func:`partition_label` and
    :func:`partition_dir` write."""
    every = format_duration(table.roll_every)
    start = f"the start of its {every} period"
    if table.mode is Mode.ARRIVAL:
        start += ", or the second a forced roll opened it"
    bucket = _in_bucket(table)
    example = readable_dir(table.partition_column, datetime(2026, 11, 23, 13, tzinfo=UTC), bucket)
    escaped = "':' written %3A and ' ' %20 (in a bucket)" if bucket else "':' written %3A"
    return (
        f"each partition is named after its start in UTC ({start}); its directory is e.g. "
        f"{example}/ ({escaped}, as Hive and Spark write it)"
    )
