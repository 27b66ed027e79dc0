"""What ``streampart scheduler status`` shows: the leaders, each table's next roll, recent rolls.

Read from the metastores alone, so it works from any host and whether or not a daemon runs. The
daemons hold one leadership lease per metastore (scheduler.federation_daemons): ``metastores``
shows each one's leader (or why it did not answer); ``leader`` is the primary's, ``tables`` and
``recent_rolls`` span every metastore that answered (each table names its metastore).

The operators' status page (:mod:`scheduler.status_page`) shows the same answer, asked with
``may_read`` (only the namespaces a token may read) and ``timeline`` (each table's newest
partitions as bars along time); each metastore also names its daemons (leader and standbys, from
their heartbeats) and housekeeping's last pass, each table its traffic (freshness, commits per
minute, dead letters in the last hour), its replicas (and how far each is behind) and the links
to it. A dead-letter or late-data table is listed as a table of its own, as before, and names its
main table under ``companion_of`` (the page shows it with that table). ``ingest_jobs`` lists the
Kafka ingest jobs as each last published its status (:mod:`ingest.kafka.steering`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from ingest.api.ttl_cache import TtlCache
from ingest.kafka.steering import job_namespaces, job_reports
from metastore import clock
from metastore.catalog import Catalog
from metastore.description import retention_info
from metastore.durations import format_duration
from metastore.errors import StreampartError
from metastore.iceberg import View, newest_loaded
from metastore.models import (
    COMPANION_SUFFIX,
    PRIMARY,
    DaemonBeat,
    Lease,
    Partition,
    PartitionState,
    Roll,
    RollAttempt,
    RollOutcome,
    RollState,
    Table,
    TableKind,
    TableName,
    iso,
    parse_instant,
)
from scheduler.config import SchedulerConfig
from scheduler.replica_backlog import backlog
from scheduler.roll import due_time

# Why 5 minutes: commits per minute over one minute jumps with every batch a producer sends; over
# five it is steady enough to read at a glance yet still drops within minutes of a stall.
COMMIT_RATE_WINDOW = timedelta(minutes=5)
# The "dead letters in the last hour": an hour spans a deploy and its consequences.
DEAD_LETTER_WINDOW = timedelta(hours=1)
# Why 30 s: a running ingest job publishes its status at least every 5 s (ingest.kafka.job); six
# missed in a row is no scheduling hiccup, the job is stopped, stuck or gone.
JOB_SILENT_AFTER = timedelta(seconds=30)


def _iso(ts: datetime | None) -> str | None:
    return None if ts is None else iso(ts)


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else round((end - start).total_seconds(), 3)


def scheduler_status(
    catalog: Catalog,
    config: SchedulerConfig | None = None,
    now: datetime | None = None,
    limit: int = 20,
    may_read: Callable[[str], bool] | None = None,
    timeline: int = 0,
) -> dict[str, Any]:
    """The daemon's state in the shape of ``streampart scheduler status --json``.

    Args:
        may_read: Whether a namespace's tables, links and rolls are shown (None: all are).
        timeline: How many of each table's newest partitions to list under ``partitions``.
    """
    config = config or SchedulerConfig()
    now = now or clock.now()
    found = catalog.router.fan_out(
        lambda store: _one(catalog.on(store.name), config, now, limit, may_read, timeline)
    )
    metastores = []
    for name in catalog.router.names():
        answer = found.answers.get(name)
        metastores.append(
            {
                "metastore": name,
                "leader": None if answer is None else answer["leader"],
                "daemons": [] if answer is None else answer["daemons"],
                "housekeeping": None if answer is None else answer["housekeeping"],
                "error": found.missing.get(name),
            }
        )
    answers = [found.answers[m["metastore"]] for m in metastores if m["metastore"] in found.answers]
    recent = sorted(
        (r for a in answers for r in a["recent_rolls"]), key=lambda r: r["finished_at"], reverse=True
    )
    return {
        "now": iso(now),
        "lease": config.lease_name,
        "leader": found.answers[PRIMARY]["leader"] if PRIMARY in found.answers else None,
        "metastores": metastores,
        "tables": [t for a in answers for t in a["tables"]],
        "links": [link for a in answers for link in a["links"]],
        "recent_rolls": recent[:limit],
        "ingest_jobs": _ingest_jobs(catalog, may_read, now),
        "shares": _shares(catalog, may_read),
    }


# Why 30 s: finding a table's newest Iceberg load lists a directory (a request to a bucket), and the
# status page refreshes every few seconds for each viewer; loads by engines are seen within this.
ICEBERG_TTL_S = 30.0
_iceberg_seen: TtlCache[str, tuple[dict[str, Any] | None]] = TtlCache(ICEBERG_TTL_S)


def _iceberg(table: Table) -> dict[str, Any] | None:
    """The newest version an engine loaded the table at through the Iceberg catalog, and when (looked
    up at most every :data:`ICEBERG_TTL_S` per table and process)."""

    def look() -> tuple[dict[str, Any] | None]:
        found = newest_loaded(View(str(table.name), table.location, table.uid))
        return (None if found is None else {"version": found[0], "loaded_at": iso(found[1])},)

    try:
        (info,) = _iceberg_seen.get(table.location, look)  # (a 1-tuple: "never loaded" is remembered too)
    except OSError:
        return None
    return info


def _shares(catalog: Catalog, may_read: Callable[[str], bool] | None) -> list[dict[str, Any]]:
    """Delta Sharing's shares and what they hold, as far as the viewer may read (a share holding
    nothing it may read is left out)."""
    try:
        shares = catalog.primary.list_shares()
    except StreampartError:
        return []
    out = []
    for share in shares:
        shown = [str(t) for t in share.tables if may_read is None or may_read(t.namespace)]
        if shown:
            out.append({"share": share.name, "tables": shown})
    return out


def _ingest_jobs(
    catalog: Catalog, may_read: Callable[[str], bool] | None, now: datetime
) -> list[dict[str, Any]]:
    """The Kafka ingest jobs as each last published itself (``silent``: not for a while, stopped or
    gone), those whose tables' namespaces may all be read; one writing to open-ended tables needs
    read on all (``read:*``). The metastore not answering leaves the list empty."""
    try:
        reports = job_reports(catalog.store, requests=3)
    except StreampartError:
        return []
    shown = []
    for report in reports:
        namespaces = job_namespaces(report)
        if may_read is not None and not all(map(may_read, ["*"] if namespaces is None else namespaces)):
            continue
        quiet = (now - parse_instant(report["updated_at"])).total_seconds()
        shown.append(
            {**report, "silent": quiet > JOB_SILENT_AFTER.total_seconds(), "quiet_seconds": round(quiet, 1)}
        )
    return shown


def _one(
    catalog: Catalog,
    config: SchedulerConfig,
    now: datetime,
    limit: int,
    may_read: Callable[[str], bool] | None,
    timeline: int,
) -> dict[str, Any]:
    """The leader, daemons, tables and recent rolls of the metastore ``catalog`` is bound to."""
    store = catalog.store
    readable_ns = may_read or (lambda _namespace: True)
    leader = _leader(store.get_lease(config.lease_name), now)
    beats = store.list_daemons(config.lease_name)
    readable = [t for t in store.list_tables() if readable_ns(t.name.namespace)]
    replicas: dict[int, list[str]] = {}
    for replica in store.list_replicas() if readable else []:
        replicas.setdefault(replica.table_id, []).append(replica.cluster)
    all_links = store.list_links()
    links_to: dict[int, list[str]] = {}
    for link in all_links:
        if link.source_table_id is not None and readable_ns(link.name.namespace):
            links_to.setdefault(link.source_table_id, []).append(str(link.name))
    tables = _tables(catalog, readable, now, replicas, links_to, timeline)
    names = {table.id: str(table.name) for table in readable}
    return {
        "leader": leader,
        "daemons": [_daemon(d, leader, config, now) for d in beats],
        "housekeeping": _housekeeping(beats),
        "tables": tables,
        "links": [
            {"link": str(link.name), "source": str(link.source), "mode": link.mode.value}
            for link in all_links
            if readable_ns(link.name.namespace)
        ],
        "recent_rolls": _recent_rolls(store, names, limit, filtered=may_read is not None),
    }


def _leader(lease: Lease | None, now: datetime) -> dict[str, Any] | None:
    """The leadership lease as the status shows it (None: never taken)."""
    if lease is None:
        return None
    return {
        "holder": lease.holder,
        "live": lease.live(now),
        "epoch": lease.epoch,
        "since": _iso(lease.acquired_at),
        "renewed_at": _iso(lease.renewed_at),
        "expires_at": _iso(lease.expires_at),
        "host": lease.info.get("host"),
        "pid": lease.info.get("pid"),
        "metrics": lease.info.get("metrics"),
    }


def _daemon(
    d: DaemonBeat, leader: dict[str, Any] | None, config: SchedulerConfig, now: datetime
) -> dict[str, Any]:
    """One daemon (leader or standby) as its heartbeats show it."""
    return {
        "holder": d.holder,
        "role": _role(d.holder, d.heartbeat_at, leader, config, now),
        "heartbeat_at": iso(d.heartbeat_at),
        "heartbeat_age_seconds": _seconds(d.heartbeat_at, now),
        "host": d.info.get("host"),
        "pid": d.info.get("pid"),
        "housekeeping_at": _iso(d.housekeeping_at),
        "housekeeping_outcome": d.housekeeping_outcome,
    }


def _housekeeping(beats: list[DaemonBeat]) -> dict[str, Any] | None:
    """The newest housekeeping pass, whichever daemon led then (None: none yet)."""
    passes = [(d.housekeeping_at, d) for d in beats if d.housekeeping_at is not None]
    if not passes:
        return None
    at, by = max(passes, key=lambda p: p[0])
    return {"at": iso(at), "outcome": by.housekeeping_outcome, "by": by.holder}


def _tables(
    catalog: Catalog,
    readable: list[Table],
    now: datetime,
    replicas: dict[int, list[str]],
    links_to: dict[int, list[str]],
    timeline: int,
) -> list[dict[str, Any]]:
    """Each readable table: its next roll, rolls in progress, failures, traffic, replicas, links."""
    store = catalog.store
    latest = store.latest_roll_attempts()
    activity = store.table_activity(
        [t.id for t in readable], now - COMMIT_RATE_WINDOW, now - DEAD_LETTER_WINDOW
    )
    changes = store.latest_schema_changes([t.id for t in readable])
    tables = []
    for table in readable:
        traffic = activity[table.id]
        change = changes.get(table.id)
        parts = store.list_partitions(table.id, [PartitionState.STREAMING, PartitionState.ROLLING])
        rolls = {r.partition_id: r for r in store.list_rolls(table.id, unfinished=True)}
        streaming = [p for p in parts if p.state is PartitionState.STREAMING]
        due = sorted((due_time(table, p), p) for p in streaming)
        last = latest.get(table.id)
        failed = last if last is not None and last.outcome is RollOutcome.FAILED else None
        tables.append(
            {
                "table": str(table.name),
                "metastore": store.name,
                "kind": table.kind.value,
                "mode": table.mode.value,
                "roll_every": format_duration(table.roll_every),
                "lateness": format_duration(table.lateness),
                "open_partitions": [iso(p.value) for p in streaming],
                "next_roll": _iso(_next_roll(due[0][0] if due else None, failed, rolls.values(), now)),
                "next_partition": iso(due[0][1].value) if due else None,
                "overdue_seconds": round(max(0.0, (now - due[0][0]).total_seconds()), 3) if due else 0.0,
                "rolling": [_rolling(p, rolls.get(p.id)) for p in parts if p.state is PartitionState.ROLLING],
                "failures": failed.failures if failed is not None else 0,
                "last_error": failed.error if failed is not None else None,
                "retry_at": _iso(failed.retry_at) if failed is not None else None,
                "failed_partition": _iso(failed.partition_value) if failed is not None else None,
                "iceberg": _iceberg(table),
                "newest_commit": _iso(traffic.newest_commit),
                "freshness_seconds": _seconds(traffic.newest_commit, now),
                "commits_per_minute": round(
                    traffic.recent_commits / (COMMIT_RATE_WINDOW.total_seconds() / 60), 2
                ),
                "dead_letters_last_hour": traffic.dead_letter_rows,
                "replicas": replicas.get(table.id, []),
                # per secondary, as streampart_replication_missing_partitions and _lag_seconds say
                "replication": [
                    {"cluster": cluster, "missing_partitions": missing, "lag_seconds": round(lag, 3)}
                    for cluster, (lag, missing) in sorted(
                        (backlog(catalog, table, now) if table.id in replicas else {}).items()
                    )
                ],
                "links": sorted(links_to.get(table.id, [])),
                "retention": _retention(catalog, table),
                "companion_of": _main_table(table),
                "columns": len(table.columns),
                "schema_evolution": table.schema_evolution.value,
                "last_schema_change": None
                if change is None or change.version is None
                else {
                    "version": change.version,
                    "change": change.description,
                    "source": change.source,
                    "at": _iso(change.done_at or change.at),
                },
            }
        )
        if timeline:
            tables[-1]["partitions"] = _timeline(store, table, now, timeline, replicas.get(table.id, []))
    return tables


def _next_roll(
    due: datetime | None, failed: RollAttempt | None, rolls: Iterable[Roll], now: datetime
) -> datetime | None:
    """When the table's next roll starts: its first due partition's time, not before a failed
    roll's retry time; sooner if a roll is in progress, or resumes once its lease lapses."""
    next_roll = due
    if failed is not None and failed.retry_at is not None:
        next_roll = failed.retry_at if next_roll is None else max(next_roll, failed.retry_at)
    for r in rolls:  # in progress, or resumed once its lease lapses
        resume = max(now, r.lease_until or now)
        next_roll = resume if next_roll is None else min(next_roll, resume)
    return next_roll


