"""The [server] settings: defaults, conf/streampart.toml, environment, and a bad value named."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from metastore.errors import UserInputError
from streampart.config import load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_documented_defaults_and_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMPART_CONFIG", str(ROOT / "conf" / "streampart.toml"))
    documented = load_settings().server
    monkeypatch.delenv("STREAMPART_CONFIG")
    assert documented == load_settings().server  # the file lists the defaults
    monkeypatch.setenv("STREAMPART_SERVER__PORT", "9000")
    monkeypatch.setenv("STREAMPART_SERVER__AUTH_CACHE_TTL", "1m")
    server = load_settings().server
    assert (server.port, server.auth_cache_ttl) == (9000, timedelta(minutes=1))


@pytest.mark.parametrize(
    "key, value, field",
    [("PORT", "70000", "server.port"), ("MAX_UPLOAD_BYTES", "0", "server.max_upload_bytes"),
     ("LOG_FORMAT", "xml", "server.log_format")],
)  # fmt: skip
def test_a_bad_value_names_its_field(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str, field: str
) -> None:
    monkeypatch.delenv("STREAMPART_CONFIG", raising=False)
    monkeypatch.setenv(f"STREAMPART_SERVER__{key}", value)
    with pytest.raises(UserInputError, match=field):
        load_settings()
