"""Delta Sharing (the open Delta Sharing protocol, parquet response format) under ``/delta-sharing``.

A recipient's profile file names ``http(s)://HOST:PORT/delta-sharing`` as its endpoint and carries a
streampart token as its bearer token (``streampart token create … --sharing-profile``). Shares are
made by an admin (``streampart share create|add``); a share's schemas are the namespaces of the tables
and links it holds. A token lists and loads a share's tables only in namespaces it may read: a share
with nothing it may read is not there for it at all.

A query answers the files of one pinned Delta version (the newest, or the one its ``version`` or
``timestamp`` names) as URLs: signed by this server and served by it for a local warehouse
(:mod:`ingest.api.file_urls`), presigned by the bucket otherwise; ``jsonPredicateHints`` leave out
files whose statistics rule them out and ``limitHint`` stops once the files hold that many rows.
Changes (``load_table_changes``) are served for tables of appends: each commit's added files as
inserts, the files a delete or an expiry removed as deletes (every row of them), rolls left out (they
move rows, they change none). Keyed tables show their resolved rows; links and keyed tables serve
no changes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from ingest.api.auth import Principal
from ingest.api.catalog_views import iceberg_view, pinned
from ingest.api.deps import Reader, State
from ingest.api.errors import ApiError
from ingest.api.file_urls import Ticket, check_ticket, file_url
from ingest.api.sharing_hints import FileFacts, may_match, parse_hints
from ingest.api.state import ApiState
from metastore import storage
from metastore.delta.files import LiveFile, disk_path
from metastore.delta.footers import read_footer
from metastore.delta.history import check_readable
from metastore.delta.layout import parse_partition_value
from metastore.delta.log import commit_actions, commit_info, version_at
from metastore.errors import NotFoundError, UserInputError
from metastore.links import Resolved
from metastore.models import ApiToken, Permission, Share, TableName, iso, parse_instant
from metastore.snapshots import Snapshot

PREFIX = "/delta-sharing"
router = APIRouter(prefix=PREFIX, tags=["delta-sharing"])
NDJSON = "application/x-ndjson; charset=utf-8"
VERSION_HEADER = "Delta-Table-Version"
MAX_PAGE = 1000
# Why 10,000: a change feed reads one commit file per version; a range past this is one request's
# worth of minutes of reading, which a client can ask for in parts as easily.
MAX_CHANGE_VERSIONS = 10_000


def _missing(what: str) -> ApiError:
    return ApiError(404, "RESOURCE_DOES_NOT_EXIST", f"{what} does not exist", "path")


# -- what a token sees -----------------------------------------------------------------------------
def _held(st: ApiState, who: Principal, share: Share) -> list[TableName]:
    """What ``share`` holds that ``who`` may read and that exists, by namespace and name."""
    out = []
    for name in share.tables:
        if not who.allows(Permission.READ, name.namespace):
            continue
        try:
            st.catalog.resolve(name, name.namespace)
        except NotFoundError:
            continue  # dropped since it was shared
        out.append(name)
    return sorted(out, key=lambda n: (n.namespace, n.table))


def _shares(st: ApiState, who: Principal) -> list[Share]:
    return [s for s in st.catalog.primary.list_shares() if _held(st, who, s)]


def _share(st: ApiState, who: Principal, name: str) -> tuple[Share, list[TableName]]:
    found = st.catalog.primary.find_share(name)
    held = _held(st, who, found) if found is not None else []
    if found is None or not held:
        raise _missing(f"share {name!r}")
    return found, held


def _shared(st: ApiState, who: Principal, share: str, schema: str, table: str) -> Resolved:
    """The table or link ``schema.table`` of ``share``, once ``who`` may read it."""
    _, held = _share(st, who, share)
    if TableName(namespace=schema, table=table) not in held:
        raise _missing(f"table {share}.{schema}.{table}")
    return st.resolved_of(who, schema, table)


def _page(items: list[dict[str, Any]], page_token: str | None, max_results: int | None) -> dict[str, Any]:
    start = 0
    if page_token:
        try:
            start = int(base64.urlsafe_b64decode(page_token.encode()).decode())
        except ValueError:
            refused = "pageToken is not one this server gave"
            raise ApiError(400, "INVALID_PARAMETER_VALUE", refused, "pageToken") from None
    if max_results is not None and max_results < 1:
        raise ApiError(400, "INVALID_PARAMETER_VALUE", "maxResults must be at least 1", "maxResults")
    size = min(max_results or MAX_PAGE, MAX_PAGE)
    out: dict[str, Any] = {"items": items[start : start + size]}
    if start + size < len(items):
        out["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
    return out


def _share_id(share: Share) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"streampart:share:{share.id}:{share.name}"))


def _item(share: Share, name: TableName) -> dict[str, Any]:
    return {"name": name.table, "schema": name.namespace, "share": share.name, "shareId": _share_id(share)}


# -- listings --------------------------------------------------------------------------------------
@router.get("/shares", summary="The shares the token may read something of")
def list_shares(
    who: Reader, st: State, maxResults: int | None = None, pageToken: str | None = None
) -> dict[str, Any]:
    items = [{"name": s.name, "id": _share_id(s)} for s in _shares(st, who)]
    return _page(items, pageToken, maxResults)


@router.get("/shares/{share}", summary="One share")
def get_share(share: str, who: Reader, st: State) -> dict[str, Any]:
    found, _ = _share(st, who, share)
    return {"share": {"name": found.name, "id": _share_id(found)}}


@router.get("/shares/{share}/schemas", summary="A share's schemas: the namespaces of what it holds")
def list_schemas(
    share: str, who: Reader, st: State, maxResults: int | None = None, pageToken: str | None = None
) -> dict[str, Any]:
    found, held = _share(st, who, share)
    items = [{"name": ns, "share": found.name} for ns in sorted({n.namespace for n in held})]
    return _page(items, pageToken, maxResults)


@router.get("/shares/{share}/schemas/{schema}/tables", summary="A share's tables and links in one schema")
def list_tables(
    share: str,
    schema: str,
    who: Reader,
    st: State,
    maxResults: int | None = None,
    pageToken: str | None = None,
) -> dict[str, Any]:
    found, held = _share(st, who, share)
    in_schema = [n for n in held if n.namespace == schema]
    if not in_schema:
        raise _missing(f"schema {share}.{schema}")
    return _page([_item(found, n) for n in in_schema], pageToken, maxResults)


@router.get("/shares/{share}/all-tables", summary="Every table and link of a share")
def list_all_tables(
    share: str, who: Reader, st: State, maxResults: int | None = None, pageToken: str | None = None
) -> dict[str, Any]:
    found, held = _share(st, who, share)
    return _page([_item(found, n) for n in held], pageToken, maxResults)


# -- one table -------------------------------------------------------------------------------------
def _newest(st: ApiState, resolved: Resolved) -> int:
    return int(st.catalog.load(resolved.table).version())


def _version_of(st: ApiState, resolved: Resolved, version: Any, timestamp: Any, field: str) -> int | None:
    """The version a request names: ``version``, or the newest committed at or before ``timestamp``
    (None: the newest)."""
    table = resolved.table
    if version is not None:
        try:
            v = int(version)
        except (TypeError, ValueError):
            raise UserInputError(f"{field}: version {version!r} is not a number") from None
        check_readable(table, v, _newest(st, resolved))
        return v
    if timestamp is not None:
        at = parse_instant(str(timestamp), f"{field} timestamp")
        found = version_at(table, at)
        if found is None:
            raise UserInputError(f"{table.name} has no version committed at or before {iso(at)} in its log")
        return found
    return None


def _schema_string(snap: Snapshot) -> str:
    return json.dumps({"type": "struct", "fields": [{**f, "metadata": {}} for f in snap.fields()]})


def _changes_refused(resolved: Resolved) -> str | None:
    if resolved.link is not None:
        return "a link serves no changes: ask its source's owner to share the source"
    if resolved.table.keys is not None:
        return "a keyed table serves no changes here: query it at the versions you want instead"
    return None


def _lines(resolved: Resolved, snap: Snapshot) -> list[dict[str, Any]]:
    cdf = _changes_refused(resolved) is None
    metadata = {
        "id": str(iceberg_view(resolved).table_uuid),  # the same id the Iceberg catalog gives it
        "name": resolved.name.table,
        "format": {"provider": "parquet"},
        "schemaString": _schema_string(snap),
        "partitionColumns": [snap.table.partition_column],
        "configuration": {"delta.enableChangeDataFeed": "true" if cdf else "false"},
        "version": snap.version,
        "size": sum(f.size for f in snap.files),
        "numFiles": len(snap.files),
    }
    return [{"protocol": {"minReaderVersion": 1}}, {"metaData": metadata}]


def _ndjson(lines: list[dict[str, Any]], version: int) -> Response:
    body = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    return Response(body, 200, media_type=NDJSON, headers={VERSION_HEADER: str(version)})


def _value(value: datetime) -> str:
    """A partition value as a recipient reads it: an instant in UTC (``…Z``), so the partition column
    reads as a UTC timestamp, as the table's own timestamp columns do."""
    return iso(value)