def _rolling(p: Partition, roll: Roll | None) -> dict[str, Any]:
    """A partition being rolled, and its roll's step and owner (if its roll was found)."""
    return {
        "partition": iso(p.value),
        "roll": roll.id if roll is not None else None,
        "step": roll.state.value if roll is not None else None,
        "owner": roll.owner if roll is not None else None,
        "lease_until": _iso(roll.lease_until) if roll is not None else None,
    }


def _recent_rolls(store: Any, names: dict[int, str], limit: int, filtered: bool) -> list[dict[str, Any]]:
    """The newest roll attempts (``filtered``: of the readable tables, ``names``, only)."""
    return [
        {
            "table": names.get(a.table_id, f"#{a.table_id}"),
            "metastore": store.name,
            "partition": _iso(a.partition_value),
            "outcome": a.outcome.value,
            "started_at": iso(a.started_at),
            "finished_at": iso(a.finished_at),
            "seconds": round(a.seconds, 3),
            "rows": a.rows,
            "resumed": a.resumed,
            "owner": a.owner,
            "epoch": a.epoch,
            "error": a.error,
            "retry_at": _iso(a.retry_at),
        }
        # filtered: a reader sees the attempts of its tables only (up to ``limit`` of the newest)
        for a in store.list_roll_attempts(limit=10 * limit if filtered else limit)
        if not filtered or a.table_id in names
    ][:limit]


