"""Steering's bookkeeping without a broker: a reset's recording survives the metastore being away.

The job itself (pause, resume and reset applied by a running job, over the CLI and the HTTP API) is
tested end to end in tests/ingest/test_kafka_routes.py.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from ingest.kafka.control import Control, read_control, write_control
from ingest.kafka.steering import Steering, job_namespaces
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


def test_the_namespaces_a_job_is_steered_by() -> None:
    def report(*tables: str | None) -> dict:
        return {"status": {"topics": {f"t{i}": {"table": t} for i, t in enumerate(tables)}}}

    assert job_namespaces(report("a.x", "a.y", "b.z")) == {"a", "b"}
    assert job_namespaces(report("a.x", None)) is None  # a record's field names the table
    assert job_namespaces(report()) is None  # nothing read yet