def _file_id(location: str, path: str) -> str:
    return hashlib.sha256(f"{location}\0{path}".encode()).hexdigest()[:32]


@router.get("/shares/{share}/schemas/{schema}/tables/{table}/version", summary="A table's version")
def table_version(
    share: str, schema: str, table: str, who: Reader, st: State, startingTimestamp: str | None = None
) -> Response:
    """``Delta-Table-Version``: the newest version, or the first committed at or after
    ``startingTimestamp``."""
    resolved = _shared(st, who, share, schema, table)
    newest = _newest(st, resolved)
    version = newest
    if startingTimestamp is not None:
        version = _first_at(resolved, parse_instant(startingTimestamp, "startingTimestamp"), newest)
    return Response(status_code=200, headers={VERSION_HEADER: str(version)})


def _first_at(resolved: Resolved, at: datetime, newest: int) -> int:
    """The first version committed at or after ``at`` (400 if none is yet)."""
    before = version_at(resolved.table, at)
    if before is None:
        return 0
    info = commit_info(resolved.table, before) or {}
    if float(info.get("timestamp", 0)) >= at.timestamp() * 1000:
        return before
    if before + 1 > newest:
        raise UserInputError(f"{resolved.name} has no version committed at or after {iso(at)} yet")
    return before + 1


