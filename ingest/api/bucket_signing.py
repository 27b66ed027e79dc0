"""Signing reads of table files in a bucket, for the catalogs other engines read through.

An Iceberg client reading a table in a bucket asks the catalog to sign each S3 request (remote
signing); a Delta Sharing query answers presigned URLs. Either way the server's own credentials
never leave it, and a URL is signed only for a read (GET, HEAD) of one object under the location of
a table the caller may read — its own namespace's table, or the source of one of its namespace's
links. Listings, writes and deletes are never signed.
"""

from __future__ import annotations

import urllib.parse

from ingest.api.auth import Principal
from ingest.api.errors import ApiError
from ingest.api.state import ApiState
from metastore import storage
from metastore.models import Permission


def readers_by_location(st: ApiState) -> dict[str, set[str]]:
    """Each table's location → the namespaces whose tokens may read its files (its own, and those of
    the links to it)."""

    def load() -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for t in st.catalog.list_tables().merged():
            out.setdefault(t.location.rstrip("/"), set()).add(t.name.namespace)
        for link in st.catalog.router.fan_out(lambda store: store.list_links()).merged():
            if st.catalog.links.is_dangling(link):
                continue
            source = st.catalog.links.source(link)
            out.setdefault(source.location.rstrip("/"), set()).add(link.name.namespace)
        return out

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
    """Whether ``url`` is under the location of a table ``who`` may read (itself, or through a link)."""
    for location, namespaces in readers_by_location(st).items():
        if url.startswith(location + "/") and any(who.allows(Permission.READ, ns) for ns in namespaces):
            return True
    return False
