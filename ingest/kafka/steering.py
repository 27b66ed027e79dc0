"""Steering a running ingest job: operators' requests applied between batches, and its status.

An operator pauses or resumes one topic of a named job (``streampart ingest pause JOB TOPIC``):
the request is a row in the metastore (:mod:`metastore.store.ingest_jobs`). The job polls its
pending requests about once a second, applies each to the source's control file (``paused``, which
the source honours at the next trigger: a paused topic's offsets stand still, nothing of it is read,
the other topics go on) and stamps the request done with the outcome. A pause therefore takes effect
from the batch after the one in flight, and survives a restart (the control file is in the
checkpoint). Exactly-once is untouched: a pause only holds offsets back.

After each batch (and every few seconds while it waits) the job publishes its status per topic —
reading or paused, the committed and the latest offsets, the lag in records and in seconds, the
refusal of the table it routes to — for ``streampart ingest status``, the HTTP API, the status page
and its ``/metrics``. The metastore being unreachable here is logged and never stops the
ingest.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ingest.kafka.control import Control, read_control, update_control
from ingest.kafka.offsets import TP, OffsetMap, load_from, load_offsets, reset_mark
from ingest.kafka.routes import RouteError, Routes
from metastore.catalog import Catalog
from metastore.errors import NotFoundError
from metastore.models import IngestAction, IngestRequest
from metastore.store import IngestJobStore

log = logging.getLogger(__name__)


# Kafka's own ranges: a partition is a 32-bit signed number, an offset a 64-bit one.
MAX_PARTITION = 2**31 - 1
MAX_OFFSET = 2**63 - 1


def _shown(text: str) -> str:
    """``text`` quoted for a one-line message, cut short if long."""
    return repr(text if len(text) <= 60 else text[:60] + "…")


def _offsets(text: str) -> dict[int, int]:
    """JSON offsets ``{"partition": offset}``: partitions as decimal numbers 0..MAX_PARTITION, offsets
    as JSON whole numbers 0..MAX_OFFSET (not 1e3, 2.0, true, nor a numeric string)."""

    def refuse(_: str) -> Any:
        raise ValueError

    problem = (
        f'offsets must be JSON like {{"0": 42, "1": 7}}: partitions 0 to {MAX_PARTITION}, offsets whole '
        f"numbers 0 to {MAX_OFFSET}; got {_shown(text)}"
    )
    try:
        given = json.loads(text, parse_float=refuse, parse_constant=refuse)
    except (ValueError, RecursionError):
        raise ValueError(problem) from None
    if not isinstance(given, dict) or not given:
        raise ValueError(problem)
    out: dict[int, int] = {}
    for p, o in given.items():
        if not (p.isascii() and p.isdigit() and len(p) <= 10 and int(p) <= MAX_PARTITION):
            raise ValueError(problem)
        if type(o) is not int or not 0 <= o <= MAX_OFFSET:
            raise ValueError(problem)
        out[int(p)] = o
    return out


def reset_target(text: str) -> str:
    """A reset's target checked and normalized: earliest, latest, an ISO-8601 time (UTC if it names no
    zone), or JSON offsets ``{"partition": offset}`` within Kafka's ranges. Raises ValueError saying
    what it must be, in one line."""
    if text in ("earliest", "latest"):
        return text
    if text.lstrip().startswith("{"):
        return json.dumps({str(p): o for p, o in _offsets(text).items()})
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f'takes earliest, latest, an ISO-8601 time or JSON offsets {{"0": 42}}; got {_shown(text)}'
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).isoformat()


def request_change(
    store: IngestJobStore,
    job: str,
    topic: str,
    action: IngestAction,
    requested_by: str,
    target: str | None = None,
) -> tuple[IngestRequest, bool]:
    """Record an operator's request to ``job`` (the CLI's and the HTTP API's one way in); with
    whether the job has ever run against this metastore (if not, the request waits for it).

    Raises:
        ValueError: a reset without a valid target (the message says what it must be).
    """
    target = reset_target(target or "") if action is IngestAction.RESET else None
    try:
        store.ingest_statuses(job)
        known = True
    except NotFoundError:
        known = False
    return store.request_ingest(job, topic, action, requested_by, target), known


def job_reports(store: IngestJobStore, job: str | None = None, requests: int = 10) -> list[dict[str, Any]]:
    """Each job's published status with its ``requests`` newest requests (``job``'s only: NotFoundError
    if it never ran), for ``streampart ingest status``, the HTTP API and the status page."""
    return [
        {
            **s.model_dump(mode="json"),
            "requests": [r.model_dump(mode="json") for r in store.ingest_requests(s.job, requests)],
        }
        for s in store.ingest_statuses(job)
    ]


def _published_routes(report: dict[str, Any]) -> tuple[Routes, str | None] | None:
    """The routes and dead-letter table a job's status was published with; None if it names none (a
    job of an older version) or they do not read as routes."""
    status = report.get("status")
    specs = status.get("route_specs") if isinstance(status, dict) else None
    if not isinstance(specs, list) or not specs:
        return None
    try:
        routes = Routes.from_json(specs)
    except (RouteError, TypeError, ValueError):
        return None
    dead_letter = status.get("dead_letter_table") if isinstance(status, dict) else None
    return routes, dead_letter if isinstance(dead_letter, str) else None


def job_namespaces(report: dict[str, Any]) -> set[str] | None:
    """The namespaces a job can write to, decided from the routes it last published (every topic its
    patterns may match, seen or not, and its dead-letter table where a record may be unrouted); None
    where that is open-ended (a template whose namespace a topic or a record's field names) or not
    known (the job has not published its routes)."""
    found = _published_routes(report)
    reached = found[0].namespaces(found[1]) if found is not None else None
    return None if reached is None else set(reached)


def topic_namespaces(report: dict[str, Any], topic: str) -> set[str] | None:
    """The namespaces ``topic``'s records can reach under the routes the job last published, whether
    the job has read the topic yet or not; None where that is open-ended, not known, or no route takes
    the topic (:meth:`ingest.kafka.routes.Routes.namespaces_of_topic`)."""
    found = _published_routes(report)
    reached = found[0].namespaces_of_topic(topic, found[1]) if found is not None else None
    return None if reached is None else set(reached)


def _apply(control: Control, request: IngestRequest, routes: Routes) -> tuple[Control, str]:
    """``control`` changed by ``request``, and the outcome; a reset's outcome is "" (it is done when a
    batch has moved the position: :meth:`Steering.resets_done`)."""
    topic = request.topic
    known = "" if routes.route_of(topic) is not None else f" (no route of this job takes topic {topic} now)"
    if request.action is IngestAction.RESET:
        if any(r[0] == request.id for r in control.resets):
            return control, ""
        try:
            target = reset_target(str(request.target))
        except ValueError as exc:
            return control, f"refused: the reset's target {exc}"
        reset = (request.id, topic, target)
        return dataclasses.replace(control, resets=(*control.resets, reset)), ""
    if request.action is IngestAction.PAUSE:
        if topic in control.paused:
            return control, f"topic {topic} was paused already{known}"
        return dataclasses.replace(control, paused=control.paused | {topic}), f"paused topic {topic}{known}"
    if topic not in control.paused:
        return control, f"topic {topic} was not paused{known}"
    return dataclasses.replace(control, paused=control.paused - {topic}), f"resumed topic {topic}{known}"


_EARLIER = "applied by an earlier batch (what it moved went unrecorded)"


def _moved(topic: str, moved: OffsetMap, was_at: OffsetMap) -> str:
    """What a reset applied by a batch moved: per partition of ``topic`` from where to where, and how
    many records that skipped or read again."""
    parts = []
    for tp in sorted(tp for tp in moved if tp[0] == topic):
        was, now = was_at.get(tp, 0), moved[tp]
        what = f"{now - was} records skipped" if now >= was else f"{was - now} records read again"
        parts.append(f"{tp[0]}-{tp[1]} {was} → {now} ({what})")
    return "; ".join(parts) or "no partition"


class Steering:
    """The job's side of steering: see the module docstring."""

    def __init__(
        self, catalog: Catalog, job: str, control_file: str, dead_letter_table: str | None = None
    ) -> None:
        self.store = catalog.store
        self.job = job
        self.control_file = control_file
        self.dead_letter_table = dead_letter_table  # published: where unrouted records go
        self._failing = False

    def _quietly(self, what: str, exc: Exception) -> None:
        if not self._failing:
            log.warning(
                "%s for job %s failed (%s: %s); the ingest goes on", what, self.job, type(exc).__name__, exc
            )
        self._failing = True

    def apply(self, routes: Routes) -> list[str]:
        """Apply the job's pending requests; the outcome of each."""
        try:
            pending = self.store.pending_ingest_requests(self.job)
        except Exception as exc:  # steering is not on the data path
            self._quietly("reading the requests", exc)
            return []
        outcomes: list[str] = []
        for request in pending:
            outcome = self._change(request, routes)
            if not outcome:  # a reset: recorded once a batch applied it
                continue
            log.info("request %s of %s: %s", request.id, request.requested_by, outcome)
            try:
                self.store.finish_ingest_request(request.id, outcome)
            except Exception as exc:
                self._quietly("recording a request as done", exc)
                return outcomes  # applied (idempotent): recorded on the next poll
            outcomes.append(outcome)
        self._failing = False
        return outcomes

    def _change(self, request: IngestRequest, routes: Routes) -> str:
        outcome = [""]

        def change(control: Control) -> Control:
            new, outcome[0] = _apply(control, request, routes)
            return new

        update_control(self.control_file, change)
        return outcome[0]

    def resets_done(self, offsets: dict[str, Any], before: Callable[[], dict[str, Any]]) -> list[str]:
        """After a batch committed whose end ``offsets`` (as the source wrote them) carry the newest
        reset applied: record the resets done, with what they skipped or read again; ``before()``: the
        previous batch's offsets (where this one would have started). A reset whose recording failed
        (the metastore away) stays in the control file, never applied twice (the offsets' mark says it
        was), and is recorded after a later batch, without the detail of what it moved."""
        mark = reset_mark(offsets)
        done = [r for r in read_control(self.control_file).resets if r[0] <= mark] if mark else []
        if not done:
            return []
        previous = before()
        moved, was_at, applied_before = load_from(offsets), load_offsets(previous), reset_mark(previous)
        outcomes, recorded = [], set()
        for request, topic, target in done:
            outcome = f"reset topic {topic} to {target}: " + (
                _moved(topic, moved, was_at) if request > applied_before else _EARLIER
            )
            log.warning("request %s: %s", request, outcome)
            try:
                self.store.finish_ingest_request(request, outcome)
            except Exception as exc:
                self._quietly("recording a reset as done", exc)
                continue
            recorded.add(request)
            outcomes.append(outcome)
        update_control(
            self.control_file,
            lambda c: dataclasses.replace(c, resets=tuple(r for r in c.resets if r[0] not in recorded)),
        )
        return outcomes

    def publish(
        self,
        routes: Routes,
        committed: OffsetMap,
        latest: OffsetMap,
        waiting: dict[TP, float | None],
        refused: dict[str, str],
        batches: int,
        failure: str | None = None,
    ) -> dict[str, Any]:
        """Publish the job's status (see :func:`job_status`); returns it."""
        control = read_control(self.control_file)
        status = job_status(
            control, routes, committed, latest, waiting, refused, batches, failure, self.dead_letter_table
        )
        try:
            self.store.publish_ingest_status(self.job, status)
        except Exception as exc:
            self._quietly("publishing the status", exc)
        return status


