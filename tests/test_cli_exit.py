"""How a ``streampart`` process ends: with its command's status, and only once the work the
command started in the background (a Delta checkpoint after a commit) is done, as at an
interpreter's normal exit (the command line ends its process itself, skipping native libraries'
static destructors: ``streampart.cli.root.leave``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def streampart(wh: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    env |= {"STREAMPART_WAREHOUSE": str(wh), "TZ": "UTC"}
    return subprocess.run(
        [sys.executable, "-m", "streampart", *args], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.process
def test_a_checkpoint_the_command_started_is_written_before_the_process_ends(tmp_path: Path) -> None:
    wh, rows = tmp_path / "wh", tmp_path / "rows.jsonl"
    rows.write_text("".join(f'{{"id": {i}, "ts": "2026-11-21T10:00:00Z"}}\n' for i in range(50)))
    for args in [
        (
            "table",
            "create",
            "ns.t",
            "--schema",
            "id BIGINT, ts TIMESTAMP",
            "--time-column",
            "ts",
            "--roll-every",
            "1h",
        ),
        ("table", "alter", "ns.t", "--checkpoint-interval", "1"),  # every commit checkpoints
    ]:
        done = streampart(wh, *args)
        assert done.returncode == 0, done.stderr
    before = set(wh.rglob("_delta_log/*.checkpoint.parquet"))
    done = streampart(wh, "write", "ns.t", str(rows))
    assert done.returncode == 0, done.stderr
    # the write's checkpoint runs in a thread of its own after the commit, off the commit path
    made = set(wh.rglob("_delta_log/*.checkpoint.parquet")) - before
    assert made, f"no checkpoint after the write's commit: {sorted(p.name for p in before)}"


@pytest.mark.process
def test_the_status_is_the_commands(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    done = streampart(wh, "table", "list")  # no warehouse yet: the user's mistake, in one line
    assert (done.returncode, done.stderr.count("\n")) == (1, 1), done.stderr
    assert "does not exist" in done.stderr
    assert streampart(wh, "table", "frobnicate").returncode == 2  # a usage error, as click says
    done = streampart(wh, "namespace", "create", "ns")
    assert done.returncode == 0, done.stderr
    assert streampart(wh, "table", "list").returncode == 0


@pytest.mark.process
def test_an_idle_thread_pool_does_not_hold_the_process(tmp_path: Path) -> None:
    """A thread pool nobody shut down (an idle worker waiting for work) is told to stop at exit, as
    the interpreter does, rather than joined forever."""
    script = (
        "import concurrent.futures, sys\n"
        "pool = concurrent.futures.ThreadPoolExecutor(2)\n"
        "pool.submit(lambda: None).result()\n"
        "sys.argv = ['streampart', '--version']\n"
        "from streampart.cli import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.startswith("streampart ")) == (0, True), done.stderr


@pytest.mark.process
def test_a_metastore_that_refuses_connections_is_one_line(tmp_path: Path) -> None:
    """PostgreSQL's driver words a refused connection over two lines: the CLI says it in one."""
    from tests.private_pg import free_port

    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing"
    (tmp_path / "wh").mkdir()
    done = streampart(tmp_path / "wh", "--metastore", url, "table", "list")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "is unavailable" in done.stderr and "Connection refused" in done.stderr, done.stderr


def test_a_listing_of_the_log_that_raced_a_commit_is_one_retriable_line() -> None:
    """delta-rs' listing of a big ``_delta_log`` may miss a commit file being added (readdir promises
    nothing of entries added meanwhile) and say, over several lines, that the log has a gap: a
    command it escapes is told so in one line, as a conflict to run again, never as damage."""
    from deltalake.exceptions import DeltaError

    from metastore.errors import ConflictError
    from streampart.cli.root import _store_fault

    raced = DeltaError(
        "Generic delta kernel error: Expected contiguous commit files, but found gap\n"
        "  versions: [2026, 2028]"
    )
    said = _store_fault(raced)
    assert isinstance(said, ConflictError), said
    assert "\n" not in str(said) and "run the command again" in str(said) and "damaged" in str(said)
    assert _store_fault(DeltaError("Generic delta kernel error: something else")) is None
