"""The file URLs a Delta Sharing query answers with: signed by this server, or presigned by the bucket.

A table in a bucket: a presigned GET of the object (:func:`metastore.storage.presign`), valid for
``server.presign_ttl``; it cannot be recalled, so that is how long it outlives a revoked token.

A table on a local (or mounted) disk: ``/delta-sharing/files/<ticket>.<signature>``, served by this
server. The ticket names the table's location, the file, when it expires and the token it was made
for; the signature is an HMAC-SHA256 under a secret every server of the metastore shares
(``sp_secrets``), so any server process answers it, and nobody without the secret can make one
naming another file. A fetch checks the signature, the expiry, that the token is still live (revoked
or expired: refused at once), that the share still holds the table or link it was read through and the
token may still read it there, and that the path stays inside the table.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass

from ingest.api.errors import ApiError
from ingest.api.state import ApiState
from metastore import clock, storage
from metastore.models import ApiToken

SECRET = "url-signing"
ROUTE = "/delta-sharing/files"


@dataclass(frozen=True)
class Ticket:
    location: str  # the table's
    path: str  # the file's, relative to it
    expires: int  # epoch seconds
    token: int | None  # the id of the token it was made for (None: a server without auth)
    share: str  # the share and the table (or link) it was read through, as ``namespace.name``
    name: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _key(st: ApiState) -> bytes:
    """The signing key: read from the metastore once per process (a secret never changes)."""
    return st.secrets.get(SECRET, lambda: st.catalog.primary.secret(SECRET)).encode()


def file_url(
    st: ApiState, base_url: str, token: int | None, through: tuple[str, str], location: str, path: str
) -> tuple[str, int]:
    """A URL to read ``path`` of the table at ``location`` — read through the share and table or link
    ``through`` — and when it expires (epoch milliseconds)."""
    ttl = st.server.presign_ttl
    expires = int(time.time() + ttl.total_seconds())
    if storage.is_remote(location):
        return storage.presign(storage.join(location, path), "GET", ttl), expires * 1000
    share, name = through
    fields = {"l": location, "p": path, "e": expires, "k": token, "s": share, "n": name}
    ticket = _b64(json.dumps(fields).encode())
    signature = _b64(hmac.new(_key(st), ticket.encode(), hashlib.sha256).digest())
    return f"{base_url.rstrip('/')}{ROUTE}/{ticket}.{signature}", expires * 1000


def check_ticket(st: ApiState, signed: str) -> tuple[Ticket, ApiToken | None]:
    """The ticket of a file URL and its live token (None: made by a server without auth), once its
    signature, expiry and token hold; 403 otherwise (one message for every fault of the URL, so a
    forger learns nothing), 401 for its token revoked or expired."""
    refused = ApiError(
        403, "PERMISSION_DENIED", "this file URL is not valid (forged, damaged or expired)", "url"
    )
    ticket_text, _, signature = signed.partition(".")
    try:
        expected = _b64(hmac.new(_key(st), ticket_text.encode(), hashlib.sha256).digest())
        # compared as text: base64 leaves the last character's low bits spare, so decoding first
        # would take a changed URL as its original
        if not hmac.compare_digest(expected.encode(), signature.encode()):
            raise refused
        fields = json.loads(_unb64(ticket_text))
        ticket = Ticket(
            str(fields["l"]),
            str(fields["p"]),
            int(fields["e"]),
            fields["k"],
            str(fields["s"]),
            str(fields["n"]),
        )
    except (ValueError, KeyError, TypeError, RecursionError):
        raise refused from None
    if ticket.expires < time.time():
        raise refused
    token = None
    if ticket.token is not None:
        token = st.catalog.primary.find_token(int(ticket.token))
        if token is None or token.expired(clock.now()):
            raise ApiError(
                401, "UNAUTHENTICATED", "the token this URL was made for is revoked or expired", "url"
            )
    parts = ticket.path.split("/")
    if ticket.path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in ticket.path:
        raise refused
    return ticket, token