def _lag_seconds(waiting: list[float | None], now: float) -> float | None:
    """The age of the oldest waiting record of a topic's lagging partitions (``waiting``: when each one's
    first waiting record was written; None: unknown); 0 with none lagging."""
    if any(w is None for w in waiting):
        return None
    return round(max(0.0, now - min(w for w in waiting if w is not None)), 1) if waiting else 0.0


def job_status(
    control: Control,
    routes: Routes,
    committed: OffsetMap,
    latest: OffsetMap,
    waiting: dict[TP, float | None],
    refused: dict[str, str],
    batches: int,
    failure: str | None,
    dead_letter_table: str | None = None,
) -> dict[str, Any]:
    """Per topic the job has read or routes: state, offsets, lag in records and in seconds (the
    oldest waiting record's age: :mod:`ingest.kafka.lag`), its table's refusal; and the routes
    themselves (``route_specs``) with the job's dead-letter table, from which the HTTP API decides
    who may steer a topic (:func:`topic_namespaces`)."""
    now = datetime.now(UTC)
    topics: dict[str, Any] = {}
    names = {t for t, _ in committed} | {t for t, _ in latest} | set(routes.topics)
    for topic in sorted(names):
        parts = sorted({p for t, p in committed if t == topic} | {p for t, p in latest if t == topic})
        behind = {p: latest.get((topic, p), 0) - committed.get((topic, p), 0) for p in parts}
        lagging = [p for p, n in behind.items() if n > 0]
        table = routes.table_of_topic(topic)
        topics[topic] = {
            "state": "paused" if topic in control.paused else "reading",
            "table": table,
            "committed": {str(p): committed.get((topic, p)) for p in parts},
            "latest": {str(p): latest.get((topic, p)) for p in parts},
            "lag_records": sum(behind[p] for p in lagging),
            "lag_seconds": _lag_seconds([waiting.get((topic, p)) for p in lagging], now.timestamp()),
            "last_error": refused.get(table) if table else None,
        }
    return {
        "at": now.isoformat(),
        "batches": batches,
        "routes": str(routes),
        "route_specs": routes.to_json(),
        "dead_letter_table": dead_letter_table,
        "paused": sorted(control.paused),
        "refused": refused,
        "failure": failure,
        "topics": topics,
    }
