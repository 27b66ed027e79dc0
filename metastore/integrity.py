"""Integrity checks: does each table's Delta log agree with itself, its files and the metastore?

Reads and commits already refuse a log that lost commits the metastore recorded, or a snapshot
whose files are gone (see :meth:`Catalog.load` and :func:`metastore.delta.files.check_files`); this module
looks for every such problem at once, for ``streampart check``:

- the log: commit files that are empty, truncated, cut short (fewer actions than their commitInfo
  counts) or unreadable; commit files that do not hold the chunks the metastore recorded committed
  at their version (cut at a line boundary, or deleted and the version taken again); gaps in the
  versions since the last checkpoint; a log that cannot be loaded at all; a log that ends before the newest
  version at which the metastore recorded a commit; a log *ahead* of the metastore — commits
  after that version adding chunks the metastore holds as never committed (or not at all), or
  sealing for rolls it has no record of: a metastore restored from an older backup than the
  warehouse (the normal crash windows — a chunk still COMMITTING, a roll's step not yet
  recorded — are not problems: they are finished by housekeeping and the roll's resumption);
- the schema: the metastore's columns against the log's newest (a schema change whose process died
  after its Delta commit is finished here, a warning; a difference that stays is an error);
- data files of the newest snapshot: missing, of another size than the log says, not a
  readable Parquet file, or holding another number of rows;
- standard partitions: no ``_SUCCESS`` marker, rows that differ from what the roll recorded, and
  (a warning) data files in the partition's directory that the table does not list, which a
  plain Parquet reader of the directory would read too;
- replicas: a secondary's Delta log that cannot be read; a partition recorded present there
  whose files the secondary's log does not list, lists as other files than the primary's, or
  lists as files that are missing, of another size or unreadable, or whose SHA-256 is not the one
  verified when they were copied (kept per file in the metastore) — such a copy is made absent
  there at once (so queries stop reading it, and the next copy pass copies it again); (a
  warning) a partition in the secondary's log not yet recorded present (a copy that stopped
  between its commit and its record: the next copy pass records it).

A store that does not serve while a table is checked (it answers 503, refuses or drops
connections, times out) is not damage: the table gets one ``store_unavailable`` problem naming
the store's address and what it answered, and is checked again once the store answers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from metastore import storage
from metastore.catalog import Catalog
from metastore.delta.checkpoints import last_checkpoint_version
from metastore.delta.files import disk_path, live_files, partition_dir_entries
from metastore.delta.history import oldest_readable_version
from metastore.delta.layout import SUCCESS_MARKER, partition_dir
from metastore.delta.log import (
    DELETE_KEY,
    DELETED_KEY,
    EXPIRE_KEY,
    ROLL_KEY,
    commit_actions,
    commit_chunks,
    commit_file,
    commit_file_damaged,
    commit_info,
    commit_mismatch,
)
from metastore.delta.metadata import columns_of
from metastore.delta.warehouse import Warehouse
from metastore.errors import NotFoundError, StoreUnavailableError, StreampartError, TableIntegrityError
from metastore.models import ChunkState, Delete, Expiry, PartitionState, Table, iso
from metastore.replicas import CopyState, PartitionCopy, Replica, replica_table
from metastore.storage import faults

RESTORE = "restore it from a backup"


@dataclass(frozen=True)
class Problem:
    table: str
    kind: str  # a stable code: log_unreadable, log_behind, commit_damaged, log_gap, file_missing,
    # store_unavailable, …
    message: str
    severity: str = "error"  # "warning": the table reads correctly, but something needs a look
    version: int | None = None
    path: str | None = None
    store: str | None = None  # the store's address, for store_unavailable

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_table(catalog: Catalog, table: Table) -> list[Problem]:
    """Every problem of ``table`` that can be seen from its files and the metastore.

    A store that does not serve (5xx, no answer: ``metastore/storage/faults.py``) is a problem of
    its own kind, ``store_unavailable``, naming the store's address: nothing was read, so nothing
    is called damaged; the table is checked again once the store answers.
    """
    try:
        return _check_table(catalog, table)
    except StoreUnavailableError as exc:
        return [Problem(str(table.name), "store_unavailable", str(exc), store=exc.store)]


def _check_table(catalog: Catalog, table: Table) -> list[Problem]:
    name = str(table.name)
    wh = catalog.warehouse
    problems: list[Problem] = []
    store = catalog.home(table).store
    recorded = store.newest_version(table.id)  # before the log: see Catalog.load
    committed = store.committed_at(table.id, since=last_checkpoint_version(table))
    expiries = store.list_expiries(table.id, limit=1_000_000)
    deletes = store.list_deletes(table.id, limit=1_000_000)
    problems += _log_files(wh, table)
    problems += _recorded_commits(wh, table, committed, {p.version for p in problems})
    try:
        dt = wh.load(table)
    except TableIntegrityError as exc:
        return [*problems, Problem(name, "log_unreadable", str(exc))]
    latest = int(dt.version())
    if latest < recorded:
        problems.append(
            Problem(
                name,
                "log_behind",
                f"the Delta log ends at version {latest}, but the metastore recorded a commit at "
                f"version {recorded}: restore versions {latest + 1}..{recorded} from a backup",
                version=recorded,
            )
        )
    elif latest > recorded:
        problems += _log_ahead(catalog, table, recorded, latest, expiries, deletes)
    problems += _schema_problems(catalog, table, dt)
    files = live_files(dt)
    for f in files:
        problem = _file_problem(table, f.path, f.size, f.rows)
        if problem is not None:
            problems.append(problem)
    live_rows: dict[Any, int] = {}
    live_paths = {f.path for f in files}
    for f in files:
        live_rows[f.partition] = live_rows.get(f.partition, 0) + f.rows
    # files a delete replaced: on disk for older versions until housekeeping deletes them
    replaced = {path for d in deletes if d.reclaimed_at is None for path in d.removed_files}
    if table.keys is not None:  # and those a keyed roll replaced (older versions of its keys removed)
        rolls = store.list_rolls(table.id, limit=1_000_000)
        replaced |= {path for r in rolls if r.reclaimed_at is None for path in r.removed_files}
    for p in catalog.partitions(table, [PartitionState.STANDARD]):
        directory = storage.join(table.location, partition_dir(table, p.value))
        where = f"standard partition {iso(p.value)}"
        if not storage.exists(storage.join(directory, SUCCESS_MARKER)):
            problems.append(
                Problem(name, "partition_marker", f"{where} has no {SUCCESS_MARKER} marker in {directory}")
            )
        if p.rows is not None and live_rows.get(p.value, 0) != p.rows:
            problems.append(
                Problem(
                    name,
                    "partition_rows",
                    f"{where} holds {live_rows.get(p.value, 0)} rows in the Delta log, but its roll "
                    f"recorded {p.rows}",
                )
            )
        for path in partition_dir_entries(table, p.value):
            if (
                path not in live_paths
                and path not in replaced
                and not path.rsplit("/", 1)[-1].startswith(".")
            ):
                problems.append(
                    Problem(
                        name,
                        "orphan_file",
                        f"{where}: {path} is not part of the table, but a plain Parquet reader of the "
                        "directory reads it; delete it",
                        severity="warning",
                        path=path,
                    )
                )
    problems += _expired_problems(catalog, table, live_rows)
    removers = {r.sweep_version for r in store.list_rolls(table.id, limit=1_000_000)}
    removers |= {e.commit_version for e in expiries} | {d.commit_version for d in deletes}
    problems += _gone_early(table, {v for v in removers if v is not None}, latest, live_paths)
    for replica in catalog.replicas.list(table):
        problems += _replica_problems(catalog, table, replica, files)
    return problems


def _expired_problems(catalog: Catalog, table: Table, live_rows: dict[Any, int]) -> list[Problem]:
    """Expired partitions that still hold live rows (an error), or files after housekeeping deleted
    them (a warning: something wrote there since)."""
    problems, name = [], str(table.name)
    for p in catalog.partitions(table, [PartitionState.EXPIRED]):
        where = f"expired partition {iso(p.value)}"
        if live_rows.get(p.value):
            problems.append(
                Problem(
                    name,
                    "expired_live",
                    f"{where} still holds {live_rows[p.value]} rows in the Delta log (its expiry commit at "
                    f"version {p.expired_version} removed them)",
                )
            )
        left = partition_dir_entries(table, p.value) if p.reclaimed_at is not None else []
        if left and p.reclaimed_at is not None:
            problems.append(
                Problem(
                    name,
                    "file_lingering",
                    f"{where}: its files were deleted at {iso(p.reclaimed_at)}, yet {left[0]} is there"
                    + (f" (and {len(left) - 1} more)" if len(left) > 1 else "")
                    + "; no version of the table lists it: delete it",
                    severity="warning",
                    path=left[0],
                )
            )
    return problems


def _replica_problems(catalog: Catalog, table: Table, replica: Replica, primary: list[Any]) -> list[Problem]:
    """A secondary's copy checked against the metastore's records and the primary's files."""
    name, wh = str(table.name), catalog.warehouse
    copy = replica_table(table, replica)
    redo = (
        f"copy it again: streampart table alter {name} --drop-replica {replica.cluster} "
        f"&& streampart table alter {name} --add-replica {replica.cluster}"
    )
    try:
        files = live_files(wh.load(copy))
    except TableIntegrityError as exc:
        return [Problem(name, "replica_unreadable", f"replica on {replica.cluster}: {exc}; {redo}")]
    problems = []
    copies = catalog.home(table).store.list_copies(table.id, replica.cluster, CopyState.PRESENT)
    present = {c.partition_value for c in copies}
    by_value = {c.partition_value: c for c in copies}
    theirs: dict[Any, set[str]] = {}
    for f in files:
        theirs.setdefault(f.partition, set()).add(f.path)
        problem = _file_problem(copy, f.path, f.size, f.rows)
        recorded = by_value[f.partition].file_digests or {} if f.partition in by_value else {}
        if problem is None and f.path in recorded:
            problem = _digest_problem(copy, f.path, recorded[f.path])
            if problem is not None:  # never read again: the partition is absent there until copied anew
                problem = _made_absent(catalog, table, by_value.pop(f.partition), problem, redo)
        if problem is not None:
            problems.append(
                Problem(name, f"replica_{problem.kind}", f"replica on {replica.cluster}: {problem.message}",
                        path=problem.path)
            )  # fmt: skip
    ours: dict[Any, set[str]] = {}
    for f in primary:
        ours.setdefault(f.partition, set()).add(f.path)
    for value in sorted(present):
        where = f"replica on {replica.cluster}: partition {iso(value)}"
        if value not in theirs and ours.get(value):
            problems.append(
                Problem(
                    name, "replica_missing", f"{where} is recorded present, but its log lists no file; {redo}"
                )
            )
        elif value in theirs and theirs[value] != ours.get(value, set()):
            problems.append(
                Problem(name, "replica_differs", f"{where} lists other files than the primary's; {redo}")
            )
    for value in sorted(set(theirs) - present):
        problems.append(
            Problem(
                name,
                "replica_unrecorded",
                f"replica on {replica.cluster}: partition {iso(value)} is in its Delta log but not yet "
                "recorded present (a copy stopped after its commit); the next copy pass records it",
                severity="warning",
            )
        )
    return problems


