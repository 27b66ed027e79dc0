"""A full disk (issue 14, item 8): a real, small file system filled up, not a mock.

Out of space is a clear, retriable error everywhere — a write, an upload (HTTP 507 with
Retry-After), a roll — that leaves no temporary file behind and loses nothing; once space is
freed, the same idempotency key lands once and the roll resumes at once, whoever retries it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.errors import RetriableError, StorageFullError
from metastore.models import ChunkState, PartitionState
from scheduler.roll import Roller
from tests.api.fixtures import Server, auth
from tests.fixtures import make_table
from tests.helpers import all_ids, records

DISK_BYTES = 6 * 1024 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 6 MiB tmpfs mounted for the test: writes past it fail with ENOSPC, as on a full disk."""
    mount = tmp_path / "disk"
    mount.mkdir()
    command = ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small file system here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill ``disk`` up to ``leave`` free bytes; delete the returned file to free the space."""
    filler = disk / "filler"
    with filler.open("ab") as f:
        try:
            while True:
                free = _free(disk) - leave
                if free <= 0:
                    break
                f.write(b"\0" * min(free, 1 << 20))
                f.flush()
        except OSError:
            pass
    return filler


def _free(disk: Path) -> int:
    import os

    st = os.statvfs(disk)
    return st.f_bavail * st.f_frsize


def temp_files(table_dir: Path) -> list[Path]:
    return [p for p in table_dir.rglob("*") if p.name.endswith(".tmp")]


@pytest.fixture
def catalog_on(small_disk: Path, tmp_path: Path) -> Iterator[Catalog]:
    """The warehouse on the small disk; the metastore beside it (its own disk is not full)."""
    cat = Catalog.open(small_disk / "wh", f"sqlite:///{tmp_path / 'metastore.sqlite'}")
    yield cat
    cat.close()


@pytest.mark.process
def test_a_write_to_a_full_disk_is_retriable_and_lands_once_after_space_is_freed(catalog_on: Catalog) -> None:
    table = make_table(catalog_on)
    w = ChunkWriter(catalog_on, table)
    w.write(records(range(10)), Format.JSONL, key="before")
    filler = fill(Path(catalog_on.warehouse.root).parent)
    with pytest.raises(StorageFullError, match="no space left on the warehouse's storage") as full:
        w.write(records(range(10, 20)), Format.JSONL, key="during")
    assert isinstance(full.value, RetriableError) and "free space, then retry" in str(full.value)
    assert temp_files(Path(table.location)) == []
    filler.unlink()
    w.write(records(range(10, 20)), Format.JSONL, key="during")  # the producer's retry
    w.write(records(range(10, 20)), Format.JSONL, key="during")
    assert sorted(all_ids(table)) == list(range(20))


# How full the disk is when a roll runs, and which step runs out of space.
ROLL_CASES = [
    ("seal", 0),  # not even the seal's commit file fits
    ("compaction", 96 * 1024),  # the seal fits; the compacted file does not
]


@pytest.mark.process
@pytest.mark.parametrize("step, leave", ROLL_CASES, ids=[c[0] for c in ROLL_CASES])
def test_a_roll_on_a_full_disk_says_why_cleans_up_and_resumes_at_once(
    catalog_on: Catalog, step: str, leave: int
) -> None:
    table = make_table(catalog_on)
    w = ChunkWriter(catalog_on, table)
    value = catalog_on.store.streaming_partition(table.id).value
    for k in range(8):  # about 300 KB staged
        w.write(records(range(k * 2000, (k + 1) * 2000)), Format.JSONL)
    filler = fill(Path(catalog_on.warehouse.root).parent, leave)
    with pytest.raises(StorageFullError, match="no space left") as full:
        Roller(catalog_on).roll_table(table, force=True)
    assert "resumes from its last step" in str(full.value) or step == "compaction"
    assert temp_files(Path(table.location)) == []  # no hidden .part-*.tmp for 7 days
    [roll] = catalog_on.store.list_rolls(table.id, unfinished=True)
    assert roll.error and "no space left" in roll.error  # the reason is recorded …
    assert (roll.state.value == "sweeping") == (step == "compaction")  # … at the step that failed
    filler.unlink()
    [done] = Roller(catalog_on).roll_table(table)  # … and another roller resumes it at once
    assert done.resumed and done.rows == 16_000
    rolled = catalog_on.store.get_partition(table.id, value)
    assert rolled is not None and rolled.state is PartitionState.STANDARD
    assert sorted(all_ids(table)) == list(range(16_000))


@pytest.mark.process
def test_an_upload_to_a_full_disk_is_507_with_retry_after(small_disk: Path, tmp_path: Path) -> None:
    srv = Server(small_disk / "wh", f"sqlite:///{tmp_path / 'metastore.sqlite'}", tmp_path)
    make_table(srv.catalog, "ns.events")
    admin = srv.token("admin", "admin:*")
    srv.start()
    try:
        filler = fill(small_disk)
        with httpx.Client(base_url=srv.url, headers=auth(admin), timeout=30) as http:
            chunk = http.post("/v1/tables/ns/events/chunks", json={}).json()
            up = http.put(f"/v1/chunks/{chunk['id']}/data", content=records(range(2000)),
                          headers={"Content-Type": "application/x-ndjson"})  # fmt: skip
            assert up.status_code == 507, up.text
            assert up.json()["error"] == "storage_full" and up.headers["retry-after"]
            assert "no space left" in up.json()["message"]
            filler.unlink()
            again = http.put(f"/v1/chunks/{chunk['id']}/data", content=records(range(2000)),
                             headers={"Content-Type": "application/x-ndjson"})  # fmt: skip
            assert again.status_code == 200, again.text
            assert http.post(f"/v1/chunks/{chunk['id']}/commit").json()["rows"] == 2000
    finally:
        srv.close()


@pytest.mark.process
def test_a_commit_file_that_does_not_fit_releases_its_chunk_and_the_retry_lands_at_once(
    catalog_on: Catalog,
) -> None:
    """Issue 25: the chunk is staged, then its Delta commit file does not fit: nothing was committed,
    so the attempt releases the chunk — its retry is not refused as busy for 2 × commit_timeout."""
    table = make_table(catalog_on)
    w = ChunkWriter(catalog_on, table)
    w.write(records(range(10)), Format.JSONL, key="before")
    filler = fill(Path(catalog_on.warehouse.root).parent, leave=4096)  # one block: the staged file
    with pytest.raises(StorageFullError, match="nothing was committed"):
        w.write(records(range(10, 20)), Format.JSONL, key="during")
    chunk = catalog_on.store.find_chunk_by_key(table.id, "during")
    assert chunk is not None and chunk.files  # staged: it was its commit that found no space
    assert chunk.state is ChunkState.RESERVED and "nothing committed" in (chunk.error or "")
    filler.unlink()
    assert (
        ChunkWriter(catalog_on, table).write(records(range(10, 20)), Format.JSONL, key="during").version == 2
    )
    assert sorted(all_ids(table)) == list(range(20))
