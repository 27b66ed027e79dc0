"""Reading a table's Delta log: its commit files, what streampart's commits say in them, and
whether the log holds every commit the metastore recorded.

By the Delta protocol ``_delta_log/<version>.json`` *is* that version, so these read the commit
files themselves: no snapshot replay, and no version numbers guessed by delta-rs' ``history()``
(see :meth:`Warehouse.find_commit`).

The Delta log is the truth about visibility: a chunk is visible iff a commit added its files.
The SQL metastore is the truth about lifecycles and coordinates writers and rollers; where the
two could disagree after a crash, the Delta log decides.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from datetime import datetime
from typing import Any

from metastore import storage
from metastore.delta.checkpoints import last_checkpoint_version
from metastore.errors import TableIntegrityError
from metastore.models import Table

# A roll's seal changes this table property (so every commit prepared before it conflicts).
SEAL_PROPERTY = "streampart.seal"
# A chunk commit's commit info: GROUP_KEY (unique per attempt, how the committer finds its own
# commit) and CHUNKS_KEY (the ids of the chunks it adds, comma-separated: a group commit holds
# several). Logs written before group commit name one chunk under CHUNK_KEY: still recognised.
GROUP_KEY = "streampart.group"
CHUNKS_KEY = "streampart.chunks"
CHUNK_KEY = "streampart.chunk"
ROLL_KEY = "streampart.roll"
# A roll's sweep commit names its roll and attempt (``<roll id>/<random>``): scheduler/roll.py.
SWEEP_KEY = "streampart.sweep"
# An expiry (scheduler/expiry.py) removes its partitions' files in one commit whose commitInfo
# names it under EXPIRE_KEY (its id; the commit's app transaction ``streampart.expire/<id>`` lets
# it land once).
EXPIRE_KEY = "streampart.expire"
# A delete by predicate (ingest/deletes/deleter.py) seals under DELETE_KEY (its id), as a roll does
# under ROLL_KEY, then rewrites the files holding matching rows in one commit whose commitInfo names
# it under DELETED_KEY (its id; the app transaction ``streampart.delete/<id>`` lets it land once).
DELETE_KEY = "streampart.delete"
DELETED_KEY = "streampart.deleted"
# In a commit's commitInfo: how many add and remove actions the commit holds. A commit file cut
# at a line boundary (its commitInfo kept, later lines lost) still parses; this count is how its
# readers see that it was cut (:func:`commit_file_damaged`).
ACTIONS_KEY = "streampart.actions"
# In the commitInfo of a commit that changes the table's schema (a ``metaData`` action right after
# the commitInfo): the schema change's key, or a short description. A commit file that names one
# but holds no ``metaData`` was cut short (:func:`commit_file_damaged`).
SCHEMA_KEY = "streampart.schema"


# How often a load is tried again after its listing of the log showed a gap (see delta_table).
LISTING_RETRIES = 3


def listing_raced(exc: BaseException) -> bool:
    """Whether delta-rs' error ``exc`` says its listing of the log showed a gap: a directory listing
    taken while commits land may miss a file created during it (POSIX readdir promises nothing about
    entries added meanwhile), a gap that is not there; listed again, it is gone."""
    return "contiguous" in str(exc)


def delta_table(location: str, version: int | None = None) -> Any:
    """A delta-rs DeltaTable of the table at ``location`` (a path or an ``s3://`` URL), at
    ``version`` (default: the newest), with the storage options its store needs."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    options = storage.delta_client_options(location)
    for attempt in range(LISTING_RETRIES + 1):
        try:
            if version is None:
                return DeltaTable(location, storage_options=options)
            return DeltaTable(location, version=version, storage_options=options)
        except DeltaError as exc:
            # A directory listing taken while commits land may miss a file created during it (POSIX
            # readdir promises nothing about entries added meanwhile): a gap that is not there. A
            # gap that is (a lost commit file) stays, and is reported as damage.
            if not listing_raced(exc) or attempt == LISTING_RETRIES:
                raise
            time.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


def log_dir(location: str) -> str:
    return storage.join(location, "_delta_log")


def commit_file(location: str, version: int) -> str:
    """Where ``version``'s commit file is: a path on a local disk, an ``s3://`` URL in a bucket."""
    return storage.join(location, "_delta_log", f"{version:020d}.json")


def commit_chunks(info: dict[str, Any]) -> list[str]:
    """The ids of the chunks a commit added, from its commit info (none: not a chunk commit)."""
    ids = str(info.get(CHUNKS_KEY) or "").split(",")
    legacy = info.get(CHUNK_KEY)
    return [i for i in ids if i] + ([str(legacy)] if legacy else [])


def commit_info(table: Table, version: int) -> dict[str, Any] | None:
    """The commitInfo of ``version``'s commit file; None if the file is gone or holds none.

    Raises:
        ValueError: the file is not JSON lines (truncated or overwritten).
    """
    try:
        body = storage.read_bytes(commit_file(table.location, version))
    except FileNotFoundError:  # cleaned up after a checkpoint: older than any live commit
        return None
    for line in body.splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            return dict(action["commitInfo"])
    return None


def commit_actions(table: Table, version: int) -> list[dict[str, Any]] | None:
    """The actions of ``version``'s commit file (None: the file is gone).

    Raises:
        ValueError: the file is not JSON lines of objects (truncated or overwritten).
    """
    try:
        lines = storage.read_bytes(commit_file(table.location, version)).splitlines()
    except FileNotFoundError:
        return None
    actions = [json.loads(line) for line in lines if line.strip()]
    if not all(isinstance(a, dict) for a in actions):
        raise ValueError(f"commit file of version {version} holds something other than actions")
    return actions


def commit_file_damaged(table: Table, version: int) -> bool:
    """Whether the commit file of ``version`` is there but damaged: empty, not JSON lines,
    without commitInfo, or cut short — fewer add and remove actions than its commitInfo
    counts (``streampart.actions``, in every commit streampart writes: a file cut at a line
    boundary still parses), or no ``metaData`` where its commitInfo names a schema change.

    A missing file is not "damaged" here: old commit files go once a checkpoint covers them.
    """
    try:
        actions = commit_actions(table, version)
    except ValueError:  # truncated or overwritten
        return True
    if actions is None:
        return False
    infos = [a["commitInfo"] for a in actions if "commitInfo" in a]
    if not infos or not isinstance(infos[0], dict):
        return True
    if SCHEMA_KEY in infos[0] and not any("metaData" in a for a in actions):
        return True
    counted = infos[0].get(ACTIONS_KEY)
    if counted is None:
        return False
    held = sum(1 for a in actions if "add" in a or "remove" in a)
    return str(held) != str(counted)


def commit_mismatch(table: Table, version: int, chunks: dict[str, set[str]]) -> str | None:
    """What the commit file of ``version`` lacks of what the metastore recorded committed at it.

    ``chunks``: each chunk the metastore holds COMMITTED at ``version``, with the names of the
    data files it added (their last path component). The commit must name every one of them
    in its commitInfo and add all their files; one that does not was cut short, or was
    deleted and its version taken again by another commit. None: it holds them all (or the
    file is gone or unreadable, which other checks report).
    """
    try:
        actions = commit_actions(table, version)
    except ValueError:
        return None
    if actions is None:
        return None
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
    named = set(commit_chunks(info)) if isinstance(info, dict) else set()
    added = {
        urllib.parse.unquote(str(a["add"].get("path", ""))).rsplit("/", 1)[-1]
        for a in actions
        if isinstance(a.get("add"), dict)
    }
    path = commit_file(table.location, version)
    for chunk_id, names in sorted(chunks.items()):
        if chunk_id not in named:
            others = ", ".join(sorted(named)[:3]) or "no chunk"
            return (
                f"the metastore recorded chunk {chunk_id} committed at version {version}, but the "
                f"commit file of that version ({path}) does not hold it (it adds {others}): the "
                "commit was lost and its version taken again by another commit"
            )
        lacking = sorted(names - added)
        if lacking:
            more = f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else ""
            return (
                f"the commit file of version {version} ({path}) lacks file {lacking[0]}{more} of "
                f"chunk {chunk_id}, which the metastore recorded committed at that version: the "
                "file was cut short"
            )
    return None


def verify_newest(table: Table, dt: Any, recorded: int, chunks: dict[str, set[str]] | None = None) -> None:
    """Check that ``dt`` (the newest snapshot) holds every commit the metastore recorded.

    ``recorded`` is the newest Delta version the metastore knows a commit at (a chunk, a
    seal, a sweep); ``chunks``, the chunks it recorded committed at that version with the
    names of the files each added (:func:`commit_mismatch`). A log that ends before it lost
    its newest commit files; one whose commit file at that version is empty, cut short or
    holds no commit, or does not hold those chunks' files, lost that commit's content (or
    the version was taken again by another commit). Either way reading or writing on would
    serve fewer rows than were acknowledged, or reuse a version.

    Raises:
        TableIntegrityError: naming the table, the version and what to do.
    """
    found = int(dt.version())
    if found < recorded:
        raise TableIntegrityError(
            f"table {table.name}: the Delta log ends at version {found}, but the metastore "
            f"recorded a commit at version {recorded}: commit files were lost from "
            f"{table.location}/_delta_log; restore versions {found + 1}..{recorded} from a "
            "backup before reading or writing this table"
        )
    if recorded >= 0 and commit_file_damaged(table, recorded):
        raise TableIntegrityError(
            f"table {table.name}: the Delta commit file of version {recorded} is empty, cut "
            f"short or holds no commit ({commit_file(table.location, recorded)}); restore it from a "
            "backup before reading or writing this table"
        )
    mismatch = commit_mismatch(table, recorded, chunks) if recorded >= 0 and chunks else None
    if mismatch is not None:
        raise TableIntegrityError(
            f"table {table.name}: {mismatch}; restore it from a backup before reading or writing "
            "this table (`streampart check` lists every problem)"
        )


def version_at(table: Table, at: datetime) -> int | None:
    """The newest version committed at or before ``at`` (None: none that old is in the log).

    From the commit files' own timestamps (delta-rs' ``load_as_version`` answers version 0
    for a time before the table existed). Versions whose commit file is gone (cleaned after
    a checkpoint) cannot be told apart, so they are not candidates.
    """
    versions = sorted(
        int(e.name[:-5])
        for e in storage.list_dir(log_dir(table.location))
        if e.name.endswith(".json") and e.name[:-5].isdigit()
    )
    millis = at.timestamp() * 1000
    lo, hi, found = 0, len(versions) - 1, None
    while lo <= hi:  # commit timestamps grow with the version
        mid = (lo + hi) // 2
        info = commit_info(table, versions[mid]) or {}
        if float(info.get("timestamp", float("inf"))) <= millis:
            found, lo = versions[mid], mid + 1
        else:
            hi = mid - 1
    return found


def newest_version(table: Table, known: int) -> int | None:
    """The newest version of the table's log, looked for after ``known`` (a version seen in it).

    A few file checks, whatever the table holds. None if ``known`` is gone from the log
    (cleaned up, or the log was lost) or the log's tail is damaged (:func:`_log_tail_intact`):
    load the table instead (:meth:`Warehouse.load`), which names the damage.
    """
    if storage.is_remote(table.location):
        return _newest_in_bucket(table, known)
    newest = _newest_listed(table.location, known)
    if newest is None or not _log_tail_intact(table, newest):
        return None
    return newest


def _newest_in_bucket(table: Table, known: int) -> int | None:
    """:func:`newest_version` for a log in a bucket: the commit files since the last checkpoint (and
    since ``known``) in one listing, not a request per version, then the newest one read."""
    first = max(last_checkpoint_version(table) + 1, 0)
    start = min(first, known)
    listed = {
        int(name[:-5])
        for name in storage.names_from(log_dir(table.location), f"{start:020d}")
        if name.endswith(".json") and name[:-5].isdigit()
    }
    if known not in listed:
        return None
    newest = max(listed)
    if any(v not in listed for v in range(first, newest + 1)) or commit_file_damaged(table, newest):
        return None
    return newest


def _log_tail_intact(table: Table, newest: int) -> bool:
    """Whether the log's commit files since its last checkpoint are all there, the newest whole.

    What :func:`verify_newest` and a load would find wrong with a log that was damaged under
    a running writer (a deleted, emptied or torn commit file), for the price of a few file
    checks and one small read; when it says no, load the table to have the damage named.
    """
    first = max(last_checkpoint_version(table) + 1, 0)
    if any(not storage.exists(commit_file(table.location, v)) for v in range(first, newest + 1)):
        return False
    return not commit_file_damaged(table, newest)


def _newest_listed(location: str, known: int) -> int | None:
    """The newest version of the log, looked for after ``known``, a version seen in it.

    None when ``known``'s commit file is gone (log cleanup removed it): load the table instead.
    Log cleanup removes a prefix of the log, so if ``known`` is there, so is all that follows.
    """
    if not storage.exists(commit_file(location, known)):
        return None
    version = known
    while storage.exists(commit_file(location, version + 1)):
        version += 1
    return version
