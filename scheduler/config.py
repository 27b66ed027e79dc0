"""Configuration of the roll operation and of the roll daemon."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from metastore.durations import Duration

# The engines that compact a partition when it rolls (see scheduler.spark_compaction).
RollEngine = Literal["local", "spark"]


class RollConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: RollEngine = Field(
        "local",
        description="What compacts a rolling partition: local (this process, pyarrow) or spark (a Spark "
        "job on the table's cluster, for partitions too big for one process).",
    )

    target_file_size: int = Field(
        128 * 1024 * 1024, ge=1024, description="Size the sweep compacts a standard partition's files toward."
    )
    # Why 1 GiB: the roll daemon runs beside writers on a small host. A partition holding more rows
    # than that is ordered in runs of this size, each cut into its own files: each file is still
    # narrow, but the runs' ranges overlap, so a lookup reads a file of each run. The Spark engine
    # orders a partition of any size whole.
    cluster_memory: int = Field(
        1024**3,
        ge=1024,
        description="Clustered tables, local engine: the most bytes of rows (in memory) a roll orders at "
        "once; a bigger partition is ordered in runs of this size, each cut into its own files.",
    )
    # A roll is owned through a lease: another roller resumes an interrupted roll only once
    # the lease has lapsed, and its first step (a fresh seal) fences the previous holder's
    # sweep commit in any case. Two lengths, one for each kind of roller:
    #
    # Why 10 min for `lease`: a one-shot roller (`streampart roll`, Roller in Python) does not
    # renew its lease while it seals, compacts and commits one partition, and compaction of a
    # large partition on a busy machine can take minutes.
    lease: Duration = Field(
        timedelta(minutes=10),
        gt=timedelta(0),
        description="How long a one-shot roller (streampart roll) owns a roll before others may resume it.",
    )
    # Why 60 s for `renewed_lease`: the roll daemon renews the leases of its rolls at every
    # heartbeat, so a roll that takes an hour keeps its lease, while a roll whose daemon died
    # is resumed by the next leader one minute later rather than ten.
    renewed_lease: Duration = Field(
        timedelta(seconds=60),
        gt=timedelta(0),
        description="Lease of each roll the roll daemon carries out, renewed at every heartbeat; another "
        "daemon resumes an interrupted roll once it has lapsed (at least three heartbeats).",
    )

    def renewed(self) -> RollConfig:
        """The settings of a roller that renews its lease (the daemon's): ``renewed_lease`` is its lease."""
        return self.model_copy(update={"lease": self.renewed_lease})


class HousekeepingConfig(BaseModel):
    """The roll daemon's housekeeping: expiry, file removal, Delta checkpoints, metastore pruning."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(True, description="Run housekeeping jobs in the roll daemon (leader only).")
    interval: Duration = Field(
        timedelta(minutes=5), description="How often housekeeping runs over every table."
    )
    # Why 7 days: a query pins one Delta version and may read its files for as long as it
    # runs, and time travel reads older versions on purpose; files that left the table (swept
    # chunk files) or never entered it (aborted chunks) are deleted only once no reasonable
    # query can still hold a snapshot that lists them. Longer than any query or retry window.
    retention: Duration = Field(
        timedelta(days=7),
        description="Files of aborted chunks are deleted after this; chunk files swept by a roll, expired "
        "partitions' files and files a delete replaced after this since the roll, expiry or delete, once "
        "no version the Delta log still holds lists them (time travel). At least "
        "sqlserver.statement_timeout + sqlserver.freshness + 1m.",
    )
    # Why the same 7 days: a pruned chunk's idempotency key is forgotten, so a producer
    # retrying after that would land its chunk again; no producer retries a week later.
    chunk_retention: Duration = Field(
        timedelta(days=7),
        description="Chunk rows of partitions rolled longer ago than this are pruned into per-partition "
        "summaries (their idempotency keys are forgotten).",
    )
    checkpoint_every: Annotated[int, Field(ge=0)] | Literal["table"] = Field(
        "table",
        description="Write a Delta checkpoint once a table's log has grown by this many commits since the "
        'last one (0: never; "table": each table\'s own delta.checkpointInterval, `table create|alter '
        "--checkpoint-interval`).",
    )
    history_retention: Duration = Field(
        timedelta(days=30),
        description="Roll attempt history and applied Kafka ingest requests older than this are forgotten.",
    )

    @model_validator(mode="after")
    def _check_retention(self) -> HousekeepingConfig:
        # files of a pruned chunk are judged by their age alone, so its row must outlive them
        if self.chunk_retention < self.retention:
            raise ValueError(
                f"chunk_retention ({self.chunk_retention}) must not be shorter than retention "
                f"({self.retention})"
            )
        return self


class ReplicationConfig(BaseModel):
    """The roll daemon's copies of standard partitions to tables' secondary clusters."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        True,
        description="The leader copies each new standard partition to the table's secondaries right after "
        "its roll, and retries failed copies.",
    )
    # Why 30 s: copies are started right after each roll; this pass only finds the rest — a
    # replica added to a table with history, a copy whose retry time came, a copy another
    # daemon left unfinished — so it may be slow, and it costs one query per replica.
    interval: Duration = Field(
        timedelta(seconds=30),
        description="How often the leader looks for copies to make besides those right after a roll.",
    )
    retry_base: Duration = Field(
        timedelta(seconds=10), description="First delay before a failed copy is retried; doubles per failure."
    )
    retry_max: Duration = Field(timedelta(minutes=10), description="Longest delay between retries of a copy.")
    engine: RollEngine = Field(
        "local",
        description="What copies a partition's files: local (the copier's process) or spark (Spark tasks "
        "on the table's cluster, one per file, for partitions of at least spark_min_bytes; the workers "
        "must mount both clusters' storage).",
    )
    # Why 1 GiB: a Spark job takes seconds to start, a local copy of 1 GiB about as long; below
    # that the local copy is done before Spark's executors are.
    spark_min_bytes: int = Field(
        1024**3, ge=0, description="With engine = spark: partitions smaller than this are copied locally."
    )

    @model_validator(mode="after")
    def _check_retry(self) -> ReplicationConfig:
        if self.retry_max < self.retry_base:
            raise ValueError("retry_max must not be shorter than retry_base")
        return self


