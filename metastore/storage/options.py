"""How this process reaches S3-compatible stores: endpoint, region and credentials.

Resolved once per process, highest first: what the settings' ``[storage]`` section gives
(:func:`configure`, called by the settings loader), the standard AWS environment variables
(``AWS_ENDPOINT_URL`` or ``AWS_ENDPOINT_URL_S3``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_REGION`` or ``AWS_DEFAULT_REGION``), then the AWS config files of the
profile ``AWS_PROFILE`` names (``~/.aws/credentials`` and ``~/.aws/config``, or the files
``AWS_SHARED_CREDENTIALS_FILE`` and ``AWS_CONFIG_FILE`` name). Secrets never appear in a repr, a
log line or an error message; they reach child processes (a Spark task, say) only by pickle,
never on a command line.
"""

from __future__ import annotations

import configparser
import os
import threading
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from pathlib import Path

# Why 4 retries and 20 s: a 5xx, a dropped connection or a timeout is retried with exponential
# backoff (obstore's, from 100 ms) — enough to ride out a store's restart or a brief network
# fault — while an endpoint that does not answer at all is reported within a commit's patience,
# not after the client library's default of 3 minutes.
DEFAULT_RETRIES = 4
DEFAULT_RETRY_TIMEOUT = timedelta(seconds=20)
DEFAULT_CONNECT_TIMEOUT = timedelta(seconds=5)
# A request (an upload of a compacted file included) that takes longer has stalled.
DEFAULT_REQUEST_TIMEOUT = timedelta(seconds=120)
# AWS' own default region: what a store that ignores regions (MinIO, moto) is signed for.
DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class S3Options:
    """Endpoint, region and credentials of S3-compatible stores (secrets kept out of ``repr``)."""

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    retries: int = DEFAULT_RETRIES
    retry_timeout: timedelta = DEFAULT_RETRY_TIMEOUT
    connect_timeout: timedelta = DEFAULT_CONNECT_TIMEOUT
    request_timeout: timedelta = DEFAULT_REQUEST_TIMEOUT

    def over(self, below: S3Options) -> S3Options:
        """These options, each unset one taken from ``below``."""
        unset = S3Options()
        return replace(
            self,
            **{
                f.name: getattr(below, f.name)
                for f in fields(self)
                if getattr(self, f.name) == getattr(unset, f.name)
            },
        )

    @property
    def allow_http(self) -> bool:
        """A plain-HTTP endpoint (a local test server, a MinIO without TLS) is used as given."""
        return bool(self.endpoint and self.endpoint.startswith("http://"))

    @property
    def signing_region(self) -> str:
        return self.region or DEFAULT_REGION

    def delta_options(self) -> dict[str, str]:
        """As delta-rs and polars take them (``storage_options``)."""
        out = {"AWS_REGION": self.signing_region}
        if self.endpoint:
            out["AWS_ENDPOINT_URL"] = self.endpoint
        if self.allow_http:
            out["AWS_ALLOW_HTTP"] = "true"
        if self.access_key_id:
            out["AWS_ACCESS_KEY_ID"] = self.access_key_id
        if self.secret_access_key:
            out["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key
        if self.session_token:
            out["AWS_SESSION_TOKEN"] = self.session_token
        return out

    def delta_client_options(self) -> dict[str, str]:
        """:meth:`delta_options` and the retries and timeouts, for delta-rs' own client (polars refuses
        these keys as text), so a store that does not serve is given up on as obstore's is."""
        return {
            **self.delta_options(),
            "max_retries": str(self.retries),
            "retry_timeout": f"{self.retry_timeout.total_seconds():g}s",
            "connect_timeout": f"{self.connect_timeout.total_seconds():g}s",
            "timeout": f"{self.request_timeout.total_seconds():g}s",
        }

    def where(self) -> str:
        """The endpoint, for an error message: never a secret."""
        return self.endpoint or f"AWS S3 ({self.signing_region})"


_configured = S3Options()
_lock = threading.Lock()


def configure(options: S3Options) -> None:
    """Set what the settings give (over the environment) for every store this process opens after."""
    global _configured
    with _lock:
        _configured = options


def current() -> S3Options:
    """The options in force: the configured ones over the environment over the AWS config files.

    Raises:
        UserInputError: the endpoint in force is not a URL the store's client takes, naming the
            setting it came from (checked here, before it reaches object_store, which panics).
    """
    with _lock:
        configured = _configured
    env, files = from_environment(), from_config_files()
    out = configured.over(env.over(files))
    if out.endpoint is not None:
        if configured.endpoint:
            setting = "storage.endpoint (STREAMPART_STORAGE__ENDPOINT)"
        elif env.endpoint:
            setting = "AWS_ENDPOINT_URL_S3" if os.environ.get("AWS_ENDPOINT_URL_S3") else "AWS_ENDPOINT_URL"
        else:
            setting = "endpoint_url in the AWS config file"
        check_endpoint(out.endpoint, setting)
    return out


def check_endpoint(endpoint: str, setting: str) -> None:
    """Refuse an endpoint that is not ``http(s)://HOST[:PORT][/PATH]`` (``127.0.0.1:9000``, as MinIO
    prints its address, lacks the scheme), naming ``setting``."""
    from urllib.parse import urlsplit

    from metastore.errors import UserInputError

    why = None
    try:
        parts = urlsplit(endpoint)
        port = parts.port  # a port that is not a number raises
    except ValueError as exc:
        why, parts, port = str(exc), None, None
    if why is None and parts is not None:
        if parts.scheme not in ("http", "https") or not parts.hostname:
            why = "not a URL with http:// or https://"
        elif any(c.isspace() for c in endpoint) or parts.query or parts.fragment:
            why = "not a plain URL"
        elif port == 0:
            why = "port 0"
    if why is not None:
        hint = endpoint if "://" not in endpoint else endpoint.split("://", 1)[1]
        raise UserInputError(
            f"{setting} {endpoint!r} is not the store's URL ({why}): write it as "
            f"http://{hint.strip()} (or https://… for TLS)"
        )


def from_environment(env: dict[str, str] | None = None) -> S3Options:
    e = os.environ if env is None else env
    return S3Options(
        endpoint=e.get("AWS_ENDPOINT_URL_S3") or e.get("AWS_ENDPOINT_URL") or None,
        region=e.get("AWS_REGION") or e.get("AWS_DEFAULT_REGION") or None,
        access_key_id=e.get("AWS_ACCESS_KEY_ID") or None,
        secret_access_key=e.get("AWS_SECRET_ACCESS_KEY") or None,
        session_token=e.get("AWS_SESSION_TOKEN") or None,
    )


def from_config_files(env: dict[str, str] | None = None) -> S3Options:
    """The profile's credentials, region and endpoint from the AWS config files (if any)."""
    e = os.environ if env is None else env
    home = Path.home() / ".aws"
    profile = e.get("AWS_PROFILE") or e.get("AWS_DEFAULT_PROFILE") or "default"
    credentials = _section(Path(e.get("AWS_SHARED_CREDENTIALS_FILE") or home / "credentials"), profile)
    config_name = profile if profile == "default" else f"profile {profile}"
    config = _section(Path(e.get("AWS_CONFIG_FILE") or home / "config"), config_name)
    return S3Options(
        endpoint=config.get("endpoint_url"),
        region=config.get("region"),
        access_key_id=credentials.get("aws_access_key_id") or config.get("aws_access_key_id"),
        secret_access_key=credentials.get("aws_secret_access_key") or config.get("aws_secret_access_key"),
        session_token=credentials.get("aws_session_token") or config.get("aws_session_token"),
    )


def _section(path: Path, name: str) -> dict[str, str]:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path)
    except (OSError, configparser.Error):
        return {}
    return dict(parser[name]) if parser.has_section(name) else {}
