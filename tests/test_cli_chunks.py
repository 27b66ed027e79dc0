"""``streampart chunk list|show|abort`` on SQLite and PostgreSQL metastores (``--metastore``).

In process through typer's ``CliRunner``; the chunks in every state are made with the chunk
protocol itself (``ChunkWriter``), as a producer would leave them. An abort is checked where it
matters: the metastore's state and the staged files on disk; a refusal changes nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.errors import StreampartError
from metastore.models import Chunk, ChunkState, Table
from streampart.cli import app
from tests.helpers import all_ids, records

CREATE = ["--schema", "id BIGINT, ts TIMESTAMP, msg STRING", "--time-column", "ts", "--roll-every", "1h"]


@dataclass
class Env:
    wh: Path
    url: str
    catalog: Catalog

    def cli(self, *args: str) -> tuple[int, str]:
        """One call; a StreampartError becomes what ``main`` prints (exit 1, one line)."""
        result = CliRunner().invoke(app, ["--warehouse", str(self.wh), "--metastore", self.url, *args])
        exc = result.exception
        if exc is not None and not isinstance(exc, SystemExit):
            assert isinstance(exc, StreampartError), exc
            return 1, f"error: {exc}"
        return result.exit_code, result.stdout

    def json(self, *args: str) -> Any:
        code, out = self.cli(*args, "--json")
        assert code == 0, out
        return json.loads(out)

    def chunk(self, chunk_id: str) -> Chunk:
        return self.catalog.store.get_chunk(chunk_id)


@pytest.fixture
def env(metastore_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    for key in list(os.environ):
        if key.startswith("STREAMPART_") and key != "STREAMPART_TEST_PG":
            monkeypatch.delenv(key)
    wh = tmp_path / "wh"
    catalog = Catalog.open(wh, metastore_url)
    try:
        yield Env(wh, metastore_url, catalog)
    finally:
        catalog.close()


def _staged(writer: ChunkWriter, key: str, ids: range) -> Chunk:
    """A reserved chunk with its rows staged (as a producer leaves it before committing)."""
    chunk = writer.reserve(key)
    return writer.stage(chunk, records(ids), Format.JSONL)


@pytest.fixture
def chunks(env: Env) -> dict[str, Chunk]:
    """ns.t with a chunk in each state: two committed, one reserved, one committing, one aborted."""
    assert env.cli("table", "create", "ns.t", *CREATE)[0] == 0
    table = env.catalog.table("ns.t")
    writer = ChunkWriter(env.catalog, table)
    out: dict[str, Chunk] = {}
    out["first"] = env.chunk(writer.write(records(range(3)), Format.JSONL, key="first").chunk)
    out["second"] = env.chunk(writer.write(records(range(3, 8)), Format.JSONL, key="second").chunk)
    out["aborted"] = writer.abort(_staged(writer, "given-up", range(100, 102)).id)
    staged = _staged(writer, "committing", range(200, 204))
    # a writer that began its commit and stopped there (its process died, say)
    out["committing"] = env.catalog.store.begin_commit(staged, int(env.catalog.load(table).version()))
    out["reserved"] = _staged(writer, "open", range(300, 306))
    return out


def _table(env: Env) -> Table:
    return env.catalog.table("ns.t")


def test_chunk_list_shows_every_chunk_newest_first(env: Env, chunks: dict[str, Chunk]) -> None:
    listed = env.json("chunk", "list", "ns.t")
    assert [c["idempotency_key"] for c in listed] == ["open", "committing", "given-up", "second", "first"]
    by_key = {c["idempotency_key"]: c for c in listed}
    assert {k: c["state"] for k, c in by_key.items()} == {
        "open": "reserved",
        "committing": "committing",
        "given-up": "aborted",
        "second": "committed",
        "first": "committed",
    }
    second = by_key["second"]
    assert second["id"] == chunks["second"].id and second["table"] == "ns.t"
    assert second["rows"] == 5 and second["bytes"] > 0 and second["files"] == 1
    assert second["version"] == chunks["second"].version and len(second["partitions"]) == 1
    assert second["committed_at"] is not None and second["committed_at"] >= second["created_at"]
    assert by_key["open"]["version"] is None and by_key["open"]["committed_at"] is None
    assert by_key["committing"]["committing_since"] is not None and by_key["committing"]["attempt"]
    assert by_key["given-up"]["error"] == "aborted by the producer"


def test_chunk_list_filters_by_state_and_limits(env: Env, chunks: dict[str, Chunk]) -> None:
    committed = env.json("chunk", "list", "ns.t", "--state", "committed")
    assert [c["id"] for c in committed] == [chunks["second"].id, chunks["first"].id]
    assert [c["id"] for c in env.json("chunk", "list", "ns.t", "--limit", "2")] == [
        chunks["reserved"].id,
        chunks["committing"].id,
    ]
    assert [c["state"] for c in env.json("chunk", "list", "ns.t", "--state", "reserved")] == ["reserved"]
    code, text = env.cli("chunk", "list", "ns.t")
    assert code == 0
    lines = text.strip().splitlines()
    assert len(lines) == 5 and lines[0].startswith(chunks["reserved"].id) and "reserved" in lines[0]
    assert "key second" in lines[3] and f"version {chunks['second'].version}" in lines[3]


def test_chunk_list_and_show_refuse_mistakes(env: Env, chunks: dict[str, Chunk]) -> None:
    code, said = env.cli("chunk", "list", "ns.t", "--state", "done")
    assert code == 1 and "--state must be one of reserved, committing, committed, aborted" in said
    assert env.cli("link", "create", "other.t", "--to", "ns.t")[0] == 0
    code, said = env.cli("chunk", "list", "other.t")
    assert code == 1 and "other.t is a link to ns.t" in said and "streampart chunk list ns.t" in said
    code, said = env.cli("chunk", "list", "ns.nope")
    assert code == 1 and said.startswith("error: ") and "ns.nope" in said
    code, said = env.cli("chunk", "show", "0b7e1f6c-0000-4000-8000-000000000000")
    assert (code, said) == (1, "error: chunk '0b7e1f6c-0000-4000-8000-000000000000' does not exist")


def test_chunk_show(env: Env, chunks: dict[str, Chunk]) -> None:
    shown = env.json("chunk", "show", chunks["reserved"].id)
    assert shown["state"] == "reserved" and shown["idempotency_key"] == "open" and shown["rows"] == 6
    assert shown["file_paths"] == [f.path for f in chunks["reserved"].files]
    code, text = env.cli("chunk", "show", chunks["first"].id)
    assert code == 0 and "state: committed" in text and f"version: {chunks['first'].version}" in text


def test_chunk_abort_gives_a_reserved_chunk_up_and_deletes_its_files(
    env: Env, chunks: dict[str, Chunk]
) -> None:
    table = _table(env)
    reserved = chunks["reserved"]
    paths = [Path(table.location) / f.path for f in reserved.files]
    assert paths and all(p.exists() for p in paths)
    rows = sorted(all_ids(table))
    aborted = env.json("chunk", "abort", reserved.id)
    assert aborted["state"] == "aborted" and aborted["already_aborted"] is False
    assert aborted["error"] == "aborted by `streampart chunk abort`"
    assert env.chunk(reserved.id).state is ChunkState.ABORTED
    assert not any(p.exists() for p in paths)
    assert sorted(all_ids(table)) == rows  # nothing became visible, nothing went
    # the producer's commit now fails, naming the state; aborting again is harmless
    with pytest.raises(StreampartError, match="aborted"):
        ChunkWriter(env.catalog, table).commit(reserved.id)
    code, text = env.cli("chunk", "abort", reserved.id)
    assert code == 0 and "was aborted already" in text


@pytest.mark.parametrize(
    ("which", "fragments"),
    [
        # visible rows are never taken back
        ("first", ["cannot be aborted", "committed at Delta version"]),
        # its commit may have landed; only its own attempt may end it: the writer or housekeeping
        ("committing", ["is committing", "cannot be aborted", "streampart housekeep", "Delta log"]),
    ],
)
def test_chunk_abort_refuses_a_chunk_past_reserved_and_changes_nothing(
    env: Env, chunks: dict[str, Chunk], which: str, fragments: list[str]
) -> None:
    chunk = chunks[which]
    before = env.chunk(chunk.id)
    code, said = env.cli("chunk", "abort", chunk.id)
    assert code == 1 and said.startswith("error: ") and "\n" not in said.strip()
    assert chunk.id in said and all(f in said for f in fragments), said
    assert env.chunk(chunk.id) == before
    assert all((Path(_table(env).location) / f.path).exists() for f in before.files) or which == "first"


def test_chunk_abort_of_an_expired_or_unknown_chunk(env: Env, chunks: dict[str, Chunk]) -> None:
    env.catalog.store.expire_chunks(chunks["reserved"].expires_at + timedelta(seconds=1))
    code, said = env.cli("chunk", "abort", chunks["reserved"].id)
    assert code == 1 and "cannot be aborted: it is expired" in said
    code, said = env.cli("chunk", "abort", "not-a-chunk")
    assert (code, said) == (1, "error: chunk 'not-a-chunk' does not exist")
