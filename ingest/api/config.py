"""Configuration of the HTTP API server (``streampart serve``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from metastore.durations import Duration


class ServerConfig(BaseModel):
    """The HTTP chunk API (``[server]`` in conf/streampart.toml, ``STREAMPART_SERVER__*``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field("127.0.0.1", description="Address to listen on (0.0.0.0: every interface).")
    port: int = Field(
        8080, ge=0, le=65535, description="Port to listen on (0: a free port, logged at start)."
    )
    # Why 1: one process serves a modest load and keeps the simplest picture (one commit group per
    # table, one cache); more use more cores: each worker is a whole server (its own commit groups,
    # caches and metastore connections) on the one port.
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Server processes sharing the port (streampart serve --workers); /metrics adds up "
        "their counts.",
    )
    # Why 256 MiB: an upload is spooled to the table's staging area, not held in memory, but
    # CSV and Parquet uploads are parsed whole (JSON lines in batches of upload_batch_rows), so
    # the limit bounds the server's memory per concurrent upload. Larger data: more chunks.
    max_upload_bytes: int = Field(
        256 * 1024 * 1024, ge=1, description="Largest chunk upload (PUT /v1/chunks/{id}/data); larger: 413."
    )
    # Why 16 MiB: an events batch is one JSON document parsed in memory (Python objects take
    # several times its size); Flume's HTTP sink sends batches of a few hundred events.
    max_events_bytes: int = Field(
        16 * 1024 * 1024, ge=1, description="Largest events batch (POST …/events); larger: 413."
    )
    upload_batch_rows: int = Field(
        100_000,
        ge=1,
        description="JSON-lines uploads are parsed and staged this many lines at a time (one staged file "
        "each), which bounds the memory one upload takes.",
    )
    # Why 5 s: every request authenticates; a metastore round trip per request would double the
    # metastore's load. A revoked token keeps working for at most this long on each server.
    auth_cache_ttl: Duration = Field(
        timedelta(seconds=5),
        description="How long a server remembers a token lookup (a revocation takes effect within this).",
    )
    # Why 1 s: a commit names its table, and reading it on every request was two of a commit's
    # metastore round trips; remembered for 1 s, a busy server reads each table about once a
    # second. A table dropped, re-created or changed by another process is seen within this (or
    # at once by a request that fails on the stale entry); a namespace move or route change as
    # soon as the route table's version changes (see ingest.api.lookups).
    table_cache_ttl: Duration = Field(
        timedelta(seconds=1),
        description="How long a server remembers a table looked up by name (0: look it up on every request).",
    )
    # Why 10 a minute, then a minute: a person who mistypes a token, or a client with a revoked one,
    # fails a few times; a guesser needs billions of tries (a token has 256 random bits), so 10 a
    # minute per address stops nothing legitimate and makes the log say who is trying.
    login_max_failures: int = Field(
        10,
        ge=0,
        description="Failed logins (an unknown or revoked token) one client address may make within "
        "login_window before it is locked out for login_lockout: its requests then answer 429 with "
        "Retry-After. Each failed login is logged with the address. 0: never locked out.",
    )
    login_window: Duration = Field(
        timedelta(minutes=1),
        gt=timedelta(0),
        description="The window in which login_max_failures failed logins lock an address out.",
    )
    login_lockout: Duration = Field(
        timedelta(minutes=1),
        gt=timedelta(0),
        description="How long an address that failed login_max_failures logins is refused (429).",
    )
    docs: bool = Field(
        True, description="Serve interactive API docs at /docs (the OpenAPI JSON is always served)."
    )
    metrics_require_token: bool = Field(
        False,
        description="Serve /metrics only to a valid bearer token (its series name tables and count rows); "
        "off: open to anyone who can reach the port, as Prometheus endpoints usually are.",
    )
    # Why 10 s: a client sends a request's headers in one packet or a few; one that trickles them
    # (slowloris) would otherwise hold a connection, and a worker's slot, for ever.
    header_timeout: Duration = Field(
        timedelta(seconds=10),
        gt=timedelta(0),
        description="A connection that has not sent a whole request head this long after it opened "
        "(or after its previous response) is closed.",
    )
    access_log: bool = Field(False, description="Log every request (uvicorn's access log).")
    log_format: Literal["json", "text"] = Field(
        "json", description="json: one JSON object per line (structured); text: for humans."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
