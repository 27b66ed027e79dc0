"""Group commit through a real ``streampart serve``: producers' commits that arrive together land
in one Delta commit, each answered with its own chunk (see ingest/chunks/group_commit.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from ingest.client import Client
from metastore.delta.log import commit_chunks, commit_info
from metastore.models import ChunkState
from tests.api.fixtures import Server
from tests.fixtures import make_table
from tests.helpers import all_ids, records, wait_for


@pytest.fixture
def paused_server(tmp_path: Path) -> Any:
    """A server whose every group commit dwells 1 s before its Delta commit (a slow disk)."""
    srv = Server(
        tmp_path / "warehouse", f"sqlite:///{tmp_path / 'warehouse' / '_metastore.sqlite'}", tmp_path
    )
    make_table(srv.catalog, "ns.events")
    token = srv.token("writer", "write:ns")
    srv.start(STREAMPART_PAUSEPOINT="chunk-before-delta-commit:1.0")
    yield srv, token
    srv.close()


@pytest.mark.process
def test_producers_committing_together_share_one_delta_commit_each_answered_with_its_own_chunk(
    paused_server: Any,
) -> None:
    srv, token = paused_server
    catalog = srv.catalog
    table = catalog.table("ns.events")
    answers: dict[str, dict[str, Any]] = {}
    with Client(srv.url, token) as client:
        chunks = []
        for k in range(5):
            chunk = client.open_chunk("ns.events", idempotency_key=f"p{k}")["id"]
            client.upload(chunk, records(range(k * 10, k * 10 + 10)))
            chunks.append(chunk)

        def commit(chunk: str) -> None:
            answers[chunk] = client.commit(chunk)

        first = threading.Thread(target=commit, args=(chunks[0],))
        first.start()
        wait_for(
            lambda: catalog.store.get_chunk(chunks[0]).state is ChunkState.COMMITTING, "the first commit"
        )
        rest = [threading.Thread(target=commit, args=(c,)) for c in chunks[1:]]
        for t in rest:
            t.start()
        for t in [first, *rest]:
            t.join(60)
        retried = client.commit(chunks[3])
    infos = [commit_info(table, v) or {} for v in (1, 2)]
    assert [sorted(commit_chunks(i)) for i in infos] == [[chunks[0]], sorted(chunks[1:])]
    assert {answers[c]["chunk"]: answers[c]["version"] for c in chunks} == {
        c: 1 if c == chunks[0] else 2 for c in chunks
    }
    assert all(answers[c]["rows"] == 10 for c in chunks)
    assert retried == answers[chunks[3]]  # a retried commit answers its chunk's own commit
    assert sorted(all_ids(table)) == list(range(50))
