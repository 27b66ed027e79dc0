"""A small Python client of the HTTP chunk API (``streampart serve``), with retries.

Every call of the API is idempotent, so the client retries any call whose answer it did not
get (connection refused or reset, timeouts) or that the server asks it to retry (409
``chunk_busy``, 429, 502-504, with Retry-After), with exponential backoff and jitter, for up to
``retry_for`` seconds (a call's whole budget, connecting included). The first failure of a call
that will be retried is told to ``on_retry`` (the CLI says on stderr what it retries and for how
long) before the client waits. :meth:`Client.write` runs the whole chunk protocol under an idempotency
key (a fresh one if none is given), so however often it retries, the chunk lands once::

    from ingest.client import Client

    with Client("http://127.0.0.1:8080", token="spt_…") as api:
        result = api.write("shop.orders", b'{"id": 1, "ts": "2026-11-21T10:00:00Z"}\\n')
        api.events("shop.orders", [{"headers": {}, "body": '{"id": 2, "ts": "2026-11-21T10:00:01Z"}'}])
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from ingest.api.media import FORMAT_MEDIA_TYPES
from ingest.digests import digest_pieces
from ingest.errors import ApiClientError, ApiRequestError, ApiUnavailableError

__all__ = ["ApiClientError", "ApiRequestError", "ApiUnavailableError", "Client", "Retrying"]

_RETRY_STATUS = {429, 502, 503, 504, 507}
# Why 150 s: a commit whose server died mid-way is taken over by a retry only after twice
# chunk.commit_timeout (60 s by default) has passed; retrying a little longer than that lets
# write() resolve such a chunk on its own.
DEFAULT_RETRY_FOR = 150.0
_READ_SIZE = 1 << 20

Body = bytes | Path | Callable[[], Iterator[bytes]]


@dataclass(frozen=True)
class Retrying:
    """A call failed and is retried: what ``on_retry`` is told, once per call, before the first wait."""

    method: str
    url: str
    problem: str  # why it failed: "ConnectError: [Errno 111] Connection refused", "HTTP 503: …"
    retry_for: float  # seconds the call retries at most, counted from its start
    backoff: float  # the first wait, in seconds; doubled after each attempt …
    max_backoff: float  # … up to this (each with ±50% jitter, or the server's Retry-After)


class Client:
    """The API at ``url`` with bearer ``token``. Thread-safe (one connection pool)."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 60.0,
        retry_for: float = DEFAULT_RETRY_FOR,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        on_retry: Callable[[Retrying], None] | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retry_for, self.backoff, self.max_backoff = retry_for, backoff, max_backoff
        self.on_retry = on_retry
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the calls --------------------------------------------------------------------------
    def open_chunk(
        self, table: str, idempotency_key: str | None = None, cluster: str | None = None
    ) -> dict[str, Any]:
        """Open a chunk of ``table`` (``ns.table``); the same key returns the same chunk.

        ``cluster``: the cluster meant to take the write; anything but the table's primary is
        refused (409 ``secondary_cluster``).
        """
        body: dict[str, str] = {"idempotency_key": idempotency_key} if idempotency_key else {}
        if cluster is not None:
            body["cluster"] = cluster
        return self._call("POST", f"{_table_path(table)}/chunks", json=body).json()

    def upload(
        self, chunk_id: str, data: Body, format: str = "jsonl", commit: bool = False
    ) -> dict[str, Any]:
        """Upload the chunk's data (bytes, a file streamed from disk, or a factory of byte pieces).

        ``commit``: commit it in the same request; the answer is then the commit's (as :meth:`commit`).
        """
        if format not in FORMAT_MEDIA_TYPES:
            raise ApiRequestError(f"format must be one of {', '.join(FORMAT_MEDIA_TYPES)}; got {format!r}")
        headers = {"Content-Type": FORMAT_MEDIA_TYPES[format]}
        params = {"commit": "true"} if commit else None
        return self._call(
            "PUT", _chunk_path(chunk_id, "/data"), body=data, headers=headers, params=params
        ).json()

    def commit(self, chunk_id: str, content_sha256: str | None = None) -> dict[str, Any]:
        """Commit the chunk; retried until it has landed (or is known not to).

        ``content_sha256`` (``sha256:<hex>`` of the data the caller uploaded, see
        :func:`content_digest`): a chunk holding other data answers 409 ``idempotency_conflict``.
        """
        body = {"content_sha256": content_sha256} if content_sha256 else None
        return self._call("POST", _chunk_path(chunk_id, "/commit"), json=body).json()

    def abort(self, chunk_id: str) -> dict[str, Any]:
        return self._call("DELETE", _chunk_path(chunk_id)).json()

    def chunk(self, chunk_id: str) -> dict[str, Any]:
        return self._call("GET", _chunk_path(chunk_id)).json()

    def events(
        self,
        table: str,
        events: list[Any],
        idempotency_key: str | None = None,
        format: str | None = None,
    ) -> dict[str, Any]:
        """Commit a batch of events (Flume's JSON events or records) as one chunk, exactly once."""
        key = idempotency_key or _fresh_key()
        params = {"format": format} if format else None
        return self._call(
            "POST", f"{_table_path(table)}/events", json=events, params=params,
            headers={"Idempotency-Key": key},
        ).json()  # fmt: skip

    def tables(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/tables").json()

    def table(self, table: str) -> dict[str, Any]:
        return self._call("GET", _table_path(table)).json()

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/healthz").json()

    def write(
        self,
        table: str,
        data: Body,
        format: str = "jsonl",
        idempotency_key: str | None = None,
        cluster: str | None = None,
    ) -> dict[str, Any]:
        """Open, upload and commit ``data`` as one chunk; exactly once under ``idempotency_key``.

        Returns the commit (the shape of ``streampart write --json``). Called again with the
        same key (after a crash, say), it finishes or returns that chunk, never writes twice;
        called with the same key and other data, it raises :class:`ApiRequestError` (409
        ``idempotency_conflict``) instead of answering with the earlier commit.
        """
        key = idempotency_key or _fresh_key()
        chunk = self.open_chunk(table, key, cluster)
        if chunk["state"] != "reserved":
            return self.commit(chunk["id"], content_digest(data))
        try:
            return self._upload_and_commit(chunk["id"], data, format)
        except KeyboardInterrupt as exc:  # Ctrl-C, or a SIGTERM the caller turned into one
            exc.args = (self._let_go(chunk["id"]),)
            raise

    def _let_go(self, chunk_id: str) -> str:
        """After an interrupt: abort the chunk unless its commit began; what became of it, in words.

        As :meth:`ingest.chunks.ChunkWriter._let_go` does in process, over the API: one DELETE,
        retried briefly (the user is waiting to get their terminal back).
        """
        patient, self.retry_for = self.retry_for, min(self.retry_for, 5.0)
        try:
            self.abort(chunk_id)
        except ApiRequestError as exc:
            if exc.code != "chunk_state":
                return f"chunk {chunk_id} was not committed; it is aborted when its reservation expires"
            return (
                f"chunk {chunk_id} was committing or committed: it lands whole or not at all "
                f"(`streampart chunk show {chunk_id}` says which)"
            )
        except Exception:
            return f"chunk {chunk_id} was not committed; it is aborted when its reservation expires"
        finally:
            self.retry_for = patient
        return f"nothing was committed (chunk {chunk_id} aborted)"

    def _upload_and_commit(self, chunk_id: str, data: Body, format: str) -> dict[str, Any]:
        for attempt in range(1, SCHEMA_RETRIES + 1):
            try:  # staged and committed in one request (the server checks the upload's own digest)
                answer = self.upload(chunk_id, data, format, commit=True)
                if "chunk" not in answer:  # a server older than ?commit=true only staged it
                    return self.commit(chunk_id, content_digest(data))
                return answer
            except ApiRequestError as exc:
                if exc.code == "chunk_state":
                    # an earlier attempt (whose answer was lost) committed it already: the commit
                    # says (and refuses it if it holds other data)
                    return self.commit(chunk_id, content_digest(data))
                # staged before another writer added one of its new fields as another type (schema
                # evolution): the chunk was released, nothing of it committed; upload it again, to
                # be parsed as the table is now
                if exc.code != "schema_conflict" or attempt == SCHEMA_RETRIES:
                    raise
        raise AssertionError("unreachable")

    # -- transport --------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Body | None = None, **kw: Any) -> httpx.Response:
        started = time.monotonic()
        deadline = started + self.retry_for
        attempt = 0
        while True:
            attempt += 1
            # connecting never outlasts the budget (a host that drops packets would hold a connect
            # for the whole timeout); an answer being computed (a long commit) gets the full timeout
            connect = min(self.timeout, max(deadline - time.monotonic(), 0.5))
            timeout = httpx.Timeout(self.timeout, connect=connect)
            try:
                response = self._http.request(method, path, content=_content(body), timeout=timeout, **kw)
            except httpx.TransportError as exc:
                problem: str = f"{type(exc).__name__}: {exc}"
                wait = None
            else:
                if response.status_code < 400:
                    return response
                error = _error(response)
                if not (response.status_code in _RETRY_STATUS or error.code == "chunk_busy"):
                    raise error
                problem, wait = str(error), _retry_after(response)
            delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) * (0.5 + random.random())
            delay = max(delay, wait or 0)
            if time.monotonic() + delay > deadline:
                tried = (
                    f"no success in {time.monotonic() - started:.1f} s ({attempt} attempts, retrying for "
                    f"up to {self.retry_for:g} s)"
                    if attempt > 1
                    else f"failed, not retried (retrying for up to {self.retry_for:g} s)"
                )
                raise ApiUnavailableError(f"{method} {self.url}{path}: {tried}: {problem}") from None
            if attempt == 1 and self.on_retry is not None:
                self.on_retry(
                    Retrying(method, self.url + path, problem, self.retry_for, self.backoff, self.max_backoff)
                )
            time.sleep(delay)


