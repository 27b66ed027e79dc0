"""Two ``streampart serve`` processes on one table; one dies mid-commit (issue 25).

A producer retrying the same idempotency key on the other server used to get 409 ``chunk_busy``
until twice ``chunk.commit_timeout`` (two minutes by default) had passed. The dead server's
commit-holder lease lapses seconds after its death, and the retry then takes the commit over.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from ingest.client import Client, Retrying
from ingest.commit_holders import GRACE, TTL
from metastore.models import ChunkState
from tests.api.fixtures import Server
from tests.fixtures import make_table
from tests.helpers import all_ids, duplicates, records


@pytest.mark.process
@pytest.mark.parametrize("point", ["chunk-before-delta-commit", "chunk-after-delta-commit"])
def test_a_retry_on_another_server_takes_over_a_dead_servers_commit_in_seconds(
    metastore_url: str, tmp_path: Path, point: str
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = Server(tmp_path / "wh", metastore_url, tmp_path / "a")  # the default commit timeout: 60 s
    b = Server(tmp_path / "wh", metastore_url, tmp_path / "b")
    try:
        table = make_table(a.catalog, "ns.events")
        admin = a.token("admin", "admin:*")
        a.start(crashpoint=point)
        b.start()
        dying = Client(a.url, admin, backoff=0.05, max_backoff=0.3, retry_for=2)
        box: dict[str, BaseException] = {}

        def write_to_a() -> None:
            try:
                dying.write("ns.events", records(range(100)), idempotency_key="k")
            except BaseException as exc:  # its server died under it
                box["error"] = exc

        thread = threading.Thread(target=write_to_a, daemon=True)
        thread.start()
        assert a.proc is not None
        a.proc.wait(60)
        assert a.proc.returncode == -9  # killed at the crash point, holding the commit
        died = time.monotonic()
        chunk = a.catalog.store.find_chunk_by_key(table.id, "k")
        assert chunk is not None and chunk.state is ChunkState.COMMITTING and chunk.holder is not None
        busy: list[Retrying] = []
        api = Client(b.url, admin, backoff=0.1, max_backoff=1.0, on_retry=busy.append)
        result = api.write("ns.events", records(range(100)), idempotency_key="k")
        waited = time.monotonic() - died
        api.close()
        thread.join(30)
        dying.close()
        assert busy and "being committed by another attempt" in busy[0].problem  # busy at first …
        assert waited < (TTL + GRACE).total_seconds() + 8, waited  # … for seconds, not 2 × 60 s
        assert result["chunk"] == chunk.id
        ids = all_ids(table)
        assert sorted(ids) == list(range(100)) and duplicates(ids) == []
        assert a.catalog.store.get_chunk(chunk.id).state is ChunkState.COMMITTED
    finally:
        b.close()
        a.close()
