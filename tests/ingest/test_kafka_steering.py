"""Steering's bookkeeping without a broker: a reset's recording survives the metastore being away.

The job itself (pause, resume and reset applied by a running job, over the CLI and the HTTP API) is
tested end to end in tests/ingest/test_kafka_routes.py.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ingest.kafka.control import Control, read_control, write_control
from ingest.kafka.routes import Route, Routes
from ingest.kafka.steering import Steering, job_namespaces, job_reports, topic_namespaces
from metastore.catalog import Catalog
from metastore.models import IngestAction


def _sqlite_file(catalog: Catalog) -> str:
    return str(catalog.store.url).removeprefix("sqlite:///")


def test_a_reset_whose_recording_failed_is_recorded_after_a_later_batch_and_never_applied_twice(
    sqlite_catalog: Catalog, tmp_path: Path
) -> None:
    store = sqlite_catalog.store
    request = store.request_ingest("j-rec", "t", IngestAction.RESET, "ops", "earliest")
    control = str(tmp_path / "control.json")
    write_control(control, Control(topics=frozenset({"t"}), resets=((request.id, "t", "earliest"),)))
    steering = Steering(sqlite_catalog, "j-rec", control)
    applied = {"t": {"0": 0}, "$from": {"t": {"0": 0}}, "$reset": request.id}  # the batch that applied it
    db = sqlite3.connect(_sqlite_file(sqlite_catalog))
    db.execute("ALTER TABLE sp_ingest_requests RENAME TO sp_ingest_requests_away")  # the metastore fails
    db.commit()
    try:
        assert steering.resets_done(applied, lambda: {"t": {"0": 5}}) == []
    finally:
        db.execute("ALTER TABLE sp_ingest_requests_away RENAME TO sp_ingest_requests")
        db.commit()
        db.close()
    assert read_control(control).resets == ((request.id, "t", "earliest"),)  # kept: recorded later
    assert store.pending_ingest_requests("j-rec") == [request]
    later = {"t": {"0": 3}, "$reset": request.id}  # the mark rides on: the source skips it
    [outcome] = steering.resets_done(later, lambda: applied)
    assert outcome == "reset topic t to earliest: applied by an earlier batch (what it moved went unrecorded)"
    assert read_control(control).resets == ()
    assert store.pending_ingest_requests("j-rec") == []
    assert steering.resets_done(later, lambda: applied) == []
    store.finish_ingest_request(
        store.request_ingest("j-rec", "t", IngestAction.PAUSE, "ops").id,
        "paused",
        now=datetime(2026, 1, 1, tzinfo=UTC),
    )
    pending = store.request_ingest("j-rec", "t", IngestAction.RESUME, "ops")
    assert store.prune_ingest_requests(datetime(2026, 2, 1, tzinfo=UTC)) == 1  # applied long ago: gone
    assert [r.id for r in store.ingest_requests("j-rec")] == [pending.id, request.id]


def test_a_reset_applied_by_the_batch_records_what_it_moved(sqlite_catalog: Catalog, tmp_path: Path) -> None:
    store = sqlite_catalog.store
    first = store.request_ingest("j-now", "t", IngestAction.RESET, "ops", "earliest")
    control = str(tmp_path / "control.json")
    write_control(control, Control(topics=frozenset({"t"}), resets=((first.id, "t", "earliest"),)))
    applied = {"t": {"0": 2, "1": 9}, "$from": {"t": {"0": 0, "1": 9}}, "$reset": first.id}
    steering = Steering(sqlite_catalog, "j-now", control)
    [outcome] = steering.resets_done(applied, lambda: {"t": {"0": 5, "1": 4}})
    assert outcome == (
        "reset topic t to earliest: t-0 5 → 0 (5 records read again); t-1 4 → 9 (5 records skipped)"
    )
    assert [r.outcome for r in store.ingest_requests("j-now")] == [outcome]


def _published(catalog: Catalog, tmp_path: Path, routes: Routes, dead_letter: str | None) -> dict:
    """The job's report after it published its status as a running job does (nothing read yet)."""
    control = str(tmp_path / "control.json")
    write_control(control, Control(topics=frozenset(routes.topics)))
    Steering(catalog, "j", control, dead_letter).publish(routes, {}, {}, {}, {}, 0)
    [report] = job_reports(catalog.store, "j")
    return report