def _schema_problems(catalog: Catalog, table: Table, dt: Any) -> list[Problem]:
    """The metastore's columns against the log's newest. A schema change whose process died after its
    Delta commit left them apart: it is finished here (``catalog.schemas.recover``, a warning); a
    difference that stays is an error."""
    name = str(table.name)
    try:
        logged = columns_of(dt, name)
    except TableIntegrityError as exc:
        return [Problem(name, "schema_unknown", str(exc))]
    if logged == table.columns:
        return []
    try:
        finished = catalog.schemas.recover(table)
    except StreampartError as exc:
        finished, why = [], f" ({exc})"
    else:
        why = ""
    now = catalog.home(table).store.get_table_by_id(table.id).columns
    if now == logged:
        said = ", ".join(f"{c.description} (key {c.key})" for c in finished)
        return [
            Problem(
                name,
                "schema_finished",
                f"a schema change was left pending after its Delta commit landed: finished it now: {said}",
                severity="warning",
            )
        ]

    def text(columns: Any) -> str:
        return ", ".join(f"{c.name} {c.sql_type}" for c in columns)

    return [
        Problem(
            name,
            "schema_mismatch",
            f"the metastore's columns ({text(now)}) differ from the Delta log's at version {dt.version()} "
            f"({text(logged)}){why}; writers use the metastore's: run `streampart check` again once any "
            "running ALTER has finished, or add the log's columns with `streampart table alter`",
            version=int(dt.version()),
        )
    ]


