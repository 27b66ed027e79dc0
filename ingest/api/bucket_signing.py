"""Signing reads of table files in a bucket, for the catalogs other engines read through.

An Iceberg client reading a table in a bucket asks the catalog to sign each S3 request (remote
signing); a Delta Sharing query answers presigned URLs. Either way the server's own credentials
never leave it, and a URL is signed only for a read (GET, HEAD) of one object under the location of
a table the caller may read: a table of a namespace it may read (not a chunk's file before its commit,
nor a file being written), or, through one of that namespace's links, exactly the files the link's
Iceberg metadata lists (what the link shows; never the rest of its source). Listings, writes and
deletes are never signed.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from ingest.api.auth import Principal
from ingest.api.catalog_views import iceberg_view
from ingest.api.errors import ApiError
from ingest.api.state import ApiState
from metastore import storage
from metastore.delta.layout import STAGING_DIR
from metastore.iceberg import listed_files
from metastore.links import Link, Resolved
from metastore.models import Permission, Table


@dataclass(frozen=True)
class Readers:
    """Who may read the files of one table: the namespace it lives in, whole; each link to it, what
    the link admits (its partitions' files, and the link's own Iceberg metadata)."""

    table: Table
    links: tuple[Link, ...]


def readers_by_location(st: ApiState) -> dict[str, Readers]:
    """Each table's location → who may read its files (remembered a few seconds: ``st.readers``)."""

    def load() -> dict[str, Readers]:
        tables = {t.location.rstrip("/"): t for t in st.catalog.list_tables().merged()}
        links: dict[str, list[Link]] = {}
        for link in st.catalog.router.fan_out(lambda store: store.list_links()).merged():
            if not st.catalog.links.is_dangling(link):
                source = st.catalog.links.source(link)
                links.setdefault(source.location.rstrip("/"), []).append(link)
        return {where: Readers(t, tuple(links.get(where, ()))) for where, t in tables.items()}

    return st.readers.get("all", load)


def object_url(uri: str) -> str:
    """The ``s3://bucket/key`` an S3 request's URL names (path style at the settings' endpoint, or a
    virtual host); ValueError if it names no object of the store this server uses."""
    parsed = urllib.parse.urlsplit(uri)
    options = storage.current()
    path = urllib.parse.unquote(parsed.path).lstrip("/")
    host = parsed.netloc.lower()
    endpoint = urllib.parse.urlsplit(options.endpoint).netloc.lower() if options.endpoint else None
    if (endpoint is not None and host == endpoint) or (endpoint is None and host.startswith(("s3.", "s3-"))):
        bucket, _, key = path.partition("/")
    elif endpoint is None and ".s3" in host and host.endswith(".amazonaws.com"):
        bucket, key = host.split(".s3", 1)[0], path
    else:
        raise ValueError(f"{uri} is not an object of this server's store")
    if not bucket or not key or any(part in ("", ".", "..") for part in key.split("/")):
        raise ValueError(f"{uri} names no object (or a path with '.', '..' or an empty part)")
    if any(ord(c) < 32 or c == "\x7f" for c in key):
        raise ValueError(f"{uri} names a key with a control character")
    return f"s3://{bucket}/{key}"


def sign_read(st: ApiState, who: Principal, method: str, uri: str) -> str:
    """A presigned URL for ``method`` on the object of ``uri``, once ``who`` may read it; 403 otherwise
    (naming what is refused, never whether the object or its table exists)."""
    method = method.upper()
    if method not in ("GET", "HEAD"):
        raise ApiError(
            403, "ForbiddenException", f"only reads are signed here, not {method or 'nothing'}", "method"
        )
    try:
        url = object_url(uri)
    except ValueError as exc:
        raise ApiError(403, "ForbiddenException", str(exc), "uri") from None
    if not may_read(st, who, url):
        raise ApiError(403, "ForbiddenException", f"token {who.name!r} may not read {url}", "uri")
    return storage.presign(url, method, st.server.presign_ttl)


def may_read(st: ApiState, who: Principal, url: str) -> bool:
    """Whether ``url`` is a file ``who`` may read: under the location of a table of a namespace it may
    read (but no chunk file not yet committed, nor a file being written), or a file the Iceberg
    metadata of a link of such a namespace lists (or that metadata itself)."""
    for location, readers in readers_by_location(st).items():
        if not url.startswith(location + "/"):
            continue
        relative = url[len(location) + 1 :]
        parts = relative.split("/")
        if any(p.startswith(".") for p in parts) or (parts[0] == STAGING_DIR and len(parts) == 2):
            return False  # being written, or staged by a chunk not committed (yet, or ever)
        if who.allows(Permission.READ, readers.table.name.namespace):
            return True
        for link in readers.links:
            if who.allows(Permission.READ, link.name.namespace) and _listed(link, readers.table, url):
                return True
    return False


def _listed(link: Link, source: Table, url: str) -> bool:
    """Whether ``url`` is the link's own Iceberg metadata, or a file that metadata lists."""
    view = iceberg_view(Resolved(link.name, source, link))
    if url.startswith(view.directory + "/"):
        return True
    return url in listed_files(view.directory)
