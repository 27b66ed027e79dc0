"""One Delta snapshot of a table (or of what a link shows of one) as an Iceberg table's metadata.

Nothing is copied: the Iceberg table's manifests list the very Parquet files of the Delta snapshot.
Its metadata is made when an engine loads the table (:func:`materialize`), not on every commit: a
table nobody reads through Iceberg costs its writers nothing, and a load always describes the
version it pinned — every committed chunk in it, nothing uncommitted. Each load at a new Delta
version adds an Iceberg snapshot whose id *is* that version, written beside the table::

    <table>/_iceberg/metadata/<version>-<content>.metadata.json   the table's metadata (v2)
    <table>/_iceberg/metadata/snap-<version>-<uuid>.avro          a snapshot's manifest list
    <table>/_iceberg/metadata/<content>-<uuid>.avro               one partition's manifest
    <table>/_iceberg/links/<namespace>.<link>/…                   the same for each link to it

A manifest is written once per set of files it holds (``content`` is a digest of them): the standard
partitions of one period (:data:`GROUP_PARTITIONS` of the table's roll period) share one, written
once and listed again by every later snapshot until a partition in it rolls, expires or loses rows;
each open streaming partition has its own, rewritten when chunks commit. Few manifests keep a
reader's planning short (each is a file it opens), and their partition bounds let it skip whole ones.

The metadata of a version builds on the newest one before it: its snapshots (those whose version
the Delta log still holds, at most :data:`SNAPSHOTS_KEPT`), its schemas (a new schema when the
columns changed), and its snapshot log — only for an unbroken run of versions, so a reader's time
travel by timestamp never lands on a snapshot that was not the table's state at that time (a
version nobody loaded is not in the log, and a time before the run is refused, not guessed).
Housekeeping deletes what the newest metadata no longer needs (:func:`clean`), once it is older than
its retention. Two servers loading the same version at once write the same file name: the first one's stays
(a create only if absent), the other answers with it. Names starting with ``_`` are hidden from
Delta, Hive and Spark readers, so the directory changes nothing for them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pyiceberg.manifest import (
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    read_manifest_list,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadataV2
from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotLogEntry, Summary

from metastore import storage
from metastore.delta.files import LiveFile
from metastore.iceberg.files import data_file, micros
from metastore.iceberg.io import StorageInput, StorageIO, StorageOutput
from metastore.iceberg.schema import NAME_MAPPING, PARTITION_FIELD_ID, IcebergSchema

ICEBERG_DIR = "_iceberg"
SNAPSHOTS_KEPT = 100  # the newest snapshots a table's metadata lists
GROUP_PARTITIONS = 64  # standard partitions of this many roll periods share a manifest
_SUFFIX = ".metadata.json"


@dataclass(frozen=True)
class View:
    """What one Iceberg table shows: a streampart table's files, or a link's (its source's files).

    Attributes:
        name: The name engines know it by (a link's own name).
        location: The location of the table whose files are read (a link's source).
        uid: That table's identity (its ``uid``).
        link: ``True`` for a link (its metadata lives beside its source's, under ``links/``).
    """

    name: str
    location: str
    uid: str
    link: bool = False

    @property
    def directory(self) -> str:
        if self.link:
            return storage.join(self.location, ICEBERG_DIR, "links", self.name)
        return storage.join(self.location, ICEBERG_DIR, "metadata")

    @property
    def table_uuid(self) -> uuid.UUID:
        if not self.link:
            try:
                return uuid.UUID(self.uid)
            except ValueError:
                pass
        return uuid.uuid5(uuid.NAMESPACE_URL, f"streampart:{self.name}:{self.uid}")


@dataclass(frozen=True)
class Version:
    """One Delta version of a view, as :func:`materialize` is given it."""

    version: int
    files: Sequence[LiveFile]
    schema: IcebergSchema
    timestamp: datetime  # its commit's
    operation: Operation  # what it did since the version before it (``overwrite`` if unknown)
    properties: dict[str, str]
    oldest: int = 0  # the oldest version the Delta log still holds: older snapshots are not listed
    # the standard partitions of one period this long share a manifest (readers open fewer files)
    group_span: timedelta = timedelta(days=1)


@dataclass(frozen=True)
class Loaded:
    """An Iceberg table's metadata and the file that holds it."""

    location: str
    metadata: TableMetadataV2

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.metadata.model_dump_json(exclude_none=True, by_alias=True))
        return out


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


def _groups(files: Sequence[LiveFile], span: timedelta) -> dict[tuple[str, int], list[LiveFile]]:
    """The files by manifest: each open partition's in one (its chunks change it), the standard
    partitions' by period of ``span`` (a group changes only when a partition in it rolls, expires or
    has rows deleted)."""
    width = max(1, int(span.total_seconds() * 1_000_000))
    out: dict[tuple[str, int], list[LiveFile]] = {}
    for f in files:
        key = ("open", micros(f.partition)) if f.staged else ("rolled", micros(f.partition) // width)
        out.setdefault(key, []).append(f)
    return dict(sorted(out.items()))


def materialize(view: View, at: Version) -> Loaded:
    """The Iceberg metadata of ``view`` at ``at``: made now (manifests, manifest list, metadata file)
    unless a load of the same files made it before."""
    parts = _groups(at.files, at.group_span)
    keys = {
        group: _digest(at.schema.fingerprint, group, sorted((f.path, f.size) for f in files))
        for group, files in parts.items()
    }
    content = _digest(sorted(keys.values()), at.properties)
    name = f"{at.version:020d}-{content}{_SUFFIX}"
    where = storage.join(view.directory, name)
    try:
        return _read(where)
    except FileNotFoundError:
        pass
    previous = _previous(view, name)
    metadata = _metadata(view, at, parts, keys, previous)
    text = metadata.model_dump_json(exclude_none=True, by_alias=True).encode()
    if not storage.put_if_absent(where, text):
        return _read(where)  # another server made it first: the same version, the same files
    return Loaded(where, metadata)


def clean(directory: str, before: datetime) -> int:
    """Delete what the newest metadata in ``directory`` (one view's) no longer needs — older metadata
    files, manifest lists of snapshots it no longer lists, manifests none of its lists names —
    once written before ``before`` (a reader may still be planning a scan over an older file); how
    many files went."""
    try:
        entries = [e for e in storage.list_dir(directory) if not e.is_dir]
    except FileNotFoundError:
        return 0
    metas = sorted(e.name for e in entries if e.name.endswith(_SUFFIX))
    if not metas:
        return 0
    newest = _read(storage.join(directory, metas[-1])).metadata
    lists = {s.manifest_list.rsplit("/", 1)[-1] for s in newest.snapshots}
    cutoff = before.timestamp() * 1000
    old = [e.name for e in entries if e.mtime_ms < cutoff and e.name != metas[-1]]
    doomed = [n for n in old if n.endswith(_SUFFIX) or (n.startswith("snap-") and n not in lists)]
    manifests = [n for n in old if n.endswith(".avro") and not n.startswith("snap-")]
    if manifests:
        named: set[str] = set()
        for listed in lists:
            with contextlib.suppress(FileNotFoundError):
                found = read_manifest_list(StorageInput(storage.join(directory, listed)))
                named |= {m.manifest_path.rsplit("/", 1)[-1] for m in found}
        doomed += [m for m in manifests if m not in named]
    storage.delete([storage.join(directory, name) for name in doomed])
    return len(doomed)


def view_directories(location: str) -> list[str]:
    """The Iceberg metadata directories of the table at ``location``: its own, and each link's."""
    out = [storage.join(location, ICEBERG_DIR, "metadata")]
    with contextlib.suppress(FileNotFoundError):
        links = storage.list_dir(storage.join(location, ICEBERG_DIR, "links"))
        out += [storage.join(location, ICEBERG_DIR, "links", e.name) for e in links if e.is_dir]
    return out


def listed_files(directory: str) -> frozenset[str]:
    """Every data file (full location) the newest metadata in ``directory`` (one view's) lists, in any
    of its snapshots: what a reader of that view can be told to read."""
    try:
        metas = sorted(e.name for e in storage.list_dir(directory) if e.name.endswith(_SUFFIX))
    except FileNotFoundError:
        return frozenset()
    return _listed_by(storage.join(directory, metas[-1])) if metas else frozenset()


@functools.lru_cache(maxsize=256)
def _listed_by(metadata: str) -> frozenset[str]:
    """The data files the metadata file ``metadata`` lists (remembered: its content never changes)."""
    io = StorageIO()
    found: set[str] = set()
    for snapshot in _read(metadata).metadata.snapshots:
        with contextlib.suppress(FileNotFoundError):
            for manifest in read_manifest_list(StorageInput(snapshot.manifest_list)):
                found |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(io)}
    return frozenset(found)


def newest_loaded(view: View) -> tuple[int, datetime] | None:
    """The newest Delta version an engine loaded ``view`` at through Iceberg, and when (None: never)."""
    try:
        found = [e for e in storage.list_dir(view.directory) if e.name.endswith(_SUFFIX)]
    except FileNotFoundError:
        return None
    if not found:
        return None
    newest = max(found, key=lambda e: e.name)
    return int(newest.name[:20]), datetime.fromtimestamp(newest.mtime_ms / 1000, UTC)


def _read(where: str) -> Loaded:
    text = storage.read_bytes(where)
    return Loaded(where, TableMetadataV2.model_validate_json(text))


def _previous(view: View, name: str) -> Loaded | None:
    """The newest metadata of ``view`` before the one named ``name`` (another version's)."""
    try:
        names = [e.name for e in storage.list_dir(view.directory) if e.name.endswith(_SUFFIX)]
    except FileNotFoundError:
        return None
    older = sorted(n for n in names if n < name and n[:20] != name[:20])
    for candidate in reversed(older):
        try:
            return _read(storage.join(view.directory, candidate))
        except FileNotFoundError:
            continue
    return None


def _metadata(
    view: View,
    at: Version,
    parts: dict[tuple[str, int], list[LiveFile]],
    keys: dict[tuple[str, int], str],
    previous: Loaded | None,
) -> TableMetadataV2:
    old = previous.metadata if previous is not None else None
    schemas: list[Schema] = list(old.schemas) if old is not None else []
    schema_id = next((s.schema_id for s in schemas if s.fields == at.schema.schema.fields), None)
    if schema_id is None:
        schema_id = max((s.schema_id for s in schemas), default=-1) + 1
        schemas.append(at.schema.with_id(schema_id))
    schema = next(s for s in schemas if s.schema_id == schema_id)
    properties = {NAME_MAPPING: at.schema.name_mapping_json(), **at.properties}
    base: dict[str, Any] = {
        "location": view.location,
        "table-uuid": str(view.table_uuid),
        "last-updated-ms": int(at.timestamp.timestamp() * 1000),
        "last-column-id": max(f.field_id for s in schemas for f in s.fields),
        "schemas": [s.model_dump(by_alias=True, exclude_none=True) for s in schemas],
        "current-schema-id": schema_id,
        "partition-specs": [at.schema.spec.model_dump(by_alias=True)],
        "default-spec-id": 0,
        "last-partition-id": PARTITION_FIELD_ID,
        "properties": properties,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "default-sort-order-id": 0,
        "last-sequence-number": 0,
    }
    if at.version == 0:  # the table's creation: no rows yet, no snapshot
        return TableMetadataV2.model_validate(base)
    kept = [
        s
        for s in (old.snapshots if old is not None else [])
        if s.snapshot_id != at.version and s.snapshot_id >= at.oldest
    ]
    parent = old.current_snapshot_id if old is not None else None
    reusable = _manifests_of(old.snapshot_by_id(parent)) if old is not None and parent is not None else {}
    manifests = [
        reusable.get(keys[group]) or _write_manifest(view, at, schema, keys[group], files)
        for group, files in parts.items()
    ]
    manifest_list = storage.join(view.directory, f"snap-{at.version}-{uuid.uuid4().hex[:12]}.avro")
    parent_id = parent if parent is not None and parent < at.version else None
    with write_manifest_list(
        format_version=2,
        output_file=StorageOutput(manifest_list),
        snapshot_id=at.version,
        parent_snapshot_id=parent_id,
        sequence_number=at.version,
        avro_compression="null",
    ) as writer:
        writer.add_manifests(manifests)
    rows = sum(f.rows for f in at.files)
    snapshot = Snapshot(
        snapshot_id=at.version,
        parent_snapshot_id=parent_id,
        sequence_number=at.version,
        timestamp_ms=int(at.timestamp.timestamp() * 1000),
        manifest_list=manifest_list,
        summary=Summary(
            at.operation,
            **{
                "total-data-files": str(len(at.files)),
                "total-records": str(rows),
                "total-files-size": str(sum(f.size for f in at.files)),
                "total-delete-files": "0",
                "total-position-deletes": "0",
                "total-equality-deletes": "0",
                "streampart.delta-version": str(at.version),
            },
        ),
        schema_id=schema_id,
    )
    snapshots = sorted([*kept, snapshot], key=lambda s: s.snapshot_id)[-max(1, SNAPSHOTS_KEPT) :]
    ids = {s.snapshot_id for s in snapshots}
    # the log says which snapshot was the table's state from when: only an unbroken run of versions
    log: list[SnapshotLogEntry] = []
    if old is not None and parent == at.version - 1:
        log = [e for e in old.snapshot_log if e.snapshot_id in ids]
    log.append(SnapshotLogEntry(snapshot_id=at.version, timestamp_ms=snapshot.timestamp_ms))
    return TableMetadataV2.model_validate(
        {
            **base,
            "snapshots": [s.model_dump(by_alias=True, exclude_none=True) for s in snapshots],
            "current-snapshot-id": at.version,
            "snapshot-log": [e.model_dump(by_alias=True) for e in log],
            "refs": {"main": {"snapshot-id": at.version, "type": "branch"}},
            "last-sequence-number": max(s.sequence_number or 0 for s in snapshots),
        }
    )


def _manifests_of(snapshot: Snapshot | None) -> dict[str, ManifestFile]:
    """The manifests a snapshot lists, by the digest of the files each holds (its name's start)."""
    if snapshot is None:
        return {}
    try:
        listed = list(read_manifest_list(StorageInput(snapshot.manifest_list)))
    except FileNotFoundError:
        return {}
    return {m.manifest_path.rsplit("/", 1)[-1].split("-", 1)[0]: m for m in listed}


def _write_manifest(
    view: View, at: Version, schema: Schema, key: str, files: Sequence[LiveFile]
) -> ManifestFile:
    path = storage.join(view.directory, f"{key}-{uuid.uuid4().hex[:12]}.avro")
    with write_manifest(
        format_version=2,
        spec=at.schema.spec,
        schema=schema,
        output_file=StorageOutput(path),
        snapshot_id=at.version,
        avro_compression="null",
    ) as writer:
        for f in sorted(files, key=lambda f: f.path):
            writer.add(
                ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED,
                    snapshot_id=at.version,
                    data_file=data_file(view.location, f, at.schema),
                )
            )
    return writer.to_manifest_file()
