"""A table's Delta log schedule from the command line: ``table create|alter --checkpoint-interval
--log-retention``; describe shows it; a bad value is one clear error that changes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from metastore.catalog import Catalog
from metastore.errors import StreampartError
from streampart.cli import app

CREATE = ["--schema", "id BIGINT, ts TIMESTAMP, msg STRING", "--time-column", "ts", "--roll-every", "1h"]


def _cli(wh: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["--warehouse", str(wh), *args])
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        assert isinstance(exc, StreampartError), exc  # the CLI prints these as one "error:" line
        return 1, str(exc)
    return result.exit_code, result.stdout


@pytest.fixture
def wh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in list(os.environ):
        if key.startswith("STREAMPART_"):
            monkeypatch.delenv(key)
    return tmp_path / "wh"


def _delta_conf(wh: Path, name: str) -> dict[str, str]:
    catalog = Catalog.open(wh)
    try:
        return dict(catalog.load(catalog.table(name)).metadata().configuration)
    finally:
        catalog.close()


def test_create_and_alter_set_the_schedule_in_the_delta_log(wh: Path) -> None:
    code, out = _cli(wh, "table", "create", "ns.t", *CREATE, "--checkpoint-interval", "20",
                     "--log-retention", "2d", "--json")  # fmt: skip
    assert code == 0, out
    assert json.loads(out)["delta_log"] == {"checkpoint_interval": 20, "log_retention": "2d"}
    conf = _delta_conf(wh, "ns.t")
    assert conf["delta.checkpointInterval"] == "20"
    assert conf["delta.logRetentionDuration"] == "interval 172800 seconds"
    code, out = _cli(wh, "table", "alter", "ns.t", "--log-retention", "12h")
    assert code == 0, out
    assert "checkpoint every 20 commits, commit files kept 12h" in " ".join(out.split())
    code, out = _cli(wh, "table", "describe", "ns.t")
    assert "Delta log: a checkpoint every 20 commits, commit files kept 12h" in " ".join(out.split())
    # a table made without the options has Delta's defaults
    assert _cli(wh, "table", "create", "ns.u", *CREATE)[0] == 0
    code, out = _cli(wh, "table", "describe", "ns.u", "--json")
    assert json.loads(out)["delta_log"] == {"checkpoint_interval": 100, "log_retention": "30d"}


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--checkpoint-interval", "0"], ["--checkpoint-interval must be", "not 0"]),
        (["--log-retention", "5m"], ["--log-retention must be at least 1h", "not 5m"]),
        (["--log-retention", "forever"], ["--log-retention", "forever"]),
    ],
)
def test_a_bad_value_is_one_clear_error_that_changes_nothing(
    wh: Path, args: list[str], fragments: list[str]
) -> None:
    code, said = _cli(wh, "table", "create", "ns.bad", *CREATE, *args)
    assert code == 1 and all(f in said for f in fragments), said
    code, said = _cli(wh, "table", "describe", "ns.bad")
    assert code == 1 and ("ns.bad" in said or f"warehouse {wh} does not exist" in said), said  # not made
    assert _cli(wh, "table", "create", "ns.t", *CREATE)[0] == 0
    before = _delta_conf(wh, "ns.t")
    code, said = _cli(wh, "table", "alter", "ns.t", *args)
    assert code == 1 and all(f in said for f in fragments), said
    assert _delta_conf(wh, "ns.t") == before
    code, said = _cli(wh, "table", "alter", "ns.t")
    assert code == 1 and "--checkpoint-interval N, --log-retention DURATION" in said
