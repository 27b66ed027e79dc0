"""Helpers for reading what a table holds, independently of streampart's Spark path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pyarrow as pa

from metastore.models import Table
from metastore.progress import Progress

if TYPE_CHECKING:
    from metastore.catalog import Catalog

T = TypeVar("T")


def delta_rows(table: Table, version: int | None = None, columns: str = "id, ts_period") -> pa.Table:
    """The table's rows read by delta-rs' own query engine (an independent Delta reader)."""
    from deltalake import DeltaTable, QueryBuilder

    from metastore.storage import delta_options

    options = delta_options(table.location)  # a table in a bucket: the AWS variables the tests set
    dt = DeltaTable(table.location, version=version, storage_options=options)
    return pa.table(QueryBuilder().register("t", dt).execute(f"SELECT {columns} FROM t").read_all())


def ids_by_partition(table: Table, version: int | None = None) -> dict[datetime, list[int]]:
    rows = delta_rows(table, version)
    out: dict[datetime, list[int]] = {}
    for i, p in zip(rows.column("id").to_pylist(), rows.column("ts_period").to_pylist(), strict=True):
        out.setdefault(p, []).append(i)
    return out


def delta_file_paths(table: Table, version: int | None = None) -> list[str]:
    """The data files (relative, decoded) that delta-rs lists for the table's version."""
    from urllib.parse import unquote

    from deltalake import DeltaTable

    from metastore.storage import delta_options

    dt = DeltaTable(table.location, version=version, storage_options=delta_options(table.location))
    return [unquote(p) for p in pa.table(dt.get_add_actions()).column("path").to_pylist()]


def all_ids(table: Table, version: int | None = None) -> list[int]:
    return delta_rows(table, version, "id").column("id").to_pylist()


def duplicates(ids: list[int]) -> list[int]:
    return [i for i, n in Counter(ids).items() if n > 1]


def jsonl(rows: list[dict]) -> bytes:
    return ("\n".join(json.dumps(r) for r in rows) + "\n").encode()


def records(ids: range | list[int], ts: str = "2026-11-21T10:15:00Z") -> bytes:
    return jsonl([{"id": i, "ts": ts, "msg": f"m{i}"} for i in ids])


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def worker_call(
    catalog: Catalog, table: Table, *args: str, crashpoint: str | None = None, pausepoint: str | None = None
) -> dict[str, Any]:
    """Arguments for ``subprocess.run``/``Popen`` of ``python -m tests.workers`` on ``table``.

    ``crashpoint``: where it SIGKILLs itself; ``pausepoint``: ``STEP:SECONDS`` where a roll dwells.
    """
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("STREAMPART_CRASHPOINT", None)
    env.pop("STREAMPART_PAUSEPOINT", None)
    if crashpoint:
        env["STREAMPART_CRASHPOINT"] = crashpoint
    if pausepoint:
        env["STREAMPART_PAUSEPOINT"] = pausepoint
    argv = [sys.executable, "-m", "tests.workers", *args, "--warehouse", str(catalog.warehouse.root),
            "--metastore", catalog.store.url, "--table", str(table.name)]  # fmt: skip
    return {"args": argv, "cwd": ROOT, "env": env, "text": True}


def cli_process(
    catalog: Catalog, *args: str, crashpoint: str | None = None, pausepoint: str | None = None
) -> subprocess.Popen[str]:
    """``streampart --warehouse … --metastore … ARGS --json`` in a process of its own (``crashpoint``:
    where it SIGKILLs itself; ``pausepoint``: ``STEP:SECONDS`` where it dwells)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    if crashpoint:
        env["STREAMPART_CRASHPOINT"] = crashpoint
    if pausepoint:
        env["STREAMPART_PAUSEPOINT"] = pausepoint
    argv = [sys.executable, "-m", "streampart.cli", "--warehouse", str(catalog.warehouse.root),
            "--metastore", catalog.store.url, *args, "--json"]  # fmt: skip
    return subprocess.Popen(
        argv, env=env, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def wait_for(
    cond: Callable[[], T | Literal[False] | None],
    what: str = "the condition",
    timeout: float = 30.0,
    interval: float = 0.1,
) -> T:
    """Poll ``cond`` until it returns something truthy (returned), or fail after ``timeout`` seconds.

    What it returns is truthy, so never ``False`` or ``None``: ``wait_for(lambda: ok() and value)``
    is typed as ``value``'s type."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (Linux: ``SigCgt`` in
    ``/proc/<pid>/status``); False once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(mask, 16) >> (signum - 1) & 1)


@contextmanager
def downgraded(metastore_url: str, revision: str) -> Iterator[Any]:
    """Take the metastore down to migration ``revision`` (a warehouse made by an older release);
    yields the connection, inside the downgrade's transaction, to look at the old schema."""
    from alembic import command
    from alembic.config import Config

    from metastore.store import Metastore
    from metastore.store.engine import MIGRATIONS

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    old = Metastore(metastore_url, migrate=False)
    try:
        with old.tx() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, revision)
            yield conn
    finally:
        old.close()