class SchedulerConfig(BaseModel):
    """The roll daemon (``streampart scheduler run``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lease_name: str = Field(
        "roll-daemon",
        min_length=1,
        max_length=128,
        description="Name of the leadership lease; daemons sharing it elect one leader.",
    )
    # Why 15 s: a standby takes over at most this long (plus one heartbeat) after the leader
    # dies. Shorter makes failover faster but lets a leader that stalls (GC pause, a slow
    # metastore) lose leadership spuriously; every metastore write of the leader is fenced by
    # the lease's epoch, so a spurious loss costs time, never correctness.
    lease_ttl: Duration = Field(
        timedelta(seconds=15),
        description="Leadership lease: a standby takes over after the leader is silent this long.",
    )
    heartbeat: Duration = Field(
        timedelta(seconds=5),
        description="How often the leader renews its lease (and its rolls' leases, roll.renewed_lease), "
        "and standbys try to take it; at most a third of lease_ttl and of roll.renewed_lease.",
    )
    sync_interval: Duration = Field(
        timedelta(seconds=10),
        description="How often the table list is read again (tables created, changed or dropped "
        "while the daemon runs) and event-time partitions opened by writers are scheduled.",
    )
    workers: int = Field(
        4, ge=1, le=64, description="Rolls carried out at once (each table rolls one partition at a time)."
    )
    retry_base: Duration = Field(
        timedelta(seconds=5), description="First delay before a failed roll is retried; doubles per failure."
    )
    retry_max: Duration = Field(timedelta(minutes=10), description="Longest delay between retries of a roll.")
    retry_jitter: float = Field(
        0.1, ge=0, le=1, description="Up to this fraction is added at random to each retry delay."
    )
    # Why 20 s: Kubernetes' default termination grace period is 30 s; a roll that finishes
    # within 20 s leaves no partition ROLLING behind, and 10 s remain to stop at a step. A
    # longer roll is abandoned at its next step boundary and resumed by the next leader.
    shutdown_grace: Duration = Field(
        timedelta(seconds=20),
        description="On SIGTERM, how long a roll in progress may run on to finish before it is "
        "abandoned at its next step (it resumes later).",
    )
    # Why 1 min: retention is days or months long, so a minute late is nothing, while each pass
    # costs a partition list per table with a retention (and, when one is due, one Delta commit).
    expiry_interval: Duration = Field(
        timedelta(minutes=1),
        description="How often the leader expires the standard partitions whose retention ran out "
        "(tables with --retain, or in a namespace with one).",
    )
    observe_interval: Duration = Field(
        timedelta(seconds=15), description="How often the per-table gauges (partitions, chunks, lag) refresh."
    )
    metrics: bool = Field(True, description="Serve Prometheus metrics over HTTP (/metrics).")
    metrics_port: int = Field(
        9464, ge=0, le=65535, description="Port of the metrics endpoint; 0 picks a free port."
    )
    metrics_host: str = Field("0.0.0.0", description="Address the metrics endpoint listens on.")
    status: bool = Field(
        False,
        description="Serve the read-only status page (/ui, opened with the API's tokens) from the daemon "
        "(streampart serve shows it too); scheduler run --status-port turns it on.",
    )
    status_port: int = Field(
        9470, ge=0, le=65535, description="Port of the daemon's status page; 0 picks a free port."
    )
    status_host: str = Field("0.0.0.0", description="Address the daemon's status page listens on.")
    # Why 5 s: an operator watching an incident sees a roll land within seconds; each refresh is a
    # few indexed queries per table, so several open pages cost the metastore little.
    status_refresh: Duration = Field(
        timedelta(seconds=5),
        ge=timedelta(seconds=1),
        description="How often the status page (/ui) refreshes itself.",
    )
    log_format: Literal["json", "text"] = Field(
        "json", description="json: one JSON object per line (structured); text: for humans."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
    housekeeping: HousekeepingConfig = Field(
        default_factory=HousekeepingConfig, description="Housekeeping jobs."
    )
    replication: ReplicationConfig = Field(
        default_factory=ReplicationConfig, description="Copies of standard partitions to secondary clusters."
    )

    @model_validator(mode="after")
    def _check_timing(self) -> SchedulerConfig:
        if self.heartbeat * 3 > self.lease_ttl:
            raise ValueError(
                f"heartbeat ({self.heartbeat}) must be at most a third of lease_ttl ({self.lease_ttl})"
            )
        if self.retry_max < self.retry_base:
            raise ValueError("retry_max must not be shorter than retry_base")
        return self


def check_heartbeat(scheduler: SchedulerConfig, roll: RollConfig) -> None:
    """The daemon renews its rolls' leases at every heartbeat: three renewals at least per lease.

    Raises:
        ValueError: naming both settings (the config loader reports it with the section).
    """
    if scheduler.heartbeat * 3 > roll.renewed_lease:
        raise ValueError(
            f"scheduler.heartbeat ({scheduler.heartbeat}) must be at most a third of roll.renewed_lease "
            f"({roll.renewed_lease})"
        )
