"""What ``streampart scheduler status`` shows: the leaders, each table's next roll, recent rolls.

Read from the metastores alone, so it works from any host and whether or not a daemon runs. The
daemons hold one leadership lease per metastore (scheduler.federation_daemons): ``metastores``
shows each one's leader (or why it did not answer); ``leader`` is the primary's, ``tables`` and
``recent_rolls`` span every metastore that answered (each table names its metastore).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from metastore import clock
from metastore.catalog import Catalog
from metastore.durations import format_duration
from metastore.models import PRIMARY, PartitionState, RollOutcome, iso
from scheduler.config import SchedulerConfig
from scheduler.roll import due_time


def _iso(ts: datetime | None) -> str | None:
    return None if ts is None else iso(ts)


def scheduler_status(
    catalog: Catalog, config: SchedulerConfig | None = None, now: datetime | None = None, limit: int = 20
) -> dict[str, Any]:
    """The daemon's state in the shape of ``streampart scheduler status --json``."""
    config = config or SchedulerConfig()
    now = now or clock.now()
    found = catalog.router.fan_out(lambda store: _one(catalog.on(store.name), config, now, limit))
    metastores = []
    for name in catalog.router.names():
        answer = found.answers.get(name)
        leader = None if answer is None else answer["leader"]
        metastores.append({"metastore": name, "leader": leader, "error": found.missing.get(name)})
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
        "recent_rolls": recent[:limit],
    }


def _one(catalog: Catalog, config: SchedulerConfig, now: datetime, limit: int) -> dict[str, Any]:
    """The leader, tables and recent rolls of the metastore ``catalog`` is bound to."""
    store = catalog.store
    lease = store.get_lease(config.lease_name)
    leader = None
    if lease is not None:
        leader = {
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
    latest = store.latest_roll_attempts()
    names: dict[int, str] = {}
    tables = []
    for table in store.list_tables():
        names[table.id] = str(table.name)
        parts = store.list_partitions(table.id, [PartitionState.STREAMING, PartitionState.ROLLING])
        rolls = {r.partition_id: r for r in store.list_rolls(table.id, unfinished=True)}
        streaming = [p for p in parts if p.state is PartitionState.STREAMING]
        due = sorted((due_time(table, p), p) for p in streaming)
        last = latest.get(table.id)
        failing = last is not None and last.outcome is RollOutcome.FAILED
        next_roll = due[0][0] if due else None
        if failing and last is not None and last.retry_at is not None:
            next_roll = last.retry_at if next_roll is None else max(next_roll, last.retry_at)
        for r in rolls.values():  # in progress, or resumed once its lease lapses
            resume = max(now, r.lease_until or now)
            next_roll = resume if next_roll is None else min(next_roll, resume)
        tables.append(
            {
                "table": str(table.name),
                "metastore": store.name,
                "kind": table.kind.value,
                "mode": table.mode.value,
                "roll_every": format_duration(table.roll_every),
                "lateness": format_duration(table.lateness),
                "open_partitions": [iso(p.value) for p in streaming],
                "next_roll": _iso(next_roll),
                "next_partition": iso(due[0][1].value) if due else None,
                "overdue_seconds": round(max(0.0, (now - due[0][0]).total_seconds()), 3) if due else 0.0,
                "rolling": [
                    {
                        "partition": iso(p.value),
                        "roll": rolls[p.id].id if p.id in rolls else None,
                        "step": rolls[p.id].state.value if p.id in rolls else None,
                        "owner": rolls[p.id].owner if p.id in rolls else None,
                        "lease_until": _iso(rolls[p.id].lease_until) if p.id in rolls else None,
                    }
                    for p in parts
                    if p.state is PartitionState.ROLLING
                ],
                "failures": last.failures if failing and last is not None else 0,
                "last_error": last.error if failing and last is not None else None,
                "retry_at": _iso(last.retry_at) if failing and last is not None else None,
            }
        )
    recent = [
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
        for a in store.list_roll_attempts(limit=limit)
    ]
    return {"leader": leader, "tables": tables, "recent_rolls": recent}
