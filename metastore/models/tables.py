"""Tables: what a user asks for (:class:`TableSpec`), what the metastore records (:class:`Table`),
their modes, kinds and companion tables.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from metastore.models.columns import Column
from metastore.models.evolution import SchemaEvolution
from metastore.models.keys import Keys
from metastore.models.names import PRIMARY, TableName
from metastore.models.periods import MAX_EVENT_TIME, MIN_EVENT_TIME, period_start, saturating_add


class Mode(StrEnum):
    """How a row's partition is chosen."""

    ARRIVAL = "arrival"  # HIVE-4196: the partition open when the chunk commits
    EVENT_TIME = "event-time"  # the partition of the row's own timestamp


class LateDataPolicy(StrEnum):
    """What happens to rows whose event-time partition is sealed already."""

    REJECT = "reject"
    DIVERT = "divert"


class TableKind(StrEnum):
    """Main tables hold user data; the others are companions created with a main table."""

    MAIN = "main"
    DEAD_LETTER = "dead-letter"
    LATE = "late"


# Companion tables are named after their main table: NS.TABLE__dead_letter, NS.TABLE__late.
COMPANION_SUFFIX = {TableKind.DEAD_LETTER: "__dead_letter", TableKind.LATE: "__late"}


def companion_name(name: TableName, kind: TableKind) -> TableName:
    return TableName(namespace=name.namespace, table=name.table + COMPANION_SUFFIX[kind])


# Why 100: evolution from data adds a column per new field a producer sends; a table of wide
# events gains dozens over its life, while a producer bug (a map's keys sent as fields, say) would
# add thousands. 100 lets the first through and stops the second early; the table's setting raises
# it (Metastore.set_schema_evolution), and columns added by hand (ALTER) do not count against it.
DEFAULT_MAX_NEW_COLUMNS = 100


def default_partition_column(time_column: str) -> str:
    """The partition column of a table whose ``time_column`` is given: ``<time_column>_period``."""
    return f"{time_column}_period"


class TableSpec(BaseModel):
    """What a user asks for when creating a streaming table."""

    model_config = ConfigDict(frozen=True)

    name: TableName
    columns: tuple[Column, ...]
    time_column: str
    partition_column: str = Field(
        "", description="Column holding the partition value (period start); default <time_column>_period."
    )
    mode: Mode = Mode.ARRIVAL
    roll_every: timedelta
    lateness: timedelta = timedelta(0)
    late_data: LateDataPolicy = LateDataPolicy.REJECT
    # Event-time tables: a row more than max_future ahead of the clock is a bad record (a
    # producer's broken clock must not open a partition of the year 9999); a row whose period
    # ended more than max_age ago is late, as a row of a sealed partition is (None: backfills of
    # any age open their partitions, as before).
    max_future: timedelta = timedelta(days=1)
    max_age: timedelta | None = None
    # How long a standard partition is kept after its period ends (metastore/retention.py): None
    # follows the namespace's default, timedelta(0) keeps it for ever.
    retain: timedelta | None = None
    dead_letter: bool = False
    kind: TableKind = TableKind.MAIN
    cluster: str = "default"
    schema_evolution: SchemaEvolution = Field(
        SchemaEvolution.NONE,
        description="What rows bringing fields the table lacks may change in its schema (none: ignored).",
    )
    max_new_columns: int = Field(
        DEFAULT_MAX_NEW_COLUMNS,
        ge=0,
        description="How many columns evolution from data may add to the table in all (not ALTER's).",
    )
    keys: Keys | None = Field(None, description="A keyed table's primary key (None: a table of appends).")
    cluster_by: tuple[str, ...] = Field(
        (),
        description="The columns a roll orders a partition's rows by: sorted by one, Z-ordered by "
        "several (metastore/models/clustering.py); empty: rows stay in arrival order.",
    )

    @property
    def data_columns(self) -> tuple[Column, ...]:
        return self.columns

    @model_validator(mode="before")
    @classmethod
    def _default_partition_column(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("partition_column") and data.get("time_column"):
            return {**data, "partition_column": default_partition_column(str(data["time_column"]))}
        return data

    def companion(self, kind: TableKind) -> TableName:
        """The name of this table's dead-letter or late-data companion."""
        return companion_name(self.name, kind)


class Table(TableSpec):
    """A table as recorded in the metastore."""

    id: int  # its row's id in its own metastore (each metastore numbers its own rows)
    location: str
    created_at: datetime
    uid: str = ""  # its identity across the federation, kept when its namespace moves
    metastore: str = PRIMARY  # the metastore it was read from: the one to write it through

    def event_time_range(self, now: datetime) -> tuple[datetime, datetime] | None:
        """Event-time tables: the earliest and latest event time a row may have at ``now``."""
        if self.mode is not Mode.EVENT_TIME:
            return None
        return MIN_EVENT_TIME, min(MAX_EVENT_TIME, saturating_add(now, self.max_future))

    def period_end(self, value: datetime) -> datetime:
        """The end of the period of the partition of ``value`` (saturating at the calendar's end)."""
        return saturating_add(period_start(value, self.roll_every), self.roll_every)

    @property
    def oldest_kept(self) -> timedelta | None:
        """Event-time tables: how long after its period ends a row is still taken (the shorter of
        ``max_age`` and the table's own retention, whose partitions would expire at once; None: any)."""
        bounds = [b for b in (self.max_age, self.retain) if b]
        return min(bounds) if self.mode is Mode.EVENT_TIME and bounds else None

    def too_old(self, period: datetime, now: datetime) -> bool:
        """Event-time tables: whether rows of ``period`` are past ``max_age`` (or the table's
        retention) at ``now``: late, as rows of a sealed partition are, so a backfill never opens a
        partition only for it to expire at the next pass."""
        bound = self.oldest_kept
        return bound is not None and self.period_end(period) <= saturating_add(now, -bound)
