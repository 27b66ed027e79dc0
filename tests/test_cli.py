"""The command-line contract, through real ``streampart`` subprocesses.

Each CLI call costs a second or more of start-up, so a module-scoped fixture runs three
scenarios once, side by side in their own warehouses (an arrival-mode table; event-time tables
rejecting and diverting late data), and several tests check their outputs. Only
``test_query_count`` starts Spark.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

_SCRIPT = Path(sys.executable).parent / "streampart"
COMMAND = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "streampart.cli"]
SCHEMA = "id BIGINT, ts TIMESTAMP, msg STRING"
CREATE = ["--schema", SCHEMA, "--time-column", "ts", "--roll-every", "1h"]
EVENT_TIME = ["--mode", "event-time", "--lateness", "10m"]
PARTITION_STATES = {"streaming", "rolling", "standard"}


@dataclass(frozen=True)
class Result:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        assert self.returncode == 0, f"streampart {' '.join(self.args)} failed:\n{self.stderr}"
        assert "Traceback" not in self.stderr, self.stderr
        return json.loads(self.stdout)

    @property
    def message(self) -> str:
        """stderr with Rich's line wrapping undone."""
        return " ".join(self.stderr.split())


def run(
    warehouse: Path,
    *args: str | Path,
    timeout: float = 180,
    tz: str | None = None,
    env: dict[str, str] | None = None,
) -> Result:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")} | (env or {})
    if tz is not None:
        environment["TZ"] = tz
    argv = [str(a) for a in args]
    proc = subprocess.run(
        [*COMMAND, "--warehouse", str(warehouse), *argv],
        capture_output=True,
        text=True,
        cwd=Path(warehouse).parent,
        env=environment,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Result(tuple(argv), proc.returncode, proc.stdout, proc.stderr)


def assert_user_error(result: Result, *fragments: str) -> None:
    """Exit status 1, nothing on stdout, one ``error:`` message on stderr naming the fault."""
    context = f"streampart {' '.join(result.args)}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert result.returncode == 1, context
    assert "Traceback" not in result.stderr + result.stdout, context
    assert result.stdout == "", context
    assert result.message.startswith("error: ") and result.message.count("error:") == 1, context
    for fragment in fragments:
        assert fragment in result.message, f"{fragment!r} not in the message\n{context}"


def describe(warehouse: Path, name: str) -> dict[str, Any]:
    return run(warehouse, "table", "describe", name, "--json").json()


def total_rows(info: dict[str, Any]) -> int:
    return sum(p["rows"] for p in info["partitions"])


def assert_iso_utc(value: str) -> datetime:
    assert isinstance(value, str) and value.endswith("Z"), value
    parsed = datetime.fromisoformat(value)
    assert parsed.utcoffset() == timedelta(0)
    return parsed


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_jsonl(path: Path, *records: dict[str, Any] | str) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


# -- the arrival-mode scenario ------------------------------------------------------------------

JSONL_ROWS, CSV_ROWS, PARQUET_ROWS = 2, 3, 4
WRITTEN = JSONL_ROWS + CSV_ROWS + PARQUET_ROWS


def arrival_scenario(base: Path) -> dict[str, Any]:
    """An arrival-mode table: create, write three formats, a token retry, a malformed write, rolls."""
    wh = base / "wh"
    good_jsonl = write_jsonl(
        base / "good.jsonl",
        {"id": 1, "ts": "2026-01-01T00:00:00Z", "msg": "a"},
        {"id": 2, "ts": "2026-01-01T00:10:00", "msg": "b"},
    )
    csv_file = base / "rows.csv"
    csv_file.write_text(
        "id,ts,msg\n3,2026-01-01T00:20:00Z,c\n4,2026-01-01 00:30:00,\n5,2026-01-01T00:40:00+01:00,e\n"
    )
    parquet_file = base / "rows.parquet"
    pq.write_table(
        pa.table(
            {
                "id": pa.array([6, 7, 8, 9], pa.int64()),
                "ts": pa.array(
                    [datetime(2026, 1, 1, 1, m, tzinfo=UTC) for m in range(4)], pa.timestamp("us", "UTC")
                ),
                "msg": pa.array(["f", "g", None, "i"]),
            }
        ),
        parquet_file,
    )
    malformed = write_jsonl(
        base / "malformed.jsonl",
        {"id": 10, "ts": "2026-01-01T00:00:00Z", "msg": "fine"},
        '{"id": 11, "ts": ',
        {"id": 12, "ts": "2026-01-01T00:00:00Z", "msg": "fine"},
    )

    steps: dict[str, Any] = {"warehouse": wh, "base": base, "good_jsonl": good_jsonl}
    steps["create"] = run(wh, "table", "create", "ns.t", *CREATE, "--json")
    steps["list"] = run(wh, "table", "list", "--json")
    steps["jsonl"] = run(wh, "write", "ns.t", good_jsonl, "--token", "T-1", "--json")
    # the idempotency key's three spellings (--token is its first name) name one chunk
    steps["jsonl_retry"] = run(wh, "write", "ns.t", good_jsonl, "--key", "T-1", "--json")
    steps["key_reused"] = run(wh, "write", "ns.t", malformed, "--idempotency-key", "T-1", "--json")
    steps["csv"] = run(wh, "write", "ns.t", csv_file, "--json")
    steps["parquet"] = run(wh, "write", "ns.t", parquet_file, "--json")
    steps["malformed"] = run(wh, "write", "ns.t", malformed, "--json")
    steps["describe_written"] = run(wh, "table", "describe", "ns.t", "--json")
    steps["roll_force"] = run(wh, "roll", "ns.t", "--force", "--json")
    steps["describe_rolled"] = run(wh, "table", "describe", "ns.t", "--json")
    steps["describe_rolled_text"] = run(wh, "table", "describe", "ns.t")
    steps["create_help"] = run(wh, "table", "create", "--help")
    # "now" = just after the new partition opened, so an hour boundary passing on the real
    # clock between the two commands cannot make it due
    streaming = [p for p in steps["describe_rolled"].json()["partitions"] if p["state"] == "streaming"]
    just_after = (
        iso(datetime.fromisoformat(streaming[0]["value"]) + timedelta(seconds=1))
        if streaming
        else iso(datetime.now(UTC))
    )
    steps["roll_nothing_due"] = run(wh, "roll", "ns.t", "--now", just_after, "--json")
    steps["roll_later"] = run(
        wh, "roll", "ns.t", "--now", iso(datetime.now(UTC) + timedelta(hours=2)), "--json"
    )
    return steps


def event_time_scenario(base: Path, late_data: str) -> dict[str, Any]:
    """An event-time table: rows of two hours, a roll of both, then rows for a rolled hour."""
    wh = base / "wh"
    two_hours = write_jsonl(
        base / "two-hours.jsonl",
        {"id": 1, "ts": "2026-01-01T00:05:00Z", "msg": "a"},
        {"id": 2, "ts": "2026-01-01T01:10:00Z", "msg": "b"},
        {"id": 3, "ts": "2026-01-01T00:55:00Z", "msg": "c"},
    )
    late = write_jsonl(
        base / "late.jsonl",
        {"id": 4, "ts": "2026-01-01T00:30:00Z", "msg": "late"},
        {"id": 5, "ts": "2026-01-01T01:40:00Z", "msg": "late"},
    )
    steps: dict[str, Any] = {"warehouse": wh}
    steps["create"] = run(
        wh, "table", "create", "ns.e", *CREATE, *EVENT_TIME, "--late-data", late_data, "--json"
    )
    steps["write"] = run(wh, "write", "ns.e", two_hours, "--json")
    steps["roll"] = run(wh, "roll", "ns.e", "--now", "2100-01-01T00:00:00Z", "--json")
    steps["write_late"] = run(wh, "write", "ns.e", late, "--json")
    if late_data == "divert":
        steps["describe_late"] = run(wh, "table", "describe", "ns.e__late", "--json")
    return steps


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Runs the scenarios' CLI calls once, the three side by side (each in its own warehouse)."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {
            "arrival": pool.submit(arrival_scenario, tmp_path_factory.mktemp("cli-arrival")),
            "reject": pool.submit(event_time_scenario, tmp_path_factory.mktemp("cli-reject"), "reject"),
            "divert": pool.submit(event_time_scenario, tmp_path_factory.mktemp("cli-divert"), "divert"),
        }
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="module")
def arrival(scenarios: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return scenarios["arrival"]


def check_partitions(info: dict[str, Any]) -> None:
    for p in info["partitions"]:
        assert {"value", "state", "chunks", "rows", "bytes", "location"} <= set(p), p
        assert_iso_utc(p["value"])
        assert p["state"] in PARTITION_STATES
        for key in ("chunks", "rows", "bytes"):
            assert isinstance(p[key], int) and p[key] >= 0, p
        assert isinstance(p["location"], str) and p["location"], p


def test_table_create_list_and_describe(arrival: dict[str, Any]) -> None:
    created = arrival["create"].json()
    assert created["table"] == "ns.t"
    assert created["mode"] == "arrival"
    assert created["roll_every"] == "1h"
    [opened] = created["partitions"]  # arrival mode opens a streaming partition at once
    assert opened["state"] == "streaming" and opened["rows"] == 0
    check_partitions(created)

    listed = arrival["list"].json()
    assert [t["table"] for t in listed] == ["ns.t"]
    assert listed[0]["mode"] == "arrival" and listed[0]["roll_every"] == "1h"

    info = arrival["describe_written"].json()
    assert {"table", "mode", "roll_every", "partitions"} <= set(info)
    assert (info["table"], info["mode"], info["roll_every"]) == ("ns.t", "arrival", "1h")
    check_partitions(info)
    [streaming] = info["partitions"]
    assert streaming["value"] == opened["value"]
    assert streaming["state"] == "streaming"
    assert streaming["chunks"] == 3 and streaming["rows"] == WRITTEN and streaming["bytes"] > 0


@pytest.mark.parametrize(
    ("step", "rows"), [("jsonl", JSONL_ROWS), ("csv", CSV_ROWS), ("parquet", PARQUET_ROWS)]
)
def test_write_each_format(arrival: dict[str, Any], step: str, rows: int) -> None:
    result = arrival[step].json()

    assert {"chunk", "partitions", "rows", "version"} <= set(result)
    assert isinstance(result["chunk"], str) and result["chunk"]
    assert result["rows"] == rows
    assert isinstance(result["version"], int) and result["version"] >= 1
    [partition] = result["partitions"]
    assert partition == arrival["create"].json()["partitions"][0]["value"]


def test_write_versions_and_chunks_are_distinct(arrival: dict[str, Any]) -> None:
    results = [arrival[step].json() for step in ("jsonl", "csv", "parquet")]

    assert len({r["chunk"] for r in results}) == 3
    versions = [r["version"] for r in results]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_write_with_an_idempotency_key_lands_once(arrival: dict[str, Any]) -> None:
    first, retry = arrival["jsonl"].json(), arrival["jsonl_retry"].json()

    assert retry["chunk"] == first["chunk"]
    assert retry["rows"] == first["rows"] == JSONL_ROWS
    assert retry["version"] == first["version"]
    # the retry added nothing (and neither did the malformed write after it)
    assert total_rows(arrival["describe_written"].json()) == WRITTEN


def test_a_key_reused_for_other_data_is_refused_and_adds_nothing(arrival: dict[str, Any]) -> None:
    result = arrival["key_reused"]

    assert_user_error(result, "idempotency key 'T-1' of table ns.t was used for different content")
    assert "use a new idempotency key" in result.message
    assert total_rows(arrival["describe_written"].json()) == WRITTEN


def test_malformed_write_fails_cleanly_and_commits_nothing(arrival: dict[str, Any]) -> None:
    result = arrival["malformed"]

    assert_user_error(result, "record 2", "invalid JSON")
    assert "nothing was committed" in result.message
    info = arrival["describe_written"].json()
    assert total_rows(info) == WRITTEN
    assert sum(p["chunks"] for p in info["partitions"]) == 3


def test_roll(arrival: dict[str, Any]) -> None:
    opened = arrival["create"].json()["partitions"][0]["value"]

    forced = arrival["roll_force"].json()
    assert forced["table"] == "ns.t"
    [rolled] = forced["rolled"]
    assert rolled["partition"] == opened
    assert rolled["rows"] == WRITTEN

    info = arrival["describe_rolled"].json()
    check_partitions(info)
    standard = [p for p in info["partitions"] if p["state"] == "standard"]
    streaming = [p for p in info["partitions"] if p["state"] == "streaming"]
    assert len(info["partitions"]) == 2
    assert [p["value"] for p in standard] == [opened]
    assert standard[0]["rows"] == WRITTEN
    assert len(streaming) == 1 and streaming[0]["rows"] == 0
    assert assert_iso_utc(streaming[0]["value"]) > assert_iso_utc(opened)

    # nothing is due now: exit 0, nothing rolled, and when the open partition is due
    nothing = arrival["roll_nothing_due"].json()
    assert {k: nothing[k] for k in ("table", "rolled", "in_progress")} == {
        "table": "ns.t",
        "rolled": [],
        "in_progress": [],
    }
    [waiting] = nothing["open"]
    assert waiting["partition"] == streaming[0]["value"]
    assert assert_iso_utc(waiting["due"]) > assert_iso_utc(waiting["partition"])

    # two hours on, the new partition's period has ended
    later = arrival["roll_later"].json()
    assert [r["partition"] for r in later["rolled"]] == [streaming[0]["value"]]


def test_describe_and_help_say_what_the_mode_does_and_how_partitions_are_named(
    arrival: dict[str, Any],
) -> None:
    def words(text: str) -> str:  # Rich's boxes and line wrapping undone
        return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())

    info = arrival["describe_rolled"].json()
    assert info["partitioned_by"].startswith("arrival time of each chunk")
    [streaming] = [p for p in info["partitions"] if p["state"] == "streaming"]
    # opened by a forced roll mid-hour: named after the roll's whole second, not its instant
    assert assert_iso_utc(streaming["value"]).microsecond == 0
    text = arrival["describe_rolled_text"]
    assert text.returncode == 0, text.stderr
    shown = words(text.stdout)
    assert "partitioned by ts_period: arrival time of each chunk" in shown
    assert "(ts is not used to place rows)" in shown
    for p in info["partitions"]:
        assert p["name"] in shown and p["value"] not in shown
    standard = next(p for p in info["partitions"] if p["state"] == "standard")
    assert standard["location"].endswith(f"ts_period={standard['name'].replace(':', '%3A')}%3A00")

    helped = words(arrival["create_help"].stdout)
    assert "rows go to the partition open when their chunk commits" in helped  # --time-column, arrival
    assert "each row lands in the partition of its --time-column's period" in helped  # --mode


