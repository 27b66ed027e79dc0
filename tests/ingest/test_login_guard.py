"""Failed logins per client address (ingest/login_guard.py): counted in a window, locked out, logged
without the secret. The HTTP API's use of it: tests/api/test_auth_and_errors.py."""

from __future__ import annotations

import logging

import pytest

from ingest import login_guard
from ingest.login_guard import LoginGuard, LoginLockedError, credential_hint


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_address_is_locked_out_after_max_failures_in_the_window_and_only_it() -> None:
    clock = Clock()
    guard = LoginGuard(3, window_s=60, lockout_s=30, service="test", clock=clock)
    assert guard.failed("10.0.0.1", "a") is None
    clock.now += 59
    assert guard.failed("10.0.0.1", "b") is None
    guard.check("10.0.0.2")  # another address is not affected
    assert guard.failed("10.0.0.1", "c") == 30  # the third within 60 s
    with pytest.raises(LoginLockedError, match=r"from 10\.0\.0\.1: try again in 30 s") as e:
        guard.check("10.0.0.1")
    assert e.value.retry_after_header == "30"
    guard.check("10.0.0.2")
    clock.now += 29.5
    assert guard.locked_for("10.0.0.1") == pytest.approx(0.5)
    clock.now += 0.5
    guard.check("10.0.0.1")  # the lockout is over, and its failures were forgotten with it
    assert guard.failed("10.0.0.1", "d") is None and guard.failed("10.0.0.1", "e") is None


def test_failures_older_than_the_window_do_not_count_and_zero_never_locks() -> None:
    clock = Clock()
    guard = LoginGuard(2, window_s=10, lockout_s=5, clock=clock)
    for _ in range(5):
        assert guard.failed("h", "x") is None
        clock.now += 10  # each one leaves the window before the next
    never = LoginGuard(0, clock=clock)
    assert all(never.failed("h", "x") is None for _ in range(100))
    never.check("h")


def test_a_failed_login_is_logged_with_the_address_and_a_hint_never_the_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "spt_" + "S3cr3tT0k3n" * 4
    guard = LoginGuard(2, window_s=60, lockout_s=60, service="HTTP API", clock=Clock())
    with caplog.at_level(logging.WARNING, logger="streampart.auth"):
        guard.failed("192.0.2.7", credential_hint(secret))
        guard.failed("192.0.2.7", "analyst")  # the SQL server names the user tried
    failed = [r for r in caplog.records if getattr(r, "event", None) == "login.failed"]
    locked = [r for r in caplog.records if getattr(r, "event", None) == "login.locked"]
    assert [(r.client, r.service, r.failures) for r in failed] == [  # type: ignore[attr-defined]
        ("192.0.2.7", "HTTP API", 1),
        ("192.0.2.7", "HTTP API", 2),
    ]
    assert failed[0].tried == "spt_S3cr… (48 characters)" and failed[1].tried == "analyst"  # type: ignore[attr-defined]
    assert "192.0.2.7" in failed[0].getMessage() and len(locked) == 1
    assert secret not in caplog.text and secret[:12] not in caplog.text
    assert credential_hint("short") == "(5 characters)"  # a short one: nothing of it


def test_the_addresses_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(login_guard, "MAX_CLIENTS", 100)
    clock = Clock()
    guard = LoginGuard(5, window_s=60, lockout_s=60, clock=clock)
    logging.getLogger("streampart.auth").disabled = True
    try:
        for i in range(1000):
            guard.failed(f"10.0.{i // 256}.{i % 256}", "x")
        assert len(guard._clients) <= 100
        clock.now += 61  # all stale: forgotten at the next failure
        guard.failed("10.9.9.9", "x")
        assert list(guard._clients) == ["10.9.9.9"]
    finally:
        logging.getLogger("streampart.auth").disabled = False
