"""Appends written straight to a Delta log: a chunk commit costs one small file, whatever the table holds.

delta-rs (1.6) materialises every live file of a table whenever it loads, refreshes or commits
to it, so a chunk commit through it costs time in proportion to the files the table holds (2,000
staged files took a commit from 20 ms to 50-90 ms here) and to the commits since the last
checkpoint. An append needs none of that: by the Delta protocol a commit is the file
``_delta_log/<version>.json``, created only if absent, and a blind append (it reads nothing and
removes nothing) conflicts only with a concurrent change of the table's metadata or protocol —
a roll's seal, a schema change — or, for an application transaction (``txn``), with another commit of the same
application id. So this module writes the commit file itself, created only if that version is
absent (``metastore.storage.put_if_absent``: a hard link on a POSIX file system, a PUT with
``If-None-Match: *`` on a bucket, as delta-rs does both). A lost race reads the winning commit,
refuses on a conflict, and tries the next version. Everything else (rolls' seals and sweeps,
checkpoints, reads) stays with delta-rs, which reads these commits like its own.

Only for tables whose protocol asks nothing more of a writer (:func:`plain_appends`).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from metastore import storage
from metastore.delta.log import ACTIONS_KEY, SCHEMA_KEY, commit_file
from metastore.delta.stats import stats_json
from metastore.errors import ConflictError
from metastore.models.keys import ARRIVAL_TAG, arrival_of

ENGINE = "streampart"


def plain_appends(dt: Any) -> bool:
    """Whether a writer may append to ``dt``'s table by writing the commit file itself.

    Writer version 2 at most (appendOnly and column invariants, which an append of files
    already validated against the schema satisfies) and no table features.
    """
    protocol = dt.protocol()
    return int(protocol.min_writer_version) <= 2 and not getattr(protocol, "writer_features", None)


def log_path(path: str) -> str:
    """A file's path (relative, as on disk) as the log holds it: a URI path, encoded as delta-rs
    encodes the paths it writes (``=`` kept, so a ``<pcol>=<value>`` directory reads the same in
    our adds and in delta-rs' removes of them: delta-rs matches a remove to its add by this text)."""
    return urllib.parse.quote(path, safe="/=")


def append_actions(
    partition_column: str,
    files: Iterable[tuple[str, str, int, int, int]],
    metadata: dict[str, str],
    now_ms: int,
    app_id: str | None = None,
    *,
    schema_change: dict[str, Any] | None = None,
    operation: tuple[str, dict[str, str]] | None = None,
    arrival: int | None = None,
    ranges: Mapping[str, str] | None = None,
) -> bytes:
    """The commit file of an append: ``files`` as ``(path, partition value, rows, size, mtime ms)``.

    ``schema_change``: a ``metaData`` action (``metastore.delta.metadata.metadata_action``) that the
    commit carries right after its commitInfo, before its txn and adds, so the rows and the columns
    they bring land in one version. The commitInfo names it under ``streampart.schema``: the
    change's key if ``metadata`` gives one there, else how many fields the new schema has.
    Like a roll's seal, it makes every blind append that planned on an older version conflict.
    ``operation``: the commitInfo's operation and its parameters (default: an append's ``WRITE``;
    :func:`schema_operation` for a schema-only commit). ``arrival``: the version this body is
    written as, on a keyed table: each add is tagged with its rows' arrival (``ARRIVAL_TAG``).
    ``ranges``: columns' statistics of files, by path (``metastore/delta/stats.py``).
    """
    files = list(files)
    name, parameters = operation or (
        "WRITE",
        {"mode": "Append", "partitionBy": json.dumps([partition_column])},
    )
    info: dict[str, Any] = {
        "timestamp": now_ms,
        "operation": name,
        "operationParameters": parameters,
        "engineInfo": ENGINE,
        **metadata,
        ACTIONS_KEY: str(len(files)),
    }
    actions: list[dict[str, Any]] = [{"commitInfo": info}]
    if schema_change is not None:
        fields = json.loads(schema_change["schemaString"])["fields"]
        info.setdefault(SCHEMA_KEY, f"schema of {len(fields)} fields")
        actions.append({"metaData": schema_change})
    if app_id is not None:
        actions.append({"txn": {"appId": app_id, "version": 1, "lastUpdated": now_ms}})
    for place, (path, value, rows, size, mtime) in enumerate(files):
        add: dict[str, Any] = {
            "path": log_path(path),
            "partitionValues": {partition_column: value},
            "size": size,
            "modificationTime": mtime,
            "dataChange": True,
            "stats": stats_json(rows, (ranges or {}).get(path)),
        }
        if arrival is not None:
            add["tags"] = {ARRIVAL_TAG: str(arrival_of(arrival, place))}
        actions.append({"add": add})
    return "".join(json.dumps(a) + "\n" for a in actions).encode()


def schema_operation(
    schema_change: dict[str, Any], added: Iterable[str], widened: Iterable[str]
) -> tuple[str, dict[str, str]]:
    """The commitInfo operation Delta writes for a schema-only commit of ``schema_change`` (a
    ``metaData`` action): ``ADD COLUMNS`` naming the ``added`` fields, or ``CHANGE COLUMN`` naming the
    ``widened`` ones (and the added, if the change also adds: Delta would make two commits of it)."""
    fields = {f["name"]: f for f in json.loads(schema_change["schemaString"])["fields"]}
    adds = [{"column": fields[n]} for n in added]
    widens = [{"column": fields[n]} for n in widened]
    if not widens:
        return "ADD COLUMNS", {"columns": json.dumps(adds)}
    parameters = {"columns": json.dumps(widens)}
    if adds:
        parameters["added"] = json.dumps(adds)
    return "CHANGE COLUMN", parameters


def publish(
    location: str,
    body: bytes | Callable[[int], bytes],
    read_version: int,
    max_retries: int,
    app_id: str | None = None,
) -> int:
    """Write ``body`` as the next commit after ``read_version``; the version it became. ``body`` may
    be a function of the version it is written as (a keyed table's adds carry their version).

    Raises:
        ConflictError: a commit since ``read_version`` changed the table's metadata or protocol
            (or committed ``app_id``): nothing was written; decide again on a newer snapshot.
        OSError: the commit file could not be written, or may have been (look it up).
    """
    version = read_version + 1
    for _ in range(max_retries + 1):
        # ``body`` is unique to this commit (its commitInfo carries the committer's random key), so
        # a version found holding exactly it is this commit's own, landed by a retried request
        text = body(version) if callable(body) else body
        if storage.put_if_absent(commit_file(location, version), text):
            return version
        conflict = _conflict(location, version, app_id)
        if conflict:
            raise ConflictError(conflict) from None
        version += 1
    raise ConflictError(f"{max_retries} commits landed before this one could; try again")


def _conflict(location: str, version: int, app_id: str | None) -> str | None:
    """Why the commit at ``version`` conflicts with a blind append (None: it does not)."""
    for line in storage.read_bytes(commit_file(location, version)).decode().splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "metaData" in action or "protocol" in action:
            return f"version {version} changed the table's metadata (a roll's seal or a schema change)"
        txn = action.get("txn")
        if app_id is not None and txn is not None and txn.get("appId") == app_id:
            return f"version {version} committed application transaction {app_id} already"
    return None