@router.get("/shares/{share}/schemas/{schema}/tables/{table}/metadata", summary="A table's schema")
def table_metadata(share: str, schema: str, table: str, who: Reader, st: State) -> Response:
    resolved = _shared(st, who, share, schema, table)
    snap = pinned(st, resolved)
    return _ndjson(_lines(resolved, snap), snap.version)


@router.post(
    "/shares/{share}/schemas/{schema}/tables/{table}/query", summary="A table's files at one version"
)
async def table_query(
    share: str, schema: str, table: str, request: Request, who: Reader, st: State
) -> Response:
    raw = await request.body()
    try:
        body = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        raise ApiError(400, "INVALID_PARAMETER_VALUE", f"the body is not JSON: {exc}", "body") from None
    except RecursionError:
        raise ApiError(400, "INVALID_PARAMETER_VALUE", "the body is nested too deep", "body") from None
    if not isinstance(body, dict):
        raise ApiError(400, "INVALID_PARAMETER_VALUE", "the body must be a JSON object", "body")
    _check_query(body)
    t0 = time.perf_counter()
    lines, version = await run_in_threadpool(
        _query, st, who, share, schema, table, body, str(request.base_url)
    )
    st.metrics.catalog_loads.labels("delta-sharing").inc()
    st.metrics.catalog_load_seconds.labels("delta-sharing").observe(time.perf_counter() - t0)
    return _ndjson(lines, version)


