"""Kafka ingest jobs as the metastore keeps them: what an operator asked of a job, and its status."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict


class IngestAction(StrEnum):
    """What an operator may ask of a running ingest job, for one topic."""

    PAUSE = "pause"  # read nothing more of the topic: its offsets stand still
    RESUME = "resume"  # read it again from where it stood
    RESET = "reset"  # move its position (target: earliest, latest, an ISO time, or {"partition": offset})


class IngestRequest(BaseModel):
    """One request to a job: made by ``requested_by``; ``done_at`` when the job applied it."""

    model_config = ConfigDict(frozen=True)

    id: int
    job: str
    topic: str
    action: IngestAction
    target: str | None = None  # a reset's
    requested_by: str
    requested_at: datetime
    done_at: datetime | None = None
    outcome: str | None = None


class IngestJobStatus(BaseModel):
    """A job's status as it last published it: per topic its state, lag and last error."""

    model_config = ConfigDict(frozen=True)

    job: str
    updated_at: datetime
    status: dict[str, Any]