# A chunk in these states never had a Delta commit: its commit began after (RESERVED → COMMITTING)
# or never will (abort and expiry take only chunks whose commit did not land).
_NEVER_COMMITTED = (ChunkState.RESERVED, ChunkState.ABORTED, ChunkState.EXPIRED)


def _gone_early(table: Table, removers: set[int], latest: int, live: set[str]) -> list[Problem]:
    """Files that a roll's sweep, an expiry or a delete removed from the log while a version time
    travel still reads lists them (the one before the removal is readable), missing on disk: deleted
    too early (by something that ignored the version rule, or by hand). Read from those commits' own
    remove actions."""
    oldest, missing = oldest_readable_version(table), []
    for version in sorted(v for v in removers if oldest < v <= latest):
        try:
            actions = commit_actions(table, version) or []
        except ValueError:  # a damaged commit file: reported as commit_damaged
            continue
        for action in actions:
            path = (action.get("remove") or {}).get("path")
            if not path:
                continue
            path = disk_path(path)
            if path not in live and not storage.exists(storage.join(table.location, path)):
                missing.append((version, path))
    if not missing:
        return []
    version, path = missing[0]
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    return [
        Problem(
            str(table.name),
            "file_gone_early",
            f"data file {path}{more} is missing, yet version {version - 1} still lists it and time "
            f"travel still reads that version (the log keeps versions from {oldest}): reads of those "
            f"versions fail; {RESTORE}",
            path=path,
            version=version - 1,
        )
    ]