def _check_query(body: dict[str, Any]) -> None:
    """400 naming the field of a query body that is not what the protocol sends."""

    def refuse(field: str, why: str) -> None:
        raise ApiError(400, "INVALID_PARAMETER_VALUE", f"{field} {why}", field)

    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    if body.get("version") is not None and not whole(body["version"]):
        refuse("version", "must be a whole number, 0 or more")
    if body.get("timestamp") is not None and not isinstance(body["timestamp"], str):
        refuse("timestamp", "must be a string (an ISO-8601 time)")
    if body.get("version") is not None and body.get("timestamp") is not None:
        refuse("timestamp", "and version: give one of them, not both")
    if body.get("limitHint") is not None and not whole(body["limitHint"]):
        refuse("limitHint", "must be a whole number, 0 or more")
    if body.get("jsonPredicateHints") is not None and not isinstance(body["jsonPredicateHints"], str):
        refuse("jsonPredicateHints", "must be a string holding the JSON expression")


def _query(
    st: ApiState, who: Principal, share: str, schema: str, table: str, body: dict[str, Any], base_url: str
) -> tuple[list[dict[str, Any]], int]:
    resolved = _shared(st, who, share, schema, table)
    if body.get("startingVersion") is not None or body.get("endingVersion") is not None:
        raise UserInputError("startingVersion/endingVersion: ask for changes (…/changes), not a query")
    asked = _version_of(st, resolved, body.get("version"), body.get("timestamp"), "query")
    snap = pinned(st, resolved, asked)
    hint = parse_hints(body.get("jsonPredicateHints"))
    limit = body.get("limitHint")
    lines = _lines(resolved, snap)
    stamp = None
    if asked is not None:
        info = commit_info(snap.table, snap.version) or {}
        stamp = info.get("timestamp")
    rows = 0
    for f in sorted(snap.files, key=lambda f: (f.partition, f.path)):
        if limit is not None and rows >= limit:
            break
        if hint is not None and not may_match(hint, _facts(snap, f)):
            continue
        location, column = snap.table.location, snap.table.partition_column
        through = (share, str(resolved.name))
        lines.append({"file": _file(st, who, base_url, through, location, column, f, asked, stamp)})
        rows += f.rows
    return lines, snap.version


def _facts(snap: Snapshot, f: LiveFile) -> FileFacts:
    footer = read_footer(storage.join(snap.table.location, f.path))
    bounds = {name: (low, high) for name, (_, low, high) in footer.bounds.items()}
    bounds[snap.table.partition_column] = (f.partition, f.partition)
    nulls = dict(footer.null_counts)
    nulls[snap.table.partition_column] = 0
    return FileFacts(bounds, nulls, f.rows)


def _file(
    st: ApiState,
    who: Principal,
    base_url: str,
    through: tuple[str, str],
    location: str,
    partition_column: str,
    f: LiveFile,
    version: int | None,
    stamp: Any,
) -> dict[str, Any]:
    url, expires = file_url(st, base_url, who.token.id if who.token else None, through, location, f.path)
    out: dict[str, Any] = {
        "url": url,
        "id": _file_id(location, f.path),
        "partitionValues": {partition_column: _value(f.partition)},
        "size": f.size,
        "stats": json.dumps({"numRecords": f.rows}),
        "expirationTimestamp": expires,
    }
    if version is not None:
        out["version"] = version
        if isinstance(stamp, int):
            out["timestamp"] = stamp
    return out


@router.get("/shares/{share}/schemas/{schema}/tables/{table}/changes", summary="A table's changes")
async def table_changes(
    share: str,
    schema: str,
    table: str,
    request: Request,
    who: Reader,
    st: State,
    startingVersion: int | None = None,
    endingVersion: int | None = None,
    startingTimestamp: str | None = None,
    endingTimestamp: str | None = None,
) -> Response:
    """Each commit's added files as inserts and the files it removed as deletes (every row of them),
    from ``startingVersion`` (or the first version at or after ``startingTimestamp``) to
    ``endingVersion`` (or the newest at or before ``endingTimestamp``; default: the newest)."""
    args = (startingVersion, endingVersion, startingTimestamp, endingTimestamp)
    lines, version = await run_in_threadpool(
        _changes, st, who, share, schema, table, args, str(request.base_url)
    )
    st.metrics.catalog_loads.labels("delta-sharing").inc()
    return _ndjson(lines, version)


