"""``streampart write --url`` against a server that does not answer: it says at once on stderr what
it retries and for how long at most, then fails with one error (a real process, a closed port)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.client import DEFAULT_RETRY_FOR, ApiUnavailableError, Client, Retrying
from metastore.durations import parse_duration
from streampart.cli.write import RETRY_FOR

_SCRIPT = Path(sys.executable).parent / "streampart"
COMMAND = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "streampart.cli"]


def _closed_port() -> int:
    with socket.socket() as s:  # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_cli_default_is_the_clients() -> None:
    assert parse_duration(RETRY_FOR).total_seconds() == DEFAULT_RETRY_FOR


@pytest.mark.process
def test_write_url_says_at_once_that_it_retries_then_fails_once(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": 1, "ts": "2026-11-21T10:00:00Z"}\n')
    url = f"http://127.0.0.1:{_closed_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")} | {"COLUMNS": "300"}
    args = [*COMMAND, "--warehouse", str(tmp_path / "wh"), "write", "ns.t", str(rows), "--url", url]
    with subprocess.Popen(
        [*args, "--retry-for", "3s"], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    ) as proc:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the notice comes before the retries, not after them
        still_retrying = proc.poll() is None
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 1
    assert f"no answer from POST {url}/v1/tables/ns/t/chunks" in first
    assert "retrying for up to 3 s (--retry-for; waits of 0.1 s doubling to 5 s)" in first
    assert still_retrying  # told while it retries (3 s of them), not at the end
    lines = rest.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: POST "), rest
    assert "attempts, retrying for up to 3 s): ConnectError" in lines[0]
    assert "Traceback" not in rest

    once = subprocess.run([*args, "--retry-for", "0"], capture_output=True, text=True, env=env, timeout=60)
    assert once.returncode == 1
    assert once.stderr.startswith("error: ") and "not retried" in once.stderr
    assert len(once.stderr.strip().splitlines()) == 1

    bad = subprocess.run([*args, "--retry-for", "soon"], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 1 and "--retry-for 'soon' is not a duration" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_client_tells_its_hook_once_per_call() -> None:
    told: list[Retrying] = []
    url = f"http://127.0.0.1:{_closed_port()}"
    with (
        Client(url, retry_for=0.5, backoff=0.05, on_retry=told.append) as api,
        pytest.raises(ApiUnavailableError, match=r"attempts, retrying for up to 0.5 s\): ConnectError"),
    ):
        api.health()
    assert len(told) == 1
    assert (told[0].method, told[0].url, told[0].retry_for) == ("GET", f"{url}/healthz", 0.5)
    assert told[0].problem.startswith("ConnectError")


@pytest.mark.process
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_interrupted_write_url_lets_its_chunk_go(tmp_path: Path, how: str) -> None:
    """Ctrl-C (130) or SIGTERM (143) while the server stages the upload: the client aborts the chunk
    over the API at once (not left reserved for its timeout) and says nothing was committed."""
    import signal
    import time

    from metastore.models import ChunkState
    from tests.api.fixtures import Server
    from tests.fixtures import make_table

    srv = Server(tmp_path / "wh", f"sqlite:///{tmp_path / 'wh' / '_metastore.sqlite'}", tmp_path)
    try:
        table = make_table(srv.catalog, "ns.events")
        token = srv.token("loader", "write:ns")
        srv.start(STREAMPART_PAUSEPOINT="chunk-before-record-files:30")  # the upload stalls there
        data = tmp_path / "rows.jsonl"
        data.write_text('{"id": 1, "ts": "2026-11-21T10:00:00Z", "msg": "x"}\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
        proc = subprocess.Popen(
            [*COMMAND, "write", "ns.events", str(data), "--url", srv.url, "--api-token", token],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while "pausepoint chunk-before-record-files" not in srv.log.read_text(errors="replace"):
            assert time.monotonic() < deadline and proc.poll() is None, srv.log.read_text()
            time.sleep(0.1)
        proc.send_signal(getattr(signal, how))
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == (130 if how == "SIGINT" else 143), err
        assert "interrupted: nothing was committed (chunk" in err and "Traceback" not in err, err
        [chunk] = srv.catalog.store.list_chunks(table.id)
        assert chunk.state is ChunkState.ABORTED
    finally:
        srv.close()