def _retention(catalog: Catalog, table: Table) -> dict[str, Any]:
    """How long the table keeps its standard partitions, when the next expires, what expired."""
    retain = catalog.retention.of(table)
    partitions = catalog.store.list_partitions(table.id, [PartitionState.STANDARD, PartitionState.EXPIRED])
    kept = [p for p in partitions if p.state is PartitionState.STANDARD]
    expired = [p for p in partitions if p.state is PartitionState.EXPIRED]
    return retention_info(table, retain, kept, expired)


def _main_table(table: Table) -> str | None:
    """The main table a dead-letter or late-data table belongs to (by its name); None for a main table."""
    if table.kind is TableKind.MAIN:
        return None
    suffix = COMPANION_SUFFIX[table.kind]
    name = table.name.table
    main = name[: -len(suffix)] if name.endswith(suffix) else name
    return str(TableName(namespace=table.name.namespace, table=main))


def _role(
    holder: str, heartbeat_at: datetime, leader: dict[str, Any] | None, config: SchedulerConfig, now: datetime
) -> str:
    """leader (holds the live lease), standby (heard from within a lease's TTL), or silent (gone)."""
    if leader is not None and leader["live"] and leader["holder"] == holder:
        return "leader"
    return "standby" if now - heartbeat_at < config.lease_ttl else "silent"