# (routes, the job's dead-letter table, topic, namespaces the topic's records can reach: None is
# open-ended or undecidable, so only admin:* may steer it)
TOPIC_CASES = [
    # a fixed table: its namespace, seen or not; a pattern's topic the job has not read yet too
    ([Route("a.t", topic="o")], "ops.dl", "o", {"a"}),
    ([Route("a.t", topic="o"), Route("b.t", pattern="x-.*")], "ops.dl", "x-new", {"b"}),
    # {topic}: decided by the topic named; a name it cannot make goes to the dead letters only
    ([Route("{topic}", pattern=r"shop\..*")], "ops.dl", "shop.new", {"shop"}),
    ([Route("{topic}", pattern=r"shop\..*")], "ops.dl", "shop.x.y", {"ops"}),
    ([Route("raw.{topic}", pattern="ev-.*")], "ops.dl", "ev-1", {"ops"}),  # '-': not a table name
    ([Route("{topic!s:.4}.t", pattern="abcdef")], "ops.dl", "abcdef", {"abcd"}),  # as str.format formats
    # {field}: its namespace when the text before it holds the dot, plus the dead letters (no field)
    ([Route("a.{field}", topic="ev", table_field="k")], "ops.dl", "ev", {"a", "ops"}),
    ([Route("a.t", topic="ev", table_field="k")], "ops.dl", "ev", {"a", "ops"}),
    ([Route("{field}.t", topic="ev", table_field="k")], "ops.dl", "ev", None),
    ([Route("{topic}{field}.t", pattern="ev", table_field="k")], "ops.dl", "ev", None),
    ([Route("a{field}.t", topic="ev", table_field="k")], "ops.dl", "ev", None),
    ([Route("a.{field}", topic="ev", table_field="k")], None, "ev", None),  # unrouted, but to where?
    # a topic no route takes: a route added later could send it anywhere
    ([Route("a.t", topic="o")], "ops.dl", "other", None),
]


@pytest.mark.parametrize("routes, dead_letter, topic, reached", TOPIC_CASES)
def test_a_topic_is_steered_by_the_namespaces_its_routes_can_send_it_to(
    sqlite_catalog: Catalog, tmp_path: Path, routes: list[Route], dead_letter: str | None, topic: str,
    reached: set[str] | None,
) -> None:  # fmt: skip
    report = _published(sqlite_catalog, tmp_path, Routes(tuple(routes)), dead_letter)
    assert topic_namespaces(report, topic) == reached


# (routes, the job's dead-letter table, namespaces any of its records can reach)
JOB_CASES = [
    ([Route("a.t", topic="o"), Route("b.t", pattern="x-.*")], "ops.dl", {"a", "b"}),
    ([Route("a.t", topic="o"), Route("{topic}", pattern=r"shop\..*")], "ops.dl", None),  # any namespace
    ([Route("a.t", topic="o"), Route("c.{topic}", pattern="x_.*")], "ops.dl", {"a", "c", "ops"}),
    ([Route("a.{field}", topic="ev", table_field="k")], "ops.dl", {"a", "ops"}),
]


@pytest.mark.parametrize("routes, dead_letter, reached", JOB_CASES)
def test_a_job_is_read_by_the_namespaces_all_its_routes_can_reach(
    sqlite_catalog: Catalog, tmp_path: Path, routes: list[Route], dead_letter: str | None,
    reached: set[str] | None,
) -> None:  # fmt: skip
    report = _published(sqlite_catalog, tmp_path, Routes(tuple(routes)), dead_letter)
    assert job_namespaces(report) == reached


def test_a_status_without_its_routes_decides_nothing() -> None:
    """A status published by a job of an older version names topics' tables but not its routes: the
    topics it has not read could go anywhere, so only admin:* may steer it."""
    report = {"status": {"topics": {"t0": {"table": "a.x"}}, "routes": "t0→a.x"}}
    assert job_namespaces(report) is None and topic_namespaces(report, "t0") is None
    forged = {"status": {"route_specs": [{"table": "a.x", "topic": "t0", "evil": 1}]}}
    assert job_namespaces(forged) is None and topic_namespaces(forged, "t0") is None