def _log_ahead(
    catalog: Catalog, table: Table, recorded: int, latest: int, expiries: list[Expiry], deletes: list[Delete]
) -> list[Problem]:
    """Commits after the metastore's newest recorded one that it cannot account for (see above)."""
    store = catalog.home(table).store
    unknown: list[str] = []
    expiry_ids, delete_ids = {e.id for e in expiries}, {d.id for d in deletes}
    for version in range(recorded + 1, latest + 1):
        try:
            info = commit_info(table, version) or {}
        except ValueError:  # a damaged commit file: reported as commit_damaged
            continue
        for chunk_id in commit_chunks(info):
            try:
                state = store.get_chunk(chunk_id).state
            except NotFoundError:
                unknown.append(f"version {version} adds chunk {chunk_id}, which the metastore does not hold")
                continue
            if state in _NEVER_COMMITTED:
                unknown.append(
                    f"version {version} adds chunk {chunk_id}, which the metastore holds {state.value}"
                )
        if roll_id := info.get(ROLL_KEY):
            try:
                store.get_roll(str(roll_id))
            except NotFoundError:
                unknown.append(
                    f"version {version} seals for roll {roll_id}, which the metastore does not hold"
                )
        expiry_id = info.get(EXPIRE_KEY)
        if expiry_id and str(expiry_id) not in expiry_ids:
            unknown.append(f"version {version} is of expiry {expiry_id}, which the metastore does not hold")
        delete_id = info.get(DELETE_KEY) or info.get(DELETED_KEY)
        if delete_id and str(delete_id) not in delete_ids:
            unknown.append(f"version {version} is of delete {delete_id}, which the metastore does not hold")
    if not unknown:
        return []
    more = f" (and {len(unknown) - 3} more)" if len(unknown) > 3 else ""
    return [
        Problem(
            str(table.name),
            "log_ahead",
            f"the Delta log holds commits the metastore never recorded: {'; '.join(unknown[:3])}{more}; "
            "the metastore is older than the log (restored from another backup than the warehouse?): "
            "restore both from the same backup (docs/operations.md)",
            version=recorded + 1,
        )
    ]


