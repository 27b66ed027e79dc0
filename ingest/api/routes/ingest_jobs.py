"""Steering Kafka ingest jobs over HTTP: ``/v1/admin/ingest/jobs/…`` (issue 29, part 3).

The twin of ``streampart ingest status|pause|resume|reset`` for operators and non-Python clients,
through the same calls (:mod:`ingest.kafka.steering`): a request is a row in the metastore that the
running job applies between batches and stamps done with its outcome, so ``202 Accepted`` answers
with the request, and ``GET …/jobs/{job}`` shows when it was applied and what it moved.

Who may do what is decided from the routes the job last published (:mod:`ingest.kafka.routes`),
never from the topics it happens to have read: pausing, resuming or resetting a topic needs ``admin``
on every namespace that topic's records can reach under those routes (its route's table, and the
job's dead-letter table where a record may be unrouted), whether the job has seen the topic yet or
not; reading a job's status needs it on every namespace any of its routes can reach. Where that is
open-ended (a table template whose namespace a topic or a record's field names) or cannot be decided
(the job has not published its routes, or no route takes the topic) only ``admin:*`` may. Listing
shows the jobs the token may read.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ingest.api.auth import Principal
from ingest.api.deps import Caller, State
from ingest.api.errors import ApiError
from ingest.api.models import IngestJobReport, IngestRequestInfo, ResetTopic, error_responses
from ingest.kafka.steering import job_namespaces, job_reports, request_change, topic_namespaces
from metastore.errors import NotFoundError
from metastore.models import IngestAction, Permission

router = APIRouter(tags=["ingest jobs"])

_BASE = "/v1/admin/ingest/jobs"
_TOPIC = _BASE + "/{job}/topics/{topic}"


def _admin_on(who: Principal, namespaces: set[str] | None) -> bool:
    """Whether ``who`` has admin on each of ``namespaces``; None (or none: nothing decided) needs
    ``admin:*``."""
    if not namespaces:
        return who.allows(Permission.ADMIN, "*")
    return all(who.allows(Permission.ADMIN, ns) for ns in namespaces)


def _may_steer(who: Principal, report: dict[str, Any] | None) -> bool:
    return _admin_on(who, job_namespaces(report) if report is not None else None)


def _report(st: Any, job: str) -> dict[str, Any] | None:
    try:
        return job_reports(st.catalog.store, job)[0]
    except NotFoundError:
        return None


def _refuse(who: Principal, namespaces: set[str] | None, what: str, unknown: str) -> None:
    """403 unless ``who`` has admin on each of ``namespaces`` (None: open-ended, ``admin:*``)."""
    if _admin_on(who, namespaces):
        return
    scope = ", ".join(f"admin:{ns}" for ns in sorted(namespaces)) if namespaces else "admin:*"
    why = "" if namespaces else f" ({unknown})"
    raise ApiError(
        403, "forbidden", f"token {who.name!r} lacks the scope {scope} to {what}{why}", "Authorization"
    )


def _require(who: Principal, job: str, report: dict[str, Any] | None) -> None:
    namespaces = job_namespaces(report) if report is not None else None
    _refuse(who, namespaces, f"steer job {job}", "the tables its routes write to are open-ended or not known")


def _require_topic(who: Principal, job: str, topic: str, report: dict[str, Any] | None) -> None:
    namespaces = topic_namespaces(report, topic) if report is not None else None
    _refuse(
        who, namespaces, f"steer topic {topic} of job {job}",
        "where its routes send the topic is open-ended or not known",
    )  # fmt: skip


@router.get(
    _BASE,
    response_model=list[IngestJobReport],
    responses=error_responses(401),
    summary="The Kafka ingest jobs the token may steer, each as it last published itself",
)
def list_jobs(who: Caller, st: State) -> list[dict[str, Any]]:
    """Per job and topic: reading or paused, lag in records and in seconds, last error; with the
    job's newest requests."""
    return [r for r in job_reports(st.catalog.store) if _may_steer(who, r)]


@router.get(
    _BASE + "/{job}",
    response_model=IngestJobReport,
    responses=error_responses(401, 403, 404),
    summary="One Kafka ingest job's status and newest requests",
)
def get_job(job: str, who: Caller, st: State) -> dict[str, Any]:
    report = _report(st, job)
    _require(who, job, report)
    if report is None:
        raise NotFoundError(f"no ingest job {job} has run against this metastore")
    return report


def _request(
    who: Principal, st: Any, job: str, topic: str, action: IngestAction, target: str | None = None
) -> dict[str, Any]:
    _require_topic(who, job, topic, _report(st, job))
    try:
        request, known = request_change(st.catalog.store, job, topic, action, who.name, target)
    except ValueError as exc:
        raise ApiError(400, "bad_request", f"to: {exc}", "to") from None
    return {**request.model_dump(), "job_known": known}


_ACCEPTED: dict[str, Any] = {
    "status_code": 202,
    "response_model": IngestRequestInfo,
    "responses": error_responses(400, 401, 403, 422),
}


@router.post(_TOPIC + "/pause", summary="Pause one topic of a job", **_ACCEPTED)
def pause_topic(job: str, topic: str, who: Caller, st: State) -> dict[str, Any]:
    """Nothing more of the topic is read until it is resumed: its offsets stand still, the other
    topics go on. The job applies it before its next batch and records when; it survives a restart."""
    return _request(who, st, job, topic, IngestAction.PAUSE)


@router.post(_TOPIC + "/resume", summary="Resume a paused topic of a job", **_ACCEPTED)
def resume_topic(job: str, topic: str, who: Caller, st: State) -> dict[str, Any]:
    """The topic is read again from where it stood."""
    return _request(who, st, job, topic, IngestAction.RESUME)


@router.post(
    _TOPIC + "/reset", summary="Move a topic's read position: an explicit skip or replay", **_ACCEPTED
)
def reset_topic(job: str, topic: str, body: ResetTopic, who: Caller, st: State) -> dict[str, Any]:
    """The job's next batch reads the topic from the new position: records before it are skipped,
    records after it that were ingested already land again (as new rows). Once applied, the request's
    outcome says what moved per partition and how many records that skipped or read again."""
    return _request(who, st, job, topic, IngestAction.RESET, body.to)
