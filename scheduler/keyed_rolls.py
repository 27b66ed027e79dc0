"""A keyed table's sweep: the rolled partition resolved to one row per key, and the older versions of
its keys elsewhere removed, in the sweep's one commit.

For each key of the partition being rolled (P) the sweep finds every other version of it in the
snapshot the sweep is based on: in the other partitions' files, standard or streaming. Then:

- if P's version is the newest (by the sequence column, then arrival), it stays in P — unless it
  deletes the key, when it goes too — and every other version of the key is removed from the file
  holding it (that file rewritten without it, copy-on-write, as a delete by predicate does);
- if a newer version sits elsewhere, P's goes, and the others stay: the partition holding the newest
  removes them when it rolls.

So after every roll the standard partitions hold at most one version of each key between them, and
never a delete: a plain Delta or Parquet reader of the standard partitions sees one row per key.
Every row written here keeps its arrival in :data:`ARRIVAL_COLUMN` (no tag carries it any more).

Finding the other versions reads the key, sequence and arrival columns of every other live file
(column projection: a fraction of their bytes); the files holding a match are read whole. The sweep
reports both counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest.deletes.deleter import recount
from ingest.keys import (
    beaten_by,
    deletes,
    distinct_versions,
    history_rows,
    live,
    newer_versions,
    newest_versions,
    version_order,
)
from metastore import storage
from metastore.catalog import Catalog
from metastore.delta.arrivals import arrivals
from metastore.delta.arrow import conform, data_schema
from metastore.delta.files import LiveFile, disk_path, remove_file, write_parquet
from metastore.delta.layout import parse_partition_value, partition_dir, staged_dir
from metastore.delta.log import SWEEP_KEY, commit_actions, commit_info
from metastore.delta.stats import may_hold, ranges_stats
from metastore.delta.tombstones import read_tombstones, tombstone_columns, write_tombstones
from metastore.errors import TableIntegrityError
from metastore.models import ARRIVAL_COLUMN, VALID_TO, Column, Keys, Roll, Table
from scheduler.clustering import order, pieces

_FILE, _ROW = "__sp_file", "__sp_row"
_THEIRS = "__sp_p_"  # the rolled partition's version, beside another file's


@dataclass
class KeyedSweep:
    """What one keyed sweep writes and removes (nothing committed yet)."""

    compacted: list[tuple[str, datetime, int]] = field(default_factory=list)  # P's files
    removes: list[LiveFile] = field(default_factory=list)  # other partitions' files rewritten
    adds: list[tuple[str, datetime, int]] = field(default_factory=list)  # … and what replaces them
    files_scanned: int = 0  # other files whose key columns were read
    files_skipped: int = 0  # other files whose key ranges hold none of its keys: not read
    files_rewritten: int = 0
    versions_removed: int = 0  # older versions removed from other partitions
    rows_in: int = 0  # versions in P before the sweep
    rows_out: int = 0

    tombstones: str | None = None  # the deletes it keeps (a table with a sequence column)
    ranges: dict[str, str] = field(default_factory=dict)  # the statistics of what it wrote, by path

    def written(self) -> list[str]:
        """The data files it wrote (the deletes it keeps are kept: :mod:`metastore.delta.tombstones`)."""
        return [p for p, _, _ in (*self.compacted, *self.adds)]

    def discard(self, table: Table) -> None:
        for path in self.written():
            remove_file(table, path)


def keyed_sweep(
    table: Table,
    columns: tuple[Column, ...],
    version: int,
    value: datetime,
    every_file: Sequence[LiveFile],
    name: Callable[[int], str],
    target_rows: int,
    ranges: Mapping[str, Sequence[tuple[Any, Any]]] | None = None,
) -> KeyedSweep:
    """Plan and write the sweep of partition ``value`` of ``table`` at snapshot ``version`` (whose
    live files are ``every_file`` and columns ``columns``); ``name(k)`` names P's ``k``-th file and
    each rewritten file's (in its own directory). ``ranges``: the key columns' range in each file
    whose add gives them (``metastore/delta/stats.py``): only files that may hold one of P's keys
    are read for older versions."""
    keys = table.keys
    assert keys is not None
    tags = arrivals(table, version) if any(f.staged for f in every_file) else {}
    mine = [f for f in every_file if f.partition == value]
    others = [f for f in every_file if f.partition != value]
    out = KeyedSweep()
    if keys.history:
        try:
            _history_sweep(table, columns, version, value, mine, others, tags, name, target_rows, ranges, out)
        except BaseException:
            out.discard(table)
            raise
        return out
    try:
        versions = pa.concat_tables([_read(table, f, columns, tags) for f in mine]) if mine else None
        out.rows_in = 0 if versions is None else versions.num_rows
        newest = newest_versions(keys, versions, [ARRIVAL_COLUMN]) if versions is not None else None
        beaten: list[pa.Table] = []
        if newest is not None and newest.num_rows and others:
            candidates = _candidates(keys, newest, others, ranges or {}, out)
            beaten.append(_elsewhere(table, keys, columns, newest, candidates, tags, name, out))
        kept_deletes = read_tombstones(table, version)
        if newest is not None and newest.num_rows and kept_deletes is not None:
            beaten.append(beaten_by(keys, newest, kept_deletes))
        if newest is not None:
            winners = newest
            for keys_beaten in beaten:
                if keys_beaten.num_rows:
                    winners = winners.join(keys_beaten, list(keys.columns), join_type="left anti")
            if keys.sequence_by is not None:  # its deletes are kept: a later, older version loses to them
                _keep_deletes(table, keys, winners, name, out)
            kept = live(keys, winners).sort_by([(k, "ascending") for k in keys.columns])
            _write_partition(table, value, kept, name, target_rows, columns, out)
    except BaseException:
        out.discard(table)
        raise
    return out


def _history_sweep(
    table: Table,
    columns: tuple[Column, ...],
    version: int,
    value: datetime,
    mine: Sequence[LiveFile],
    others: Sequence[LiveFile],
    tags: dict[str, int],
    name: Callable[[int], str],
    target_rows: int,
    ranges: Mapping[str, Sequence[tuple[Any, Any]]] | None,
    out: KeyedSweep,
) -> None:
    """A table with history: P's distinct versions become rows valid until the next version of their
    key among every resolved file's and the kept deletes' (``ingest/keys.py history_rows``); each
    resolved file holding a version of P's keys whose valid_to changes (or which a version of P
    replaces: the same sequence value, arriving later) is rewritten. Other open partitions' versions
    stay as they are (merged on read; their own rolls resolve them against these). P's deletes are
    kept (``_sp_deleted/``): a version arriving later still ends at them."""
    keys = table.keys
    assert keys is not None and keys.sequence_by is not None
    key_names = list(keys.columns)
    if not mine:
        return
    versions = pa.concat_tables([_read(table, f, columns, tags) for f in mine])
    out.rows_in = versions.num_rows
    versions = _provenance(versions, -1)
    p_keys = versions.select(key_names).group_by(key_names).aggregate([])
    resolved = [f for f in others if not f.staged]
    candidates = _candidates(keys, p_keys, resolved, ranges or {}, out)
    held: dict[int, pa.Table] = {}  # candidate file → its rows
    parts = [versions]
    for i, f in enumerate(candidates):
        data = _read(table, f, columns, tags)
        out.files_scanned += 1
        matched = _provenance(data, i).join(p_keys, key_names, join_type="left semi")
        if matched.num_rows:
            held[i] = data
            parts.append(matched)
    kept = read_tombstones(table, version)
    if kept is not None:
        kept = kept.join(p_keys, key_names, join_type="left semi")
    found = pa.concat_tables(parts, promote_options="permissive")
    rows = history_rows(keys, found, kept)
    # P's deletes, kept: versions arriving later end at them
    _keep_deletes(table, keys, distinct_versions(keys, versions, [ARRIVAL_COLUMN]), name, out)
    own = rows.filter(pc.equal(rows.column(_FILE), -1)).drop_columns([_FILE, _ROW])
    _write_partition(table, value, own, name, target_rows, columns, out)
    for k, (i, data) in enumerate(sorted(held.items())):
        f = candidates[i]
        now = rows.filter(pc.equal(rows.column(_FILE), i))
        stored = _provenance(data, i).join(p_keys, key_names, join_type="left semi")
        before = dict(zip(stored.column(_ROW).to_pylist(), stored.column(VALID_TO).to_pylist(), strict=True))
        after = dict(zip(now.column(_ROW).to_pylist(), now.column(VALID_TO).to_pylist(), strict=True))
        if before == after:
            continue  # each version kept, each valid_to as it was
        keep = [r not in before or r in after for r in range(data.num_rows)]
        left = data.filter(pa.array(keep))
        if after:
            place = {r: j for j, r in enumerate(r for r in range(data.num_rows) if keep[r])}
            column = left.column(VALID_TO).to_pylist()
            for r, end in after.items():
                column[place[r]] = end
            i_to = left.column_names.index(VALID_TO)
            left = left.set_column(
                i_to, left.schema.field(i_to), pa.array(column, left.schema.field(i_to).type)
            )
        out.removes.append(f)
        out.files_rewritten += 1
        out.versions_removed += data.num_rows - left.num_rows
        if left.num_rows == 0:
            continue
        path = _rewritten_path(table, f, name(10_000 + k))
        write_parquet(table, path, left)
        out.adds.append((path, f.partition, left.num_rows))
        out.ranges[path] = ranges_stats(left, columns)


def _keep_deletes(
    table: Table, keys: Keys, versions: pa.Table, name: Callable[[int], str], out: KeyedSweep
) -> None:
    """Keep the deletes among ``versions`` (``metastore/delta/tombstones.py``), before the commit."""
    dropped = versions.filter(deletes(keys, versions)).select(tombstone_columns(keys))
    if dropped.num_rows:
        out.tombstones = write_tombstones(table, name(99_999).removesuffix(".snappy.parquet"), dropped)


def _write_partition(
    table: Table,
    value: datetime,
    rows: pa.Table,
    name: Callable[[int], str],
    target_rows: int,
    columns: Sequence[Column],
    out: KeyedSweep,
) -> None:
    """Write P's resolved ``rows`` as its files of at most ``target_rows``, each with its columns'
    statistics; in the table's clustering order if it has one (``scheduler/clustering.py``), which
    then replaces the key's order (a later roll looking for older versions of keys reads more files)."""
    z = None
    if table.cluster_by:
        rows, z = order(rows, table.cluster_by)
    out.rows_out = rows.num_rows
    for k, (start, end) in enumerate(pieces(rows.num_rows, target_rows, z, len(table.cluster_by))):
        part = rows.slice(start, end - start)
        path = f"{partition_dir(table, value)}/{name(k)}"
        write_parquet(table, path, part)
        out.compacted.append((path, value, part.num_rows))
        out.ranges[path] = ranges_stats(part, columns)


