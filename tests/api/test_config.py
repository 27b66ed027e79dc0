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


# Values that were accepted and then broke every write (issue 14, item 11).
@pytest.mark.parametrize(
    "variable, value, field",
    [("STREAMPART_CHUNK__TTL", "-PT5S", "chunk.ttl"),
     ("STREAMPART_CHUNK__COMMIT_TIMEOUT", "PT0S", "chunk.commit_timeout"),
     ("STREAMPART_CHUNK__MAX_ROWS", "0", "chunk.max_rows"), ("STREAMPART_ROLL__LEASE", "PT0S", "roll.lease")],
)  # fmt: skip
def test_durations_and_limits_that_cannot_work_are_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str
) -> None:
    monkeypatch.delenv("STREAMPART_CONFIG", raising=False)
    monkeypatch.setenv(variable, value)
    with pytest.raises(UserInputError, match=f"{field}: (Input should be greater than|.* is negative)"):
        load_settings()


def test_an_unknown_streampart_variable_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMPART_CONFIG", raising=False)
    monkeypatch.setenv("STREAMPART_SPARK__CONF__spark.executor.cores", "2")  # a key of a mapping: fine
    monkeypatch.setenv("STREAMPART_SCHEDULER__HOUSEKEEPING__RETENTION", "3d")  # nested: fine
    assert load_settings().spark.conf == {"spark.executor.cores": "2"}
    monkeypatch.setenv("STREAMPART_CHUNK__TTLL", "5s")  # a typo of STREAMPART_CHUNK__TTL
    with pytest.raises(UserInputError) as refused:
        load_settings()
    assert str(refused.value) == (
        "invalid configuration: unknown environment variable STREAMPART_CHUNK__TTLL "
        "(did you mean STREAMPART_CHUNK__TTL?)"
    )