class Recorder(Progress):
    """Every report, in order: each piece of work begun, and what was advanced under it."""

    def __init__(self) -> None:
        self.started: list[tuple[str, int | None, str]] = []
        self.advanced: list[list[int]] = []

    def start(self, description: str, total: int | None, unit: str = "") -> None:
        self.started.append((description, total, unit))
        self.advanced.append([])

    def advance(self, amount: int = 1) -> None:
        assert self.started, "advanced before any work began"
        self.advanced[-1].append(amount)


@contextmanager
def sql_server(
    warehouse: Path | str, env: dict[str, str], log_path: Path, timeout: float = 240, port: int | None = None
) -> Iterator[Any]:
    """A real ``streampart sql-server`` process serving ``warehouse`` on a free loopback port, its
    output in ``log_path``; yields its ``ServerInfo`` once it listens, and stops it (SIGTERM) after.
    (For a warehouse in a bucket, the server's file is in ``Warehouse.local_dir``, as this process
    sees it: give ``env`` the same ``XDG_STATE_HOME``.)"""
    import signal
    import subprocess
    import sys

    from metastore.delta.warehouse import Warehouse
    from streampart.sql_endpoint import ServerInfo, running_server
    from tests.private_pg import free_port

    here = Warehouse(str(warehouse)).local_dir
    with log_path.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streampart", "sql-server", "--port", str(port or free_port())],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        info = wait_for(
            lambda: proc.poll() is not None or running_server(here),
            "the SQL server to listen",
            timeout=timeout,
        )
        if proc.poll() is not None or not isinstance(info, ServerInfo):
            raise AssertionError(log_path.read_text())
        yield info
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def assert_gone_early_flagged(catalog: Catalog, table: Table, path: Path) -> None:
    """``streampart check``'s ``file_gone_early``: an error while ``path`` (a file that a version time
    travel still reads lists) is away, and nothing once it is back."""
    from metastore.integrity import check_table

    away = path.with_name(".away-" + path.name)
    path.rename(away)
    try:
        [problem] = [p for p in check_table(catalog, table) if p.kind == "file_gone_early"]
        assert problem.severity == "error" and path.name in problem.message, problem
    finally:
        away.rename(path)
    assert not [p for p in check_table(catalog, table) if p.kind == "file_gone_early"]


def live_adds(location: str) -> dict[str, dict[str, Any]]:
    """Each live file's add action, from the Delta log's commit files themselves (not a library's
    reading of them), by the path the log gives."""
    live: dict[str, dict[str, Any]] = {}
    for commit in sorted(Path(location, "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return live


def live_stats(location: str) -> dict[str, dict[str, Any]]:
    """Each live file's add ``stats``, parsed (:func:`live_adds`)."""
    return {path: json.loads(add["stats"]) for path, add in live_adds(location).items()}


def checked_stats(location: str) -> dict[str, dict[str, Any]]:
    """:func:`live_stats`, each checked against its file's rows as pyarrow reads the Parquet file:
    the row count, every null count given, and every bound given (a timestamp's to the millisecond,
    the minimum rounded down and the maximum up; a date's as its ISO day)."""
    import urllib.parse
    from datetime import date, timedelta

    import pyarrow.parquet as pq

    def ms(value: datetime, up: bool) -> str:
        kept = value - timedelta(microseconds=value.microsecond % 1000)
        if up and kept != value:
            kept += timedelta(milliseconds=1)
        return kept.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    live = live_stats(location)
    for path, stats in live.items():
        data = pq.read_table(Path(location, urllib.parse.unquote(path)))
        assert stats["numRecords"] == data.num_rows, path
        for column, nulls in stats.get("nullCount", {}).items():
            held = data.column(column).null_count if column in data.column_names else data.num_rows
            assert nulls == held, (path, column)
        for column, low in stats.get("minValues", {}).items():
            values = [v for v in data.column(column).to_pylist() if v is not None]
            want_low, want_high = min(values), max(values)
            if isinstance(want_low, datetime):
                want_low, want_high = ms(want_low, up=False), ms(want_high, up=True)
            elif isinstance(want_low, date):
                want_low, want_high = want_low.isoformat(), want_high.isoformat()
            assert (low, stats["maxValues"][column]) == (want_low, want_high), (path, column)
    return live


def run_script(main: Callable[[], None]) -> None:
    """Run a test's worker script's ``main`` and end the process as the CLI does
    (:func:`streampart.cli.root.leave`): past its work, Arrow's C++ thread pools could otherwise abort
    the process at exit (status -6, apache/arrow#34314), failing a test whose work was done. An
    exception is printed and ends it with status 1, as the interpreter would."""
    import traceback

    from streampart.cli.root import leave

    try:
        main()
    except SystemExit as exc:
        leave(exc.code)
    except BaseException:
        traceback.print_exc()
        leave(1)
    leave(0)


SCRIPT_END = "import os, sys; sys.stdout.flush(); sys.stderr.flush(); os._exit(0)\n"
"""The last line of a ``python -c`` script a test runs that touches pyarrow: once its output is out,
the process ends without the teardown where Arrow's thread pools can abort it (see
:func:`run_script`)."""
