"""``load_settings``: overrides validated like every source, the environment untouched, secrets masked,
unknown keys refused by name."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from metastore.errors import UserInputError
from streampart.config import Settings, load_settings
from tests.helpers import ROOT

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


# Issue 26: an unknown key anywhere — a section of the file, a section below one, a variable — is
# an error naming it and the nearest valid key (it was ignored in silence inside sections).
def _sections(model: type[BaseModel] = Settings, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, info in model.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            yield from _sections(info.annotation, (*path, name))


@pytest.mark.parametrize("section", list(_sections()), ids=lambda path: ".".join(path) or "top")
def test_every_section_refuses_an_unknown_key(tmp_path: Path, section: tuple[str, ...]) -> None:
    model: type[BaseModel] = Settings
    for name in section:
        model = model.model_fields[name].annotation  # type: ignore[assignment]
    key = next(iter(model.model_fields))
    config = tmp_path / "streampart.toml"
    config.write_text((f"[{'.'.join(section)}]\n" if section else "") + f"{key}x = 1\n")

    with pytest.raises(UserInputError) as refused:
        load_settings(config)

    dotted = ".".join((*section, key))
    assert str(refused.value) == (
        f"invalid configuration: unknown key {dotted}x in {config} (did you mean {dotted}?)"
    )


FILE_TYPOS = [
    ("[scheduler]\nmetrics_prot = 9000\n",
     "unknown key scheduler.metrics_prot in {file} (did you mean scheduler.metrics_port?)"),
    ('[scheduler.housekeeping]\nretension = "1d"\n',
     "unknown key scheduler.housekeeping.retension in {file} "
     "(did you mean scheduler.housekeeping.retention?)"),
    ("[shceduler]\nworkers = 2\n", "unknown section [shceduler] in {file} (did you mean [scheduler]?)"),
    ('warehuose = "/data"\n', "unknown key warehuose in {file} (did you mean warehouse?)"),
    ("[spark]\nexecutors = 2\n",  # nothing near: the section's keys
     "unknown key spark.executors in {file} "
     "(valid keys there: master, shuffle_partitions, driver_memory, conf, class_archive)"),
]  # fmt: skip


@pytest.mark.parametrize("toml, message", FILE_TYPOS)
def test_an_unknown_key_in_the_file_is_named_with_the_nearest(
    tmp_path: Path, toml: str, message: str
) -> None:
    config = tmp_path / "streampart.toml"
    config.write_text(toml)
    with pytest.raises(UserInputError) as refused:
        load_settings(config)
    assert str(refused.value) == "invalid configuration: " + message.format(file=config)


@pytest.mark.parametrize(
    "variable, nearest",
    [
        ("STREAMPART_SCHEDULER__WORKRES", "STREAMPART_SCHEDULER__WORKERS"),  # in a section
        ("STREAMPART_SCHEDULER__HOUSEKEEPING__RETENSION", "STREAMPART_SCHEDULER__HOUSEKEEPING__RETENTION"),
        ("STREAMPART_WAREHUOSE", "STREAMPART_WAREHOUSE"),  # a top-level setting
        ("STREAMPART_SHCEDULER__WORKERS", "STREAMPART_SCHEDULER__WORKERS"),  # a section
    ],
)
def test_an_unknown_variable_is_named_with_the_nearest(
    monkeypatch: pytest.MonkeyPatch, variable: str, nearest: str
) -> None:
    monkeypatch.setenv(variable, "1")
    with pytest.raises(UserInputError) as refused:
        load_settings()
    assert str(refused.value) == (
        f"invalid configuration: unknown environment variable {variable} (did you mean {nearest}?)"
    )


def test_variables_that_are_not_settings_are_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STREAMPART_API_TOKEN", "STREAMPART_SQL_SERVER", "STREAMPART_SECRET_PG_PASSWORD"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("STREAMPART_SPARK__CONF__spark.executor.cores", "2")  # a key of a mapping
    monkeypatch.setenv("STREAMPART_CLUSTERS__SPARK_MASTERS__C1", "local[1]")
    assert load_settings().spark.conf == {"spark.executor.cores": "2"}
    monkeypatch.setenv("STREAMPART_WAREHOUSE__PATH", "/data")  # a plain setting has no keys below it
    with pytest.raises(UserInputError, match=r"WAREHOUSE__PATH \(STREAMPART_WAREHOUSE takes no keys below"):
        load_settings()


def test_the_shipped_config_file_holds_the_defaults() -> None:
    assert load_settings(ROOT / "conf" / "streampart.toml") == load_settings()


@pytest.mark.process
def test_the_cli_refuses_an_unknown_key_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "streampart.toml"
    config.write_text("[scheduler.housekeeping]\nenabeld = false\n")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    command = [sys.executable, "-m", "streampart", "--warehouse", str(tmp_path / "wh"), "table", "list"]

    from_file = subprocess.run(
        [*command[:3], "--config", str(config), *command[3:]],
        capture_output=True, text=True, env=environment, timeout=60,
    )  # fmt: skip
    typo = environment | {"STREAMPART_CHUNK__TTLL": "5s"}
    from_env = subprocess.run(command, capture_output=True, text=True, env=typo, timeout=60)

    assert (from_file.returncode, from_file.stdout, from_file.stderr) == (
        1,
        "",
        f"error: invalid configuration: unknown key scheduler.housekeeping.enabeld in {config} "
        "(did you mean scheduler.housekeeping.enabled?)\n",
    )
    assert (from_env.returncode, from_env.stdout, from_env.stderr) == (
        1,
        "",
        "error: invalid configuration: unknown environment variable STREAMPART_CHUNK__TTLL "
        "(did you mean STREAMPART_CHUNK__TTL?)\n",
    )
    assert not (tmp_path / "wh").exists()


def test_the_stores_request_timeout_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """How long one attempt of a request may take (a frozen store is reported after it)."""
    from datetime import timedelta

    from streampart.config import load_settings

    assert load_settings().storage.options().request_timeout == timedelta(seconds=120)
    monkeypatch.setenv("STREAMPART_STORAGE__REQUEST_TIMEOUT", "3s")
    assert load_settings().storage.options().request_timeout == timedelta(seconds=3)
    monkeypatch.setenv("STREAMPART_STORAGE__REQUEST_TIMEOUT", "0s")
    with pytest.raises(UserInputError, match=r"storage\.request_timeout"):
        load_settings()