STARTUP_NOTICES = (
    "WARNING: Using incubator modules: jdk.incubator.vector",
    'Setting default log level to "WARN".',
    "To adjust logging level use sc.setLogLevel(newLevel). For SparkR, use setLogLevel(newLevel).",
)


@pytest.mark.spark
def test_query_count(arrival: dict[str, Any]) -> None:
    """The module's only Spark start-up."""
    assert arrival["roll_later"].returncode == 0  # the scenario has finished writing and rolling

    sql = "SELECT ts_period AS p, count(*) AS n FROM ns.t GROUP BY ts_period"
    # in a local time zone other than UTC: timestamps still print as the UTC instants they are
    result = run(arrival["warehouse"], "query", sql, "--json", timeout=600, tz="Asia/Kolkata")

    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # a cold start says nothing of its own on stderr: neither the JDK's notice about the incubator
    # module Spark's launcher adds nor Spark's note on its default log level
    # (streampart/driver_jvm.py, streampart/log4j2.properties)
    for said in STARTUP_NOTICES:
        assert said not in result.stderr, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    opened = arrival["create"].json()["partitions"][0]["value"]
    assert json.loads(lines[0]) == {"p": opened, "n": WRITTEN}


@pytest.mark.process
def test_user_errors(arrival: dict[str, Any]) -> None:
    """Every user mistake: exit 1, one clear message on stderr, no traceback."""
    wh, good = arrival["warehouse"], arrival["good_jsonl"]
    cases: list[tuple[tuple[str | Path, ...], tuple[str, ...]]] = [
        (("table", "describe", "ns.nope", "--json"), ("table ns.nope does not exist",)),
        (("write", "ns.nope", good), ("table ns.nope does not exist",)),
        (("table", "create", "ns.x", *CREATE[:-1], "5x"), ("--roll-every", "'5x'")),
        (
            ("table", "create", "ns.x", "--schema", "id BIGNUM", "--time-column", "id", "--roll-every", "1h"),
            ("'id'", "BIGNUM"),
        ),
        (("table", "create", "ns/x.t", *CREATE), ("path separator",)),
        (("table", "create", "ns..t", *CREATE), ("'ns..t'",)),
        (("table", "create", "ns.t'", *CREATE), ("quote",)),
        (("table", "describe", "../t"), ("path separator",)),
        (("table", "create", "ns.t", *CREATE), ("ns.t", "exists already")),
        (
            ("table", "create", "ns.x", *CREATE, "--mode", "bogus"),
            ("--mode", "arrival, event-time", "'bogus'"),
        ),
        (("write", "ns.t", wh.parent / "missing.jsonl"), ("missing.jsonl", "does not exist")),
        (("write", "ns.t", good, "--format", "xml"), ("--format", "jsonl, csv, parquet", "'xml'")),
        (("roll", "ns.t", "--now", "yesterday"), ("--now", "'yesterday'")),
        (("query", "SELECT * FROM ns.nope"), ("table ns.nope does not exist",)),
    ]

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda case: run(wh, *case[0]), cases))

    for result, (_, fragments) in zip(results, cases, strict=True):
        assert_user_error(result, *fragments)
    # the failed calls created no table and changed none
    assert [t["table"] for t in run(wh, "table", "list", "--json").json()] == ["ns.t"]
    assert total_rows(describe(wh, "ns.t")) == WRITTEN


