"""The roll daemon's configuration: one file in conf/, pydantic-validated, env overrides."""

from __future__ import annotations

import tomllib
from datetime import timedelta

import pytest

from metastore.errors import UserInputError
from scheduler.config import HousekeepingConfig, SchedulerConfig
from streampart.config import load_settings
from tests.helpers import ROOT

CONF = ROOT / "conf" / "streampart.toml"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("STREAMPART_"):
            monkeypatch.delenv(key)


def test_the_shipped_file_documents_every_field_with_its_default() -> None:
    shipped = load_settings(CONF).scheduler
    assert shipped == SchedulerConfig()
    documented = tomllib.loads(CONF.read_text())["scheduler"]
    for model, section in ((SchedulerConfig, documented), (HousekeepingConfig, documented["housekeeping"])):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"
            assert name in section, f"conf/streampart.toml does not document scheduler field {name}"


def test_environment_overrides_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMPART_SCHEDULER__LEASE_TTL", "30s")
    monkeypatch.setenv("STREAMPART_SCHEDULER__HEARTBEAT", "2.5")
    monkeypatch.setenv("STREAMPART_SCHEDULER__HOUSEKEEPING__RETENTION", "1d12h")
    monkeypatch.setenv("STREAMPART_SCHEDULER__HOUSEKEEPING__CHUNK_RETENTION", "P2D")
    s = load_settings(CONF).scheduler
    assert (s.lease_ttl, s.heartbeat) == (timedelta(seconds=30), timedelta(seconds=2.5))
    assert s.housekeeping.retention == timedelta(days=1, hours=12)
    assert s.housekeeping.chunk_retention == timedelta(days=2)


# A bad value is reported with the field at fault.
BAD = [
    ("STREAMPART_SCHEDULER__WORKERS", "0", "scheduler.workers"),
    ("STREAMPART_SCHEDULER__LEASE_TTL", "soon", "scheduler.lease_ttl"),
    ("STREAMPART_SCHEDULER__HEARTBEAT", "10s", "heartbeat"),  # more than a third of the 15 s lease
    # the daemon renews its rolls' leases at every heartbeat (5 s): three renewals per lease at least
    (
        "STREAMPART_ROLL__RENEWED_LEASE",
        "12s",
        r"scheduler\.heartbeat \(0:00:05\) must be at most a third of roll\.renewed_lease",
    ),
    ("STREAMPART_SCHEDULER__LOG_FORMAT", "xml", "scheduler.log_format"),
    ("STREAMPART_SCHEDULER__HOUSEKEEPING__CHUNK_RETENTION", "1d", "chunk_retention"),  # < retention
]


@pytest.mark.parametrize("var, value, field", BAD)
def test_a_bad_value_names_its_field(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, field: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(UserInputError, match=field):
        load_settings()


def test_the_roll_lease_has_one_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both roll leases live in [roll]; the daemon's old variable names no setting (an error says so)."""
    roll = load_settings(CONF).roll
    assert (roll.lease, roll.renewed_lease) == (timedelta(minutes=10), timedelta(seconds=60))
    assert roll.renewed().lease == timedelta(seconds=60)  # what the daemon's rollers take
    monkeypatch.setenv("STREAMPART_SCHEDULER__ROLL_LEASE", "30s")
    with pytest.raises(UserInputError, match="unknown environment variable STREAMPART_SCHEDULER__ROLL_LEASE"):
        load_settings(CONF)


def test_housekeeping_keeps_files_longer_than_a_sql_statement_may_read_them(monkeypatch) -> None:
    """Issue 30: a file no current version lists goes after scheduler.housekeeping.retention; the SQL
    server may read an older snapshot for its statement timeout plus its pins' freshness."""
    from streampart.config import Settings

    monkeypatch.setenv("STREAMPART_SCHEDULER__HOUSEKEEPING__RETENTION", "5m")
    with pytest.raises(ValueError, match=r"retention \(5m\) must outlast sqlserver.statement_timeout"):
        Settings()
    monkeypatch.setenv("STREAMPART_SQLSERVER__STATEMENT_TIMEOUT", "1m")
    assert Settings().scheduler.housekeeping.retention == timedelta(minutes=5)
