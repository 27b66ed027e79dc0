"""Configuration of the HTTP API server (``streampart serve``)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, IPvAnyNetwork, model_validator

from metastore.durations import Duration

log = logging.getLogger("streampart.config")

# Settings that once were and now do nothing: given, each is dropped with a warning saying why, so
# a configuration written for them keeps working (any other unknown key is an error).
RETIRED = {
    "login_max_failures": "failed logins are no longer locked out, only slowed down (login_delay)",
    "login_lockout": "failed logins are no longer locked out, only slowed down (login_delay)",
}


class ServerConfig(BaseModel):
    """The HTTP chunk API (``[server]`` in conf/streampart.toml, ``STREAMPART_SERVER__*``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _drop_retired(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not RETIRED.keys() & data.keys():
            return data
        for key in sorted(RETIRED.keys() & data.keys()):
            log.warning("server.%s is ignored: %s; remove it from the configuration", key, RETIRED[key])
        return {k: v for k, v in data.items() if k not in RETIRED}

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
    # Why 15 min: a reader fetches a file soon after it is given its URL (a Delta Sharing query, an
    # Iceberg client's signed request); a longer life only lengthens what a leaked URL is good for.
    # A revoked token's local-file URLs stop at once (checked on each fetch); a bucket's presigned
    # URLs cannot be recalled, so this bounds how long one outlives its token.
    presign_ttl: Duration = Field(
        timedelta(minutes=15),
        gt=timedelta(0),
        le=timedelta(days=7),  # the longest an S3 presigned URL may live
        description="How long a file URL the catalogs hand out (Delta Sharing file URLs, Iceberg's signed "
        "bucket requests) stays valid.",
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
    # Why 1 s doubling to 10 s within a minute: a person who mistypes a token, or a client with a
    # revoked one, fails a few times and waits a second or two each; a script trying tokens one
    # after another gets one answer per 10 s. Nothing is locked out: a lockout lets anyone who knows
    # the key it counts by (a name, a shared address) lock its owner out, and guards nothing (a token
    # has 256 random bits). Why 32 waiting: a waiting answer holds a thread on the SQL server and the
    # status page (a connection on the HTTP API); 32 of them leave the servers' threads to the rest.
    login_delay: Duration = Field(
        timedelta(seconds=1),
        ge=timedelta(0),
        description="How long the answer to a failed login (an unknown or revoked token, a wrong "
        "password) waits, doubled for each earlier failure from the same client within login_window, "
        "up to login_delay_max. A correct token is never delayed or refused, whatever failed before. "
        "Each failed login is logged once (login.failed) with the client's address. 0: no delay. "
        "Replaces login_max_failures and login_lockout (no lockout any more: still accepted, "
        "ignored with a warning).",
    )
    login_delay_max: Duration = Field(
        timedelta(seconds=10),
        ge=timedelta(0),
        description="The longest a failed login's answer waits (see login_delay).",
    )
    login_window: Duration = Field(
        timedelta(minutes=1),
        gt=timedelta(0),
        description="How long a failed login makes the same client's next failed logins wait longer.",
    )
    login_max_delayed: int = Field(
        32,
        ge=0,
        description="How many answers to failed logins may wait at once in one server process; a failed "
        "login past that is answered at once (logged as not slowed), so slowing never holds more.",
    )
    # Why none by default: a forwarded header is only what the client wrote, unless a proxy of ours
    # wrote it; trusting one from any peer (uvicorn trusts 127.0.0.1's) lets anyone on the host pick
    # the address its failed logins count against: unlimited tries, or another address locked out.
    trusted_proxies: tuple[IPvAnyNetwork, ...] = Field(
        (),
        max_length=1000,
        description="Addresses or networks (10.0.0.5, 10.0.0.0/24, ::1) of the reverse proxies in front "
        "of the server: only a request whose peer is one of them has its X-Forwarded-For (the client "
        "the proxy saw: the nearest address not itself a listed proxy) and X-Forwarded-Proto believed. "
        "Empty: none, every request's address is its peer's (behind a proxy, the proxy's). In the "
        'environment a JSON list: \'["10.0.0.5", "10.1.0.0/16"]\'.',
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