# How many times write() uploads a chunk again after its commit answered schema_conflict.
SCHEMA_RETRIES = 3


def content_digest(data: Body) -> str:
    """``sha256:<hex>`` of the bytes ``data`` holds, as the server digests an upload."""
    return digest_pieces(_pieces(data))


def _table_path(table: str) -> str:
    namespace, sep, name = table.partition(".")
    if not sep:
        raise ApiRequestError(f"table name {table!r} must have the form NAMESPACE.TABLE", field="table")
    return f"/v1/tables/{quote(namespace, safe='')}/{quote(name, safe='')}"


def _chunk_path(chunk_id: str, rest: str = "") -> str:
    return f"/v1/chunks/{quote(chunk_id, safe='')}{rest}"


def _fresh_key() -> str:
    """An idempotency key for a call the caller gave none: retries of this call land once."""
    return f"client-{uuid.uuid4()}"


def _content(body: Body | None) -> Any:
    if body is None or isinstance(body, bytes):
        return body  # bytes as they are: sent with a Content-Length
    return _pieces(body)  # a fresh iterator for every attempt


def _pieces(data: Body) -> Iterable[bytes]:
    """The bytes ``data`` holds, piece by piece: a file is read afresh, a factory called afresh."""
    if isinstance(data, bytes):
        return [data]
    return _read(data) if isinstance(data, Path) else data()


def _read(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while piece := f.read(_READ_SIZE):
            yield piece


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers.get("retry-after", ""))
    except ValueError:
        return None


def _error(response: httpx.Response) -> ApiClientError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = body.get("message") or response.text[:500] or response.reason_phrase
    field = body.get("field")
    text = f"HTTP {response.status_code}: {message}" + (f" (field: {field})" if field else "")
    cls = ApiRequestError if response.status_code < 500 else ApiUnavailableError
    return cls(text, response.status_code, body.get("error"), field, body.get("line"))