# -- event time ---------------------------------------------------------------------------------


def test_event_time_partitions_and_late_data_rejected(scenarios: dict[str, dict[str, Any]]) -> None:
    steps = scenarios["reject"]

    created = steps["create"].json()
    assert (created["table"], created["mode"], created["partitions"]) == ("ns.e", "event-time", [])

    written = steps["write"].json()
    assert written["rows"] == 3
    assert written["partitions"] == ["2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"]

    rolled = steps["roll"].json()["rolled"]
    assert sorted((r["partition"], r["rows"]) for r in rolled) == [
        ("2026-01-01T00:00:00Z", 2),
        ("2026-01-01T01:00:00Z", 1),
    ]

    late = steps["write_late"]
    assert_user_error(late)
    assert "late" in late.message or "sealed" in late.message
    assert "2026-01-01T00:00:00Z" in late.message


def test_event_time_late_data_diverted(scenarios: dict[str, dict[str, Any]]) -> None:
    steps = scenarios["divert"]
    assert steps["create"].json()["late_data"] == "divert"
    assert steps["write"].json()["partitions"] == ["2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"]
    assert len(steps["roll"].json()["rolled"]) == 2

    written = steps["write_late"].json()
    assert (written["rows"], written["late_rows"], written["partitions"]) == (0, 2, [])

    diverted = steps["describe_late"].json()
    assert diverted["table"] == "ns.e__late"
    assert total_rows(diverted) == 2