def _provenance(data: pa.Table, file: int) -> pa.Table:
    """``data`` with each row's file (-1: the partition rolled) and place in it."""
    data = data.append_column(_FILE, pa.array([file] * data.num_rows, pa.int32()))
    return data.append_column(_ROW, pa.array(range(data.num_rows), pa.int64()))


def _read(
    table: Table,
    f: LiveFile,
    columns: tuple[Column, ...],
    tags: dict[str, int],
    only: Sequence[str] | None = None,
) -> pa.Table:
    """``f``'s rows in ``columns`` (``only``: just those named), with each row's arrival."""
    with storage.open_input(storage.join(table.location, f.path)) as handle:
        source = pq.ParquetFile(handle)
        present = set(source.schema_arrow.names)
        wanted = [c.name for c in columns if only is None or c.name in only]
        read = source.read(columns=[n for n in [*wanted, ARRIVAL_COLUMN] if n in present])
    data = conform(read, tuple(c for c in columns if c.name in wanted))
    if ARRIVAL_COLUMN in read.column_names:
        arrival = read.column(ARRIVAL_COLUMN)
    else:
        tag = tags.get(f.path)
        if tag is None:
            raise TableIntegrityError(
                f"{f.path} of {table.name} has no arrival (neither a column nor a tag in the log)"
            )
        arrival = pa.array([tag] * read.num_rows, pa.int64())
    return data.append_column(ARRIVAL_COLUMN, arrival.cast(pa.int64()))


