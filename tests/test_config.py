"""``load_settings``: overrides validated like every source, the environment untouched, secrets masked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from metastore.errors import UserInputError
from streampart.config import load_settings

PG_URL = "postgresql://streampart:hunter2@db.example:5432/streampart"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("STREAMPART_"):
            monkeypatch.delenv(key)


def test_load_settings_reads_its_file_and_leaves_the_environment_alone(tmp_path: Path) -> None:
    config = tmp_path / "streampart.toml"
    config.write_text("[scheduler]\nmetrics_port = 9000\n")
    before = dict(os.environ)

    assert load_settings(config).scheduler.metrics_port == 9000

    assert dict(os.environ) == before
    assert load_settings().scheduler.metrics_port == 9464  # the file named last time is not read again


def test_overrides_are_validated_and_merge_with_the_other_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMPART_SCHEDULER__LOG_FORMAT", "text")

    s = load_settings(scheduler={"metrics_port": 0, "metrics": None}, server={"port": None})

    assert (s.scheduler.metrics_port, s.scheduler.log_format, s.scheduler.metrics) == (0, "text", True)
    with pytest.raises(UserInputError, match=r"scheduler\.metrics_port: Input should be less than or equal"):
        load_settings(scheduler={"metrics_port": 99999})
    with pytest.raises(UserInputError, match=r"server\.log_format"):
        load_settings(server={"log_format": "xml"})


def test_the_metastore_url_is_a_secret() -> None:
    s = load_settings(metastore=PG_URL)

    assert s.metastore is not None and s.metastore.get_secret_value() == PG_URL
    for shown in (repr(s), str(s), s.model_dump_json(), str(s.model_dump())):
        assert "hunter2" not in shown
    with pytest.raises(UserInputError) as refused:
        load_settings(metastore=PG_URL, scheduler={"workers": 0})
    assert "hunter2" not in str(refused.value)