def _changes(
    st: ApiState,
    who: Principal,
    share: str,
    schema: str,
    table: str,
    args: tuple[int | None, int | None, str | None, str | None],
    base_url: str,
) -> tuple[list[dict[str, Any]], int]:
    start_v, end_v, start_t, end_t = args
    resolved = _shared(st, who, share, schema, table)
    refused = _changes_refused(resolved)
    if refused is not None:
        raise UserInputError(refused)
    newest = _newest(st, resolved)
    if start_v is None and start_t is None:
        raise UserInputError("give startingVersion or startingTimestamp")
    start = (
        start_v
        if start_v is not None
        else _first_at(resolved, parse_instant(str(start_t), "startingTimestamp"), newest)
    )
    end = newest
    if end_v is not None:
        end = end_v
    elif end_t is not None:
        found = version_at(resolved.table, parse_instant(end_t, "endingTimestamp"))
        if found is None:
            raise UserInputError(f"{resolved.name} has no version committed at or before {end_t}")
        end = found
    check_readable(resolved.table, start, newest)
    check_readable(resolved.table, end, newest)
    if end < start:
        raise UserInputError(f"endingVersion {end} is before startingVersion {start}")
    if end - start >= MAX_CHANGE_VERSIONS:
        raise UserInputError(
            f"versions {start}..{end} are more than {MAX_CHANGE_VERSIONS:,} at once: ask for fewer "
            "(startingVersion, endingVersion) and page through them"
        )
    snap = pinned(st, resolved, end)
    lines = _lines(resolved, snap)
    location = resolved.table.location
    token = who.token.id if who.token else None
    for v in range(start, end + 1):
        actions = commit_actions(resolved.table, v)
        if actions is None:
            raise UserInputError(f"version {v} of {resolved.name} is no longer in its log")
        stamp = next((a["commitInfo"].get("timestamp") for a in actions if "commitInfo" in a), None)
        for a in actions:
            kind = "add" if "add" in a else "remove" if "remove" in a else None
            if kind is None or not a[kind].get("dataChange", True):
                continue  # metadata, or a roll's move of rows (no change)
            action = a[kind]
            path = disk_path(action["path"])
            value = parse_partition_value(next(iter((action.get("partitionValues") or {}).values())))
            url, expires = file_url(st, base_url, token, (share, str(resolved.name)), location, path)
            size = action.get("size")
            if size is None:
                size = storage.stat(storage.join(location, path)).size
            lines.append(
                {
                    kind: {
                        "url": url,
                        "id": _file_id(location, path),
                        "partitionValues": {resolved.table.partition_column: _value(value)},
                        "size": int(size),
                        "version": v,
                        "timestamp": int(stamp)
                        if stamp is not None
                        else int(datetime.now(UTC).timestamp() * 1000),
                        "expirationTimestamp": expires,
                    }
                }
            )
    return lines, end


# -- files -----------------------------------------------------------------------------------------
@router.api_route(
    "/files/{signed}", methods=["GET", "HEAD"], summary="A file a query's URL names", include_in_schema=False
)
def serve_file(signed: str, request: Request, st: State) -> Response:
    """The file of a signed URL (no token: the URL is the credential), whole or the ``Range`` asked."""
    ticket, token = check_ticket(st, signed)
    _still_shared(st, ticket, token)
    path = storage.join(ticket.location, ticket.path)
    if not storage.exists(path):
        raise _missing("file")
    if request.method == "GET":
        st.metrics.catalog_files.labels("delta-sharing").inc()
    return FileResponse(path, media_type="application/octet-stream")


def _still_shared(st: ApiState, ticket: Ticket, token: ApiToken | None) -> None:
    """403 unless the share still holds the table or link the URL was made through, that name still
    reads the table whose file it names, and the URL's token may still read it."""
    gone = ApiError(403, "PERMISSION_DENIED", "this file is no longer shared with this URL's token", "url")
    try:
        name = TableName.parse(ticket.name)
        share = st.catalog.primary.find_share(ticket.share)
        if share is None or name not in share.tables:
            raise gone
        resolved = st.catalog.resolve(name, name.namespace)
    except (UserInputError, NotFoundError):
        raise gone from None
    if resolved.table.location != ticket.location:
        raise gone
    if token is not None and not token.allows(Permission.READ, name.namespace):
        raise gone