def _candidates(
    keys: Keys,
    newest: pa.Table,
    others: Sequence[LiveFile],
    ranges: Mapping[str, Sequence[tuple[Any, Any]]],
    out: KeyedSweep,
) -> list[LiveFile]:
    """The files of ``others`` that may hold a version of ``newest``'s keys: those whose key columns'
    ranges take one of them, and those without ranges (read whatever they hold)."""
    mine = newest.select(list(keys.columns))
    found = []
    for f in others:
        bounds = ranges.get(f.path)
        if bounds is None or may_hold(bounds, mine, keys.columns):
            found.append(f)
        else:
            out.files_skipped += 1
    return found


def _elsewhere(
    table: Table,
    keys: Keys,
    columns: tuple[Column, ...],
    newest: pa.Table,
    others: Sequence[LiveFile],
    tags: dict[str, int],
    name: Callable[[int], str],
    out: KeyedSweep,
) -> pa.Table:
    """Remove (rewrite) the older versions of ``newest``'s keys from ``others``; the keys of
    ``newest`` whose version is not the newest (a newer one sits elsewhere)."""
    order = version_order(keys)
    projected = [*keys.columns, *order[:-1]]
    mine = newest.select([*keys.columns, *order])
    mine = mine.rename_columns([*keys.columns, *(_THEIRS + c for c in order)])
    matches = []
    for i, f in enumerate(others):
        data = _read(table, f, columns, tags, projected)
        out.files_scanned += 1
        data = data.append_column(_FILE, pa.array([i] * data.num_rows, pa.int32()))
        data = data.append_column(_ROW, pa.array(range(data.num_rows), pa.int64()))
        found = data.join(mine, list(keys.columns), join_type="inner")
        if found.num_rows:
            matches.append(found)
    if not matches:
        return newest.select(list(keys.columns)).slice(0, 0)
    found = pa.concat_tables(matches)
    newer = newer_versions(found, order, _THEIRS)
    beaten = found.filter(newer).select(list(keys.columns))
    beaten = beaten.group_by(list(keys.columns)).aggregate([])
    older = found.filter(pc.invert(newer)).join(beaten, list(keys.columns), join_type="left anti")
    if older.num_rows:
        _rewrite(table, columns, others, older, tags, name, out)
    return beaten


