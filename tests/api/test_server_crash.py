"""kill -9 of the API server mid-upload and mid-commit, then a restart (invariant 6).

Acknowledged chunks are all there, exactly once; an unacknowledged one is wholly there or not
at all; and the client's retry (same idempotency key, same chunk) resolves which, landing it
once. The server dies at named crash points of the commit (metastore/crashpoints.py) or by
SIGKILL from outside while a body is streaming in.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ingest.client import Client
from metastore.models import ChunkState
from tests.api.fixtures import Server
from tests.fixtures import make_table
from tests.helpers import all_ids, duplicates, records, wait_for

# Why 0.5 s: a commit left COMMITTING by a dead server is taken over by a retry after twice the
# commit timeout; short here so the client's retry resolves within a second.
FAST = {"STREAMPART_CHUNK__COMMIT_TIMEOUT": "PT0.5S"}


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path / "wh", f"sqlite:///{tmp_path / 'wh' / '_metastore.sqlite'}", tmp_path, FAST)
    make_table(s.catalog, "ns.events")
    s.admin = s.token("admin", "admin:*")
    yield s
    s.close()


def _ids(k: int) -> range:
    return range(k * 100, k * 100 + 100)


def _run(target: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = target()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


# Where the server dies in the third commit, and what is visible before the client's retry.
COMMIT_CRASHES = [
    # COMMITTING recorded, Delta commit not made: nothing of the chunk is visible
    ("chunk-before-delta-commit", False),
    # Delta commit made, metastore not told, answer never sent: the chunk is wholly visible
    ("chunk-after-delta-commit", True),
]


@pytest.mark.process
@pytest.mark.parametrize("point, landed", COMMIT_CRASHES)
def test_server_killed_mid_commit_then_restarted_the_retry_lands_once(
    srv: Server, point: str, landed: bool
) -> None:
    table = srv.catalog.table("ns.events")
    srv.start(crashpoint=f"{point}@3")
    api = Client(srv.url, srv.admin, backoff=0.05, max_backoff=0.3)
    acked = [api.write("ns.events", records(_ids(k)), idempotency_key=f"k{k}") for k in (0, 1)]
    thread, box = _run(lambda: api.write("ns.events", records(_ids(2)), idempotency_key="k2"))
    assert srv.proc is not None
    srv.proc.wait(30)
    assert srv.proc.returncode == -9  # died at the crash point, mid-commit
    chunk = srv.catalog.store.find_chunk_by_key(table.id, "k2")
    assert chunk is not None and chunk.state is ChunkState.COMMITTING
    visible = set(all_ids(table))
    assert set(_ids(2)) <= visible if landed else not set(_ids(2)) & visible  # wholly or not at all
    assert set(_ids(0)) | set(_ids(1)) <= visible  # acknowledged before the crash
    time.sleep(0.5)
    srv.start()  # no crash point now; the client has been retrying all along
    thread.join(60)
    assert not thread.is_alive() and "error" not in box, box.get("error")
    assert box["result"]["chunk"] == chunk.id
    acked.append(box["result"])
    acked.append(api.write("ns.events", records(_ids(3)), idempotency_key="k3"))
    api.close()
    ids = all_ids(table)
    assert not duplicates(ids) and sorted(ids) == [i for k in range(4) for i in _ids(k)]
    assert all(srv.catalog.store.get_chunk(a["chunk"]).state is ChunkState.COMMITTED for a in acked)


@pytest.mark.process
def test_server_killed_mid_upload_then_restarted_the_retry_lands_once(srv: Server) -> None:
    table = srv.catalog.table("ns.events")
    srv.start()
    api = Client(srv.url, srv.admin, backoff=0.05, max_backoff=0.3)
    acked = api.write("ns.events", records(_ids(0)), idempotency_key="before")
    content = records(_ids(1))
    attempts: list[int] = []

    def slowly() -> Iterator[bytes]:
        attempts.append(1)
        first = len(attempts) == 1
        for k in range(0, len(content), 512):
            yield content[k : k + 512]
            if first:
                time.sleep(0.05)  # the first attempt trickles in: the server dies under it

    thread, box = _run(lambda: api.write("ns.events", slowly, idempotency_key="during"))
    staging = Path(table.location) / "_staging"
    spool = wait_for(lambda: list(staging.glob(".*-upload-*.tmp")))
    srv.kill()
    chunk = srv.catalog.store.find_chunk_by_key(table.id, "during")
    assert chunk is not None and chunk.state is ChunkState.RESERVED and chunk.files == ()
    # the half-written spool file belongs to the chunk by name, so housekeeping removes it
    assert spool[0].name.startswith(f".{chunk.id}-upload-")
    assert sorted(all_ids(table)) == list(_ids(0))  # acknowledged: there; in flight: not at all
    srv.start()
    thread.join(60)
    assert not thread.is_alive() and "error" not in box, box.get("error")
    assert len(attempts) >= 2 and box["result"]["chunk"] == chunk.id
    api.close()
    ids = all_ids(table)
    assert not duplicates(ids) and sorted(ids) == [*_ids(0), *_ids(1)]
    assert acked["chunk"] != chunk.id


@pytest.mark.process
def test_kill_9_at_a_random_instant_under_concurrent_producers(srv: Server) -> None:
    """Four producers keep writing; the server dies at a random instant and comes back."""
    table = srv.catalog.table("ns.events")
    srv.start()
    stop = threading.Event()
    acked: list[dict[str, Any]] = []
    lock = threading.Lock()

    def producer(p: int) -> None:
        api = Client(srv.url, srv.admin, backoff=0.05, max_backoff=0.3)
        k = 0
        while not stop.is_set():
            n = p * 1000 + k
            result = api.write("ns.events", records(_ids(n)), idempotency_key=f"p{p}-{k}")
            with lock:
                acked.append({**result, "n": n})
            k += 1
        api.close()

    threads = [_run(lambda p=p: producer(p)) for p in range(4)]
    time.sleep(random.uniform(1.5, 3.0))
    srv.kill()
    killed_at = len(acked)
    time.sleep(0.5)
    srv.start()
    time.sleep(2.0)
    stop.set()
    for thread, box in threads:
        thread.join(90)
        assert not thread.is_alive() and "error" not in box, box.get("error")
    assert len(acked) > killed_at  # producers carried on after the restart
    ids = all_ids(table)
    assert not duplicates(ids)
    for a in acked:  # every acknowledged chunk, exactly once
        assert set(_ids(a["n"])) <= set(ids)
    # every chunk the server ever opened is wholly there (committed) or not at all
    present = set(ids)
    for chunk in srv.catalog.store.list_chunks(table.id):
        assert chunk.idempotency_key is not None  # the producers name every chunk they open
        who, k = chunk.idempotency_key.split("-")
        rows = set(_ids(int(who[1:]) * 1000 + int(k)))
        if chunk.state is ChunkState.COMMITTED:
            assert rows <= present
        else:
            assert not rows & present


@pytest.mark.process
def test_an_upload_retried_while_the_chunk_commits_leaves_the_commit_whole(srv: Server) -> None:
    """A retried upload passes its state check and stalls; the commit runs; the upload wakes.

    It must not delete or replace the files the commit added (it did: the chunk was committed
    with its files gone, or wedged COMMITTING), and its own files must go.
    """
    table = srv.catalog.table("ns.events")
    srv.start(STREAMPART_PAUSEPOINT="chunk-before-record-files@2:4")  # the second upload stalls
    headers = {"Authorization": f"Bearer {srv.admin}"}
    ndjson = {**headers, "content-type": "application/x-ndjson"}

    def put(ids: range) -> httpx.Response:
        return httpx.put(f"{srv.url}/v1/chunks/{cid}/data", content=records(ids), headers=ndjson, timeout=60)

    cid = httpx.post(
        f"{srv.url}/v1/tables/ns/events/chunks", json={"idempotency_key": "k"}, headers=headers
    ).json()["id"]
    assert put(_ids(0)).status_code < 300
    thread, box = _run(lambda: put(_ids(1)))
    wait_for(lambda: "pausepoint chunk-before-record-files" in srv.log.read_text(errors="replace"))
    commit = httpx.post(f"{srv.url}/v1/chunks/{cid}/commit", headers=headers, timeout=60)
    assert commit.status_code == 200 and commit.json()["rows"] == 100, commit.text
    thread.join(60)
    assert box["result"].status_code == 409, box["result"].text
    assert sorted(all_ids(table)) == list(_ids(0))  # the committed files are there and readable
    chunk = srv.catalog.store.get_chunk(cid)
    # the committed files are placed in their partition's staging directory (by name: the same files)
    staged = {p.name for p in (Path(table.location) / "_staging").rglob("*") if p.is_file()}
    assert staged == {Path(f.path).name for f in chunk.files}  # the stalled upload's files went
