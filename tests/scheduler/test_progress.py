"""What long work tells its :class:`~metastore.progress.Progress`: a roll's compaction, housekeeping's
expiries and recovered commits. The counts must add up to the work done (the CLI's bars are drawn
from them), on both metastore backends."""

from __future__ import annotations

from datetime import timedelta

from ingest.chunks import ChunkWriter, expire_chunks, recover_commits
from ingest.config import ChunkConfig
from ingest.formats import Format
from metastore import clock
from metastore.catalog import Catalog
from metastore.delta.files import live_files
from metastore.models import ChunkState, iso
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import Recorder, records


def test_a_roll_reports_its_compaction_file_by_file(catalog: Catalog) -> None:
    table = make_table(catalog)
    writer = ChunkWriter(catalog, table)
    for k in range(4):
        writer.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    staged = live_files(catalog.load(table))
    recorder = Recorder()
    (result,) = Roller(catalog, progress=recorder).roll_table(table, force=True)
    ((description, total, unit),) = recorder.started
    assert unit == "bytes" and total == sum(f.size for f in staged)
    assert result.partition == iso(staged[0].partition)
    assert description == f"rolling {table.name} {result.partition[:19].replace('T', ' ')}"
    # one report per file rewritten, adding up to the whole
    assert len(recorder.advanced[0]) == result.files_before == 4
    assert sum(recorder.advanced[0]) == total


def test_a_roll_with_nothing_to_compact_reports_nothing(catalog: Catalog) -> None:
    table = make_table(catalog)
    recorder = Recorder()
    assert Roller(catalog, progress=recorder).roll_table(table, force=True)[0].files_before == 0
    assert recorder.started == [] and recorder.advanced == []


def test_housekeeping_reports_expiries_and_recovered_commits(catalog: Catalog) -> None:
    table = make_table(catalog)
    config = ChunkConfig()
    writer = ChunkWriter(catalog, table, config)
    # two reserved chunks past their TTL
    open_chunks = [
        writer.stage(writer.reserve(f"open-{k}"), records(range(k, k + 1)), Format.JSONL) for k in range(2)
    ]
    # three commits whose writer died long ago (begun, never finished)
    long_ago = clock.now() - 3 * config.commit_timeout
    stale = []
    for k in range(3):
        chunk = writer.stage(writer.reserve(f"died-{k}"), records(range(100 + k, 101 + k)), Format.JSONL)
        stale.append(catalog.store.begin_commit(chunk, int(catalog.load(table).version()), now=long_ago))
    recorder = Recorder()
    expired = expire_chunks(catalog, open_chunks[0].expires_at + timedelta(seconds=1), progress=recorder)
    recovered = recover_commits(catalog, config, progress=recorder)
    assert sorted(c.id for c in expired) == sorted(c.id for c in open_chunks)
    assert sorted(r.chunk for r in recovered) == sorted(c.id for c in stale)
    assert [(total, unit) for _, total, unit in recorder.started] == [(2, "chunks"), (3, "chunks")]
    assert recorder.advanced == [[1, 1], [1, 1, 1]]
    assert {catalog.store.get_chunk(c.id).state for c in stale} == {ChunkState.COMMITTED}
    # nothing left to do: nothing begun
    again = Recorder()
    assert (
        expire_chunks(catalog, progress=again) == []
        and recover_commits(catalog, config, progress=again) == []
    )
    assert again.started == []