def _rewrite(
    table: Table,
    columns: tuple[Column, ...],
    others: Sequence[LiveFile],
    older: pa.Table,
    tags: dict[str, int],
    name: Callable[[int], str],
    out: KeyedSweep,
) -> None:
    """Rewrite each file holding a row of ``older`` without those rows."""
    by_file: dict[int, list[int]] = {}
    for i, row in zip(older.column(_FILE).to_pylist(), older.column(_ROW).to_pylist(), strict=True):
        by_file.setdefault(i, []).append(row)
    schema = data_schema(columns)
    for k, (i, rows) in enumerate(sorted(by_file.items())):
        f = others[i]
        data = _read(table, f, columns, tags)
        keep = pc.invert(
            pc.is_in(pa.array(range(data.num_rows), pa.int64()), value_set=pa.array(rows, pa.int64()))
        )
        left = data.filter(keep)
        out.removes.append(f)
        out.files_rewritten += 1
        out.versions_removed += data.num_rows - left.num_rows
        if left.num_rows == 0:
            continue
        assert left.schema.names[: len(schema.names)] == schema.names
        path = _rewritten_path(table, f, name(10_000 + k))
        write_parquet(table, path, left)
        out.adds.append((path, f.partition, left.num_rows))
        out.ranges[path] = ranges_stats(left, columns)


def _rewritten_path(table: Table, f: LiveFile, name: str) -> str:
    """Where a rewritten ``f`` goes: beside its chunk's files (a staged file keeps its chunk's id in its
    name, so rolls and housekeeping still know its chunk), or in its standard partition's directory."""
    if f.staged and f.chunk is not None:
        return f"{staged_dir(table, f.partition)}/{f.chunk}-{name.removeprefix('part-')}"
    return f"{partition_dir(table, f.partition)}/{name}"


def keep_expired_versions(table: Table, version: int, files: Sequence[LiveFile], name: str) -> None:
    """Before an expiry of a keyed table with a sequence column removes ``files`` (at ``version``):
    keep their versions as deletes. A key whose newest version expires is gone, and an older
    version of it that arrived late (and sits in an open partition) must not take its place; each
    kept delete is the expiring version itself, so it beats only what that version beat already."""
    keys = table.keys
    assert keys is not None and keys.sequence_by is not None
    tags = arrivals(table, version) if any(f.staged for f in files) else {}
    names = tombstone_columns(keys)
    parts = [_read(table, f, table.columns, tags, names).select(names) for f in files]
    parts = [p for p in parts if p.num_rows]
    if parts:
        write_tombstones(table, name, pa.concat_tables(parts))


def rewritten_by_sweep(
    catalog: Catalog, table: Table, roll: Roll, owner: str
) -> tuple[dict[datetime, tuple[int, int, int]], dict[datetime, int], list[str]]:
    """The other partitions ``roll``'s keyed sweep rewrote, counted anew (standard ones) or the bytes it
    freed there (streaming ones), and the files it replaced there: from its commit, found in the
    log (and recorded) if the roller that made it died before recording its version."""
    version = roll.sweep_version
    if version is None and roll.seal_version is not None:
        newest = int(catalog.warehouse.load(table).version())
        for v in range(roll.seal_version + 1, newest + 1):
            info = commit_info(table, v) or {}
            if str(info.get(SWEEP_KEY, "")).startswith(f"{roll.id}/"):
                version = v
                roll = catalog.store.record_roll_progress(roll, owner, sweep_version=v)
                break
    if version is None:
        return {}, {}, []
    touched, replaced = set(), []
    for action in commit_actions(table, version) or []:
        for kind in ("add", "remove"):
            a = action.get(kind)
            if a is None:
                continue
            value = parse_partition_value(a["partitionValues"][table.partition_column])
            if value != roll.partition_value:
                touched.add(value)
                if kind == "remove":
                    replaced.append(disk_path(a["path"]))
    if not touched:
        return {}, {}, []
    return (*recount(catalog, table, version, touched, {"roll": roll.id}), replaced)