# -- fixed product bugs (regression tests) ------------------------------------------------------


@pytest.mark.process
def test_huge_roll_interval_is_a_user_error(tmp_path: Path) -> None:
    result = run(tmp_path / "wh", "table", "create", "ns.t", *CREATE[:-1], "9999999999d")

    assert_user_error(result, "--roll-every")


@pytest.mark.process
def test_write_a_directory_says_it_is_a_directory(tmp_path: Path) -> None:
    result = run(tmp_path / "wh", "write", "ns.t", tmp_path)

    assert_user_error(result, str(tmp_path), "is a directory")
    assert "does not exist" not in result.message


@pytest.mark.process
def test_error_is_one_line_neither_wrapped_nor_marked_up(tmp_path: Path) -> None:
    missing = tmp_path / ("a-long-directory-name-" * 6) / "[bold]missing:smile:.jsonl"

    result = run(tmp_path / "wh", "write", "ns.t", missing)

    assert_user_error(result)
    assert result.stderr == f"error: file {missing} does not exist\n"


@pytest.mark.process
def test_a_table_whose_log_lost_a_commit_is_refused_and_check_names_it(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    data = write_jsonl(tmp_path / "a.jsonl", {"id": 1, "ts": "2026-01-01T00:00:00Z", "msg": "a"})
    assert run(wh, "table", "create", "ns.t", *CREATE).returncode == 0
    assert run(wh, "write", "ns.t", data).returncode == 0
    healthy = run(wh, "check", "--json")
    assert healthy.json() == {"tables": 1, "errors": 0, "problems": []}
    assert run(wh, "write", "ns.t", data, "--token", "second").returncode == 0
    (wh / "ns" / "t" / "_delta_log" / f"{2:020d}.json").unlink()  # the newest commit file is lost
    with ThreadPoolExecutor(max_workers=3) as pool:
        check, describe, write = pool.map(
            lambda args: run(wh, *args),
            [("check", "--json"), ("table", "describe", "ns.t"), ("write", "ns.t", data, "--token", "third")],
        )
    assert check.returncode == 1 and "Traceback" not in check.stderr
    [problem] = json.loads(check.stdout)["problems"]
    assert (problem["table"], problem["kind"], problem["version"]) == ("ns.t", "log_behind", 2)
    for refused in (describe, write):
        assert_user_error(refused, "table ns.t: the Delta log ends at version 1", "version 2", "backup")


@pytest.mark.process
def test_write_warns_of_fields_the_table_lacks(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    data = write_jsonl(tmp_path / "x.jsonl", {"id": 1, "ts": "2026-01-01T00:00:00Z", "colour": "red"})
    assert run(wh, "table", "create", "ns.t", *CREATE).returncode == 0
    written = run(wh, "write", "ns.t", data)
    assert written.returncode == 0 and "committed chunk" in written.stdout
    assert "warning: fields not in the table were not written: colour (1 records)" in written.message


@pytest.mark.process
def test_write_warns_of_decimals_it_rounded(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    data = write_jsonl(
        tmp_path / "x.jsonl",
        {"id": 1, "ts": "2026-01-01T00:00:00Z", "amount": 9.999},
        {"id": 2, "ts": "2026-01-01T00:00:00Z", "amount": 9.5},
    )
    schema = ["--schema", "id BIGINT, ts TIMESTAMP, amount DECIMAL(10,2)", "--time-column", "ts"]
    assert run(wh, "table", "create", "ns.t", *schema, "--roll-every", "1h").returncode == 0
    written = run(wh, "write", "ns.t", data)
    assert written.returncode == 0 and "committed chunk" in written.stdout, written.stderr
    assert (
        "warning: values with more decimals than their DECIMAL column were rounded: amount (1 values)"
        in written.message
    )
    assert run(wh, "write", "ns.t", data, "--json").json()["rounded_values"] == {"amount": 1}


@pytest.mark.process
def test_an_unusable_warehouse_or_spark_master_is_one_clear_error(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    spark_wh = tmp_path / "wh"
    assert run(spark_wh, "table", "create", "ns.t", *CREATE).returncode == 0
    env = {"STREAMPART_SPARK__MASTER": "bogus://nowhere"}
    with ThreadPoolExecutor(max_workers=3) as pool:
        missing = pool.submit(run, Path("/proc/nope"), "table", "create", "ns.t", *CREATE)
        is_file = pool.submit(run, a_file, "table", "list")
        bogus = pool.submit(run, spark_wh, "query", "SELECT count(*) FROM ns.t", env=env)
    assert_user_error(missing.result(), "opening the warehouse /proc/nope", "STREAMPART_WAREHOUSE")
    assert_user_error(is_file.result(), f"warehouse {a_file}", "not a directory")
    assert_user_error(bogus.result(), "spark.master: Value error, 'bogus://nowhere' is not a Spark master")


@pytest.mark.process
def test_reading_commands_refuse_a_warehouse_or_metastore_that_does_not_exist(tmp_path: Path) -> None:
    """A mistyped --warehouse or --metastore is one error naming it and how to make one, and
    nothing is made; only creating commands (the tour's first, ``table create``) create."""
    from tests.pg import drop_scratch_schema, scratch_schema_url

    typo = tmp_path / "wherehouse"
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": 1, "ts": "2026-11-21T10:00:00Z"}\n')
    reading = [
        ("table", "list"),
        ("table", "describe", "ns.t"),
        ("table", "read", "ns.t"),
        ("chunk", "list", "ns.t"),
        ("check",),
        ("query", "SELECT count(*) FROM ns.t"),
        ("write", "ns.t", str(rows)),
        ("serve", "--port", "0"),
        ("scheduler", "run"),
        ("ingest", "kafka", "ns.t", "--bootstrap", "127.0.0.1:1", "--topic", "t"),
        ("namespace", "list"),
        ("token", "list"),
    ]
    no_file = tmp_path / "nonexistent" / "dir" / "x.sqlite"
    empty = tmp_path / "empty.sqlite"  # a file, but no metastore: read, never changed
    empty.touch()
    empty_pg = scratch_schema_url()  # a database without streampart's schema
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            typos = list(pool.map(lambda args: run(typo, *args, timeout=60), reading))
            bad_sqlite = pool.submit(run, tmp_path, "--metastore", f"sqlite:///{no_file}", "table", "list")
            not_ours = pool.submit(run, tmp_path, "--metastore", f"sqlite:///{empty}", "table", "list")
            bad_pg = pool.submit(run, tmp_path, "--metastore", empty_pg, "check")
            bad_sqlite_result, bad_pg_result = bad_sqlite.result(), bad_pg.result()
        for result in typos:
            assert_user_error(
                result, f"warehouse {typo} does not exist", "STREAMPART_WAREHOUSE", "streampart table create"
            )
        assert not typo.exists()
        assert_user_error(
            bad_sqlite_result, f"metastore sqlite:///{no_file} does not exist", "--metastore", "table create"
        )
        assert not (tmp_path / "nonexistent").exists()
        assert_user_error(not_ours.result(), f"the file {empty} has no streampart schema", "--metastore")
        assert empty.stat().st_size == 0
        assert_user_error(bad_pg_result, "does not exist", "no streampart schema", "--metastore")
        engine = sa.create_engine(empty_pg)
        try:
            with engine.connect() as conn:
                assert not sa.inspect(conn).has_table("alembic_version")  # not migrated
        finally:
            engine.dispose()
    finally:
        drop_scratch_schema(empty_pg)

    # a creating command creates (the README's tour starts with it), then reading works
    assert run(typo, "table", "create", "ns.t", *CREATE).returncode == 0
    assert run(typo, "table", "list", "--json").json()[0]["table"] == "ns.t"


@pytest.mark.process
def test_a_bad_option_of_a_daemon_is_refused_before_it_starts(tmp_path: Path) -> None:
    """Options are settings, validated as the config file and the environment are (not patched in)."""
    cases = [
        (("scheduler", "run", "--metrics-port", "99999"), ("scheduler.metrics_port", "65535")),
        (("scheduler", "run", "--log-format", "xml"), ("scheduler.log_format", "'json' or 'text'")),
        (("serve", "--port", "70000"), ("server.port", "65535")),
    ]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda case: run(tmp_path / "wh", *case[0], timeout=60), cases))

    for result, (_, fragments) in zip(results, cases, strict=True):
        assert_user_error(result, "invalid configuration", *fragments)


@pytest.mark.process
def test_python_m_streampart_runs_the_cli(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    from metastore.catalog import Catalog

    Catalog.open(tmp_path / "wh").close()  # an empty warehouse (reading commands make none)
    proc = subprocess.run(
        [sys.executable, "-m", "streampart", "--warehouse", str(tmp_path / "wh"), "table", "list", "--json"],
        capture_output=True, text=True, cwd=tmp_path, env=environment, timeout=60,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "[]\n", "")


def test_each_call_has_its_own_state(tmp_path: Path) -> None:
    """Two calls in one process: the first one's --json and warehouse do not carry over."""
    from typer.testing import CliRunner

    from metastore.catalog import Catalog
    from streampart.cli import app

    Catalog.open(tmp_path / "b").close()  # an empty warehouse (reading commands make none)
    runner = CliRunner()
    create = ["table", "create", "ns.t", *CREATE, "--json"]
    first = runner.invoke(app, ["--warehouse", str(tmp_path / "a"), *create])
    second = runner.invoke(app, ["--warehouse", str(tmp_path / "b"), "table", "list"])

    assert first.exit_code == 0 and json.loads(first.stdout)["table"] == "ns.t", first.output
    assert (second.exit_code, second.stdout) == (0, "no tables\n")


@pytest.mark.process
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_interrupted_write_lets_its_chunk_go_and_says_nothing_was_committed(
    tmp_path: Path, how: str
) -> None:
    """Ctrl-C (exit 130) or SIGTERM (143) while a chunk is staged: it is aborted at once, not left
    reserved until its timeout, and the command says nothing was committed."""
    import signal as signals

    wh = tmp_path / "wh"
    assert run(wh, "table", "create", "ns.events", *CREATE).returncode == 0
    data = tmp_path / "rows.jsonl"
    data.write_text('{"id": 1, "ts": "2026-11-21T10:00:00Z", "msg": "x"}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    env["STREAMPART_PAUSEPOINT"] = "chunk-before-record-files:30"
    proc = subprocess.Popen(
        [*COMMAND, "--warehouse", str(wh), "write", "ns.events", str(data)],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "pausepoint chunk-before-record-files" in line, line
    proc.send_signal(getattr(signals, how))
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == (130 if how == "SIGINT" else 143), err
    assert "interrupted: nothing was committed (chunk" in err and "Traceback" not in err
    chunks = run(wh, "chunk", "list", "ns.events", "--json").json()
    assert [c["state"] for c in chunks] == ["aborted"]
    assert describe(wh, "ns.events")["partitions"] == [] or total_rows(describe(wh, "ns.events")) == 0


@pytest.mark.process
def test_what_a_newcomer_is_told_when_nothing_happens(tmp_path: Path) -> None:
    """A roll with nothing due says when the open partition is due; a write answered by an earlier
    commit of the same key and content says nothing was added; an ingest job's status shows its lag
    in seconds as well as in records."""
    from metastore.catalog import Catalog

    wh = tmp_path / "wh"
    assert run(wh, "table", "create", "ns.events", *CREATE).returncode == 0
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": 1, "ts": "2026-11-21T10:00:00Z", "msg": "x"}\n')
    first = run(wh, "write", "ns.events", rows, "--key", "k1")
    again = run(wh, "write", "ns.events", rows, "--key", "k1")
    assert first.returncode == again.returncode == 0 and "nothing added" not in first.stderr
    assert "already committed under key 'k1' with the same content: nothing added" in again.stderr
    rolled = run(wh, "roll", "ns.events", "--now", "2000-01-01T00:00:00Z")
    assert rolled.returncode == 0
    said = r"ns\.events: nothing to roll \(\S+ is due at \S+; --force rolls it now\)"
    assert re.search(said, rolled.stdout), rolled.stdout
    catalog = Catalog.open(wh)
    catalog.store.publish_ingest_status(
        "shop", {"topics": {"orders": {"state": "reading", "table": "ns.events", "lag_records": 12,
                                       "lag_seconds": 340.2, "last_error": None}}},
    )  # fmt: skip
    catalog.close()
    status = run(wh, "ingest", "status", "shop")
    assert status.returncode == 0, status.stderr
    assert re.search(r"orders\s.*\b12\b.*\b340\b", status.stdout), status.stdout


@pytest.mark.process
def test_python_without_streampart_installed_says_which_virtualenv(tmp_path: Path) -> None:
    """`python -m streampart` from a Python without its dependencies (no site-packages here): one line
    saying to activate the virtualenv, not a traceback."""
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "streampart", "--help"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        timeout=60,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "source .venv/bin/activate" in proc.stderr