def _recorded_commits(
    wh: Warehouse, table: Table, committed: dict[int, dict[str, set[str]]], reported: set[int | None]
) -> list[Problem]:
    """Commit files that lack chunks the metastore recorded committed at their version.

    A commit file cut at a line boundary (its commitInfo kept, its ``add`` lines lost), or one
    deleted and its version taken again by another commit: either way a chunk acknowledged at
    that version is not in the log. Versions reported damaged already are not repeated.
    """
    problems = []
    for version in sorted(committed):
        if version in reported:
            continue
        mismatch = commit_mismatch(table, version, committed[version])
        if mismatch is not None:
            problems.append(
                Problem(
                    str(table.name),
                    "commit_mismatch",
                    f"{mismatch}; the acknowledged rows are not in the table: {RESTORE}",
                    version=version,
                    path=str(commit_file(table.location, version)),
                )
            )
    return problems


def _log_files(wh: Warehouse, table: Table) -> list[Problem]:
    """Damaged commit files, and gaps among the versions a reader must replay."""
    name = str(table.name)
    versions = sorted(
        int(e.name[:-5])
        for e in storage.list_dir(storage.join(table.location, "_delta_log"))
        if e.name.endswith(".json") and e.name[:-5].isdigit()
    )
    if not versions:
        return []
    problems = []
    for v in versions:
        if commit_file_damaged(table, v):
            problems.append(
                Problem(
                    name,
                    "commit_damaged",
                    f"commit file of version {v} is empty, truncated, cut short or holds no commit; "
                    f"{RESTORE}",
                    version=v,
                    path=str(commit_file(table.location, v)),
                )
            )
    first = max(last_checkpoint_version(table) + 1, versions[0])
    present = set(versions)
    missing = [v for v in range(first, versions[-1]) if v not in present]
    if missing:
        problems.append(
            Problem(
                name,
                "log_gap",
                f"the Delta log lacks the commit file(s) of version(s) {_ranges(missing)}; restore them "
                "from a backup",
                version=missing[0],
            )
        )
    return problems


def _file_problem(table: Table, path: str, size: int, rows: int) -> Problem | None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = str(table.name)
    full = storage.join(table.location, path)
    try:
        actual = storage.stat(full).size
    except FileNotFoundError:
        return Problem(name, "file_missing", f"data file {path} is missing; {RESTORE}", path=path)
    if actual != size:
        message = f"data file {path} has {actual} bytes, the log says {size}; {RESTORE}"
        return Problem(name, "file_size", message, path=path)
    try:
        with storage.open_input(full) as handle:
            found = pq.read_metadata(handle).num_rows
    except StoreUnavailableError:
        raise
    except (pa.ArrowInvalid, OSError) as exc:
        unavailable = faults.unavailable(exc, f"reading data file {path} of table {name}")
        if unavailable is not None:  # pyarrow's own OSError around the store's
            raise unavailable from None
        message = f"data file {path} is not readable Parquet ({exc}); {RESTORE}"
        return Problem(name, "file_unreadable", message, path=path)
    if rows and found != rows:
        message = f"data file {path} holds {found} rows, the log says {rows}; {RESTORE}"
        return Problem(name, "file_rows", message, path=path)
    return None


def _made_absent(catalog: Catalog, table: Table, copy: PartitionCopy, problem: Problem, redo: str) -> Problem:
    """Make a present copy whose file changed absent on its secondary (queries stop reading it there,
    and the next copy pass copies it again); ``problem`` says so, or how to copy it by hand."""
    try:
        catalog.home(table).store.invalidate_copy(copy, problem.message)
    except StreampartError as exc:
        return replace(problem, message=f"{problem.message}; {redo} (it could not be made absent: {exc})")
    return replace(
        problem,
        message=f"{problem.message}; the partition is no longer read there, and the next copy pass "
        "copies it again",
    )


def _digest_problem(copy: Table, path: str, verified: str) -> Problem | None:
    """A replica's file whose SHA-256 is not the one verified when it was copied (same size: changed
    in place, a flipped byte)."""
    import hashlib

    digest = hashlib.sha256()
    with storage.open_input(storage.join(copy.location, path)) as f:
        while piece := f.read(8 << 20):
            digest.update(piece)
    actual = digest.hexdigest()
    if actual == verified:
        return None
    return Problem(
        str(copy.name),
        "file_digest",
        f"data file {path} has SHA-256 {actual}, but {verified} was verified when it was copied "
        "(same size: changed in place)",
        path=path,
    )


def _ranges(values: list[int]) -> str:
    """``[3, 4, 5, 9]`` → ``3..5, 9``."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}..{r[-1]}" for r in runs)
