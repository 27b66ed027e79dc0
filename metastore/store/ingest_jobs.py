"""Kafka ingest jobs: operators' requests to a running job, and the status each job publishes.

A request (pause or resume a topic of job J) is a row; the job polls its pending ones between
batches, applies each and stamps it done with the outcome, so the change is recorded whoever made it
(the CLI, the HTTP API) and whenever the job applied it. The status is one row per job, replaced
after each batch. Neither takes part in exactly-once: offsets stay in the job's checkpoint.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from metastore import schema as s
from metastore.errors import NotFoundError
from metastore.models import IngestAction, IngestJobStatus, IngestRequest
from metastore.store.engine import Database, _db, _new_id, _now, _out


def request_from_row(row: Any) -> IngestRequest:
    m = row._mapping
    return IngestRequest(
        id=m["id"],
        job=m["job"],
        topic=m["topic"],
        action=IngestAction(m["action"]),
        target=m["target"],
        requested_by=m["requested_by"],
        requested_at=_out(m["requested_at"]),
        done_at=_out(m["done_at"]),
        outcome=m["outcome"],
    )


class IngestJobStore(Database):
    """Requests to Kafka ingest jobs, and their published status."""

    def request_ingest(
        self, job: str, topic: str, action: IngestAction, requested_by: str, target: str | None = None
    ) -> IngestRequest:
        """Record a request to ``job``; it applies it between batches."""
        now = _now()
        with self.tx() as conn:
            new_id = _new_id(
                conn.execute(
                    sa.insert(s.ingest_requests).values(
                        job=job,
                        topic=topic,
                        action=action.value,
                        target=target,
                        requested_by=requested_by,
                        requested_at=_db(now),
                    )
                )
            )
            row = conn.execute(sa.select(s.ingest_requests).where(s.ingest_requests.c.id == new_id)).one()
        return request_from_row(row)

    def pending_ingest_requests(self, job: str) -> list[IngestRequest]:
        """``job``'s requests not applied yet, oldest first."""
        c = s.ingest_requests.c
        with self.read_tx() as conn:
            rows = conn.execute(
                sa.select(s.ingest_requests).where(c.job == job, c.done_at.is_(None)).order_by(c.id)
            ).all()
        return [request_from_row(r) for r in rows]

    def finish_ingest_request(self, request_id: int, outcome: str, now: datetime | None = None) -> None:
        c = s.ingest_requests.c
        with self.tx() as conn:
            conn.execute(
                sa.update(s.ingest_requests)
                .where(c.id == request_id, c.done_at.is_(None))
                .values(done_at=_db(now or _now()), outcome=outcome[:1024])
            )

    def ingest_requests(self, job: str, limit: int = 50) -> list[IngestRequest]:
        """``job``'s newest requests, newest first."""
        c = s.ingest_requests.c
        with self.read_tx() as conn:
            rows = conn.execute(
                sa.select(s.ingest_requests).where(c.job == job).order_by(c.id.desc()).limit(limit)
            ).all()
        return [request_from_row(r) for r in rows]

    def prune_ingest_requests(self, before: datetime) -> int:
        """Forget requests applied before ``before`` (pending ones stay, however old)."""
        c = s.ingest_requests.c
        with self.tx() as conn:
            return int(conn.execute(sa.delete(s.ingest_requests).where(c.done_at < _db(before))).rowcount)

    def publish_ingest_status(self, job: str, status: dict[str, Any], now: datetime | None = None) -> None:
        """Replace ``job``'s published status."""
        values = {"updated_at": _db(now or _now()), "status": status}
        with self.tx() as conn:
            done = conn.execute(
                sa.update(s.ingest_jobs).where(s.ingest_jobs.c.job == job).values(**values)
            ).rowcount
            if not done:
                conn.execute(sa.insert(s.ingest_jobs).values(job=job, **values))

    def ingest_statuses(self, job: str | None = None) -> list[IngestJobStatus]:
        """Every job's published status (or ``job``'s: NotFoundError if it never published one)."""
        query = sa.select(s.ingest_jobs).order_by(s.ingest_jobs.c.job)
        if job is not None:
            query = query.where(s.ingest_jobs.c.job == job)
        with self.read_tx() as conn:
            rows = conn.execute(query).all()
        if job is not None and not rows:
            raise NotFoundError(f"no ingest job {job} has run against this metastore")
        return [
            IngestJobStatus(job=r.job, updated_at=_out(r.updated_at), status=dict(r.status)) for r in rows
        ]