def _timeline(
    store: Any, table: Table, now: datetime, newest: int, clusters: list[str]
) -> list[dict[str, Any]]:
    """The table's ``newest`` partitions, oldest first: each one's period, state, roll and lateness."""
    parts: list[Partition] = store.list_partitions(table.id, newest=newest)
    rolls: dict[int, Roll] = {
        r.partition_id: r for r in store.list_rolls(partition_ids=[p.id for p in parts])
    }
    copied: dict[datetime, list[str]] = {}
    for cluster in clusters:
        for value in store.present_values(table.id, cluster):
            copied.setdefault(value, []).append(cluster)
    out = []
    for p in parts:
        roll = rolls.get(p.id)
        due = due_time(table, p)
        done = roll is not None and roll.state is RollState.DONE
        out.append(
            {
                "partition": iso(p.value),
                "end": iso(table.period_end(p.value)),
                "state": p.state.value,
                "opened_at": iso(p.opened_at),
                "rolled_at": _iso(p.rolled_at),
                "due_at": iso(due),
                # due but not rolled: the roll is late (the daemon is down, or the table fails)
                "late": p.state is not PartitionState.STANDARD and due <= now,
                "roll_started_at": None if roll is None else iso(roll.started_at),
                "roll_seconds": None
                if roll is None
                else _seconds(roll.started_at, roll.finished_at if done else now),
                "rows": p.rows,
                "replicated_on": sorted(copied.get(p.value, [])),
            }
        )
    return out
