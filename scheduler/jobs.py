"""What the roll daemon's APScheduler jobs share: their settings, and how one is planned or dropped.

The daemon's periodic jobs (heartbeat, sync, observe, housekeeping, replication) and its
one-shot jobs (a partition's roll in :mod:`scheduler.roll_jobs`, a table's copies in
:mod:`scheduler.replication_jobs`) all run with :data:`JOB`; the one-shot ones are planned by
id, so planning a job again replaces it rather than adding a second.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from apscheduler.jobstores.base import JobLookupError
from apscheduler.triggers.date import DateTrigger

# Why these job settings (APScheduler's defaults would be wrong for rolls and copies):
# - misfire_grace_time=None: a job whose time passed while every worker was busy (or the
#   machine was suspended) must still run, however late; a roll never happens "too late to
#   bother", and a dropped date job would leave its partition open until the next sync.
# - coalesce=True: periodic jobs (heartbeat, sync, housekeeping) that missed several runs run
#   once, not in a burst; a burst of heartbeats or syncs achieves nothing more than one.
# - max_instances=1: one run of a job at a time; together with the job id per partition and
#   the per-table lock, a retry can never overlap the attempt it retries.
JOB: dict[str, Any] = {"misfire_grace_time": None, "coalesce": True, "max_instances": 1}


def plan(
    scheduler: Any,
    job: Callable[..., None],
    at: datetime,
    args: Sequence[Any],
    job_id: str,
    name: str,
    executor: str = "default",
) -> None:
    """Have ``job(*args)`` run once at ``at`` as ``job_id`` (replacing its plan), on the worker pool
    or on another of the daemon's executors."""
    scheduler.add_job(
        job,
        DateTrigger(run_date=at, timezone=UTC),
        args=list(args),
        id=job_id,
        name=name,
        executor=executor,
        replace_existing=True,
        **JOB,
    )


def remove_jobs(scheduler: Any, prefix: str, keep: Collection[str] = ()) -> None:
    """Drop the planned jobs whose id starts with ``prefix``, but those in ``keep``; a running
    one runs on (it stops at its next step if it checks)."""
    for job in scheduler.get_jobs():
        if job.id.startswith(prefix) and job.id not in keep:
            with contextlib.suppress(JobLookupError):  # it ran or was removed meanwhile
                job.remove()
