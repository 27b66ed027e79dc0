"""Commands that need no Spark import none of it (style guide 6: they start in well under a second).

Each command runs in a fresh interpreter through a small wrapper that runs ``streampart`` as the
console script does and then writes the names of the modules it imported; no ``pyspark`` or
``py4j`` module may be among them. No timings are asserted (the machine's load decides those;
README "Start-up" has the numbers).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# runs `streampart ARGS…` (argv[2:]) in this process, then lists the modules it imported into argv[1]
# (at exit: the command line ends its process itself once its exit handlers have run)
_WRAPPER = """
import atexit, json, runpy, sys
report, sys.argv = sys.argv[1], ["streampart", *sys.argv[2:]]

def listed():
    with open(report, "w") as f:
        json.dump(sorted(sys.modules), f)

atexit.register(listed)
runpy.run_module("streampart", run_name="__main__")
"""
SPARK = ("pyspark", "py4j")


def streampart(wh: Path, tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    report = tmp / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    env |= {"STREAMPART_WAREHOUSE": str(wh), "COLUMNS": "200", "TZ": "UTC"}
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(report), *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"streampart {' '.join(args)}: {done.stderr}"
    return done, json.loads(report.read_text())


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("startup")
    rows = tmp / "rows.jsonl"
    rows.write_text('{"id": 1, "ts": "2026-11-21T10:00:00Z", "msg": "a"}\n')
    return tmp / "wh", rows


# in order: each may need what the one before made
COMMANDS = [
    ("table", "create", "ns.t", "--schema", "id BIGINT, ts TIMESTAMP, msg STRING", "--time-column", "ts",
     "--roll-every", "1h", "--dead-letter"),
    ("write", "ns.t", "{rows}"),
    ("write", "ns.t", "{rows}", "--json"),
    ("table", "list"),
    ("table", "list", "--json"),
    ("table", "describe", "ns.t"),
    ("token", "create", "ci", "--scope", "write:ns"),
    ("token", "list"),
    ("roll", "ns.t", "--force"),  # a small partition: swept without Spark (roll.engine auto)
    ("housekeep",),
    ("check", "ns.t"),
    ("--help",),
    ("--version",),
]  # fmt: skip


@pytest.mark.process
def test_commands_without_spark_import_none_of_it(warehouse: tuple[Path, Path], tmp_path: Path) -> None:
    wh, rows = warehouse
    for command in COMMANDS:
        args = [a.replace("{rows}", str(rows)) for a in command]
        _, modules = streampart(wh, tmp_path, *args)
        assert "streampart.cli.root" in modules  # the report is of the command's process
        spark = [m for m in modules if m.split(".")[0] in SPARK]
        assert not spark, f"streampart {' '.join(args)} imported {spark[:5]}"


@pytest.mark.process
def test_the_dev_commands_import_none_of_it(warehouse: tuple[Path, Path], tmp_path: Path) -> None:
    from ingest.kafka.devbroker import free_port

    wh, rows = warehouse
    report, port = tmp_path / "broker-modules.json", free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    broker = subprocess.Popen(  # runs until SIGTERM; its report is written as it exits
        [sys.executable, "-c", _WRAPPER, str(report), "dev", "broker", "--port", str(port), "--topic", "t"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    try:
        assert broker.stdout is not None
        assert "Kafka broker" in broker.stdout.readline()
        _, produced = streampart(
            wh, tmp_path, "dev", "produce", "t", str(rows), "--bootstrap", f"127.0.0.1:{port}"
        )
    finally:
        broker.send_signal(signal.SIGTERM)
        _, err = broker.communicate(timeout=60)
    assert broker.returncode == 0, err
    for command, modules in (("dev broker", json.loads(report.read_text())), ("dev produce", produced)):
        assert "streampart.cli.root" in modules
        spark = [m for m in modules if m.split(".")[0] in SPARK]
        assert not spark, f"streampart {command} imported {spark[:5]}"


@pytest.mark.process
def test_the_roll_did_roll(warehouse: tuple[Path, Path], tmp_path: Path) -> None:
    # the roll above rolled without Spark (not: found nothing to do)
    done, _ = streampart(warehouse[0], tmp_path, "table", "describe", "ns.t", "--json")
    states = [p["state"] for p in json.loads(done.stdout)["partitions"]]
    assert "standard" in states, states


@pytest.mark.process
def test_the_schema_is_checked_without_alembic_when_it_is_current(
    warehouse: tuple[Path, Path], tmp_path: Path
) -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from metastore.store.engine import MIGRATIONS, head_revision

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    assert head_revision() == ScriptDirectory.from_config(config).get_current_head()
    _, modules = streampart(warehouse[0], tmp_path, "table", "list")  # the metastore exists, migrated
    assert "alembic" not in modules
