"""Failed logins (ingest/login_guard.py): a correct token always gets in, each failure is logged once
and answered late — longer the more its client failed lately, capped, with a bound on the answers
waiting at once — and nothing is ever locked out. The clock and the waits are the tests' own: no
test sleeps. Through the real HTTP API: tests/api/test_auth_and_errors.py."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from ingest import login_guard
from ingest.api.auth import Authenticator, hash_token
from ingest.api.config import ServerConfig
from ingest.login_guard import LoginGuard, credential_hint
from metastore.models import ApiToken


class Clock:
    """Monotonic seconds that move only when a wait (``sleep``) or the test moves them."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


def _guard(clock: Clock, delay_s: float, max_delay_s: float, window_s: float = 60) -> LoginGuard:
    return LoginGuard(
        delay_s, max_delay_s, window_s, service="test", clock=clock, sleep=clock.sleep,
        async_sleep=clock.async_sleep,
    )  # fmt: skip


@pytest.fixture
def quiet() -> Iterator[None]:
    logging.getLogger("streampart.auth").disabled = True
    yield
    logging.getLogger("streampart.auth").disabled = False


def test_a_failed_answer_waits_longer_the_more_its_client_failed_lately_up_to_the_cap(quiet: None) -> None:
    clock = Clock()
    guard = _guard(clock, delay_s=1, max_delay_s=10, window_s=60)
    # 1, 2, 4, 8, then the cap: the clock moves by each wait, all inside the window
    assert [guard.failed("10.0.0.1", "x") for _ in range(6)] == [1, 2, 4, 8, 10, 10]
    assert guard.failed("10.0.0.2", "x") == 1  # another client: its own count
    clock.now += 61  # the first client's failures have left the window
    assert guard.failed("10.0.0.1", "x") == 1
    assert guard.delayed == 0  # every waiting place was given back
    no_delay = _guard(clock, delay_s=0, max_delay_s=10)
    assert [no_delay.failed("h", "x") for _ in range(5)] == [0] * 5  # 0: answered at once


def test_a_correct_token_gets_in_at_once_whatever_failed_before_from_its_address(quiet: None) -> None:
    """Nothing is checked before the credential: the old lockout refused a correct token too."""
    good = "spt_" + "G" * 43
    token = ApiToken(
        id=1, name="reader", token_hash=hash_token(good), scopes=(), created_at=datetime.now(UTC)
    )

    @dataclass
    class Store:
        lookups: list[str] = field(default_factory=list)

        def find_token_by_hash(self, digest: str) -> ApiToken | None:
            self.lookups.append(digest)
            return token if digest == token.token_hash else None

    clock = Clock()
    guard = _guard(clock, delay_s=1, max_delay_s=10)
    auth = Authenticator(Store(), 0, guard)  # type: ignore[arg-type]

    async def attempts() -> tuple[list[ApiToken | None], ApiToken | None]:
        wrong = [await auth.login(f"spt_{i:043d}", "10.0.0.1") for i in range(50)]
        return wrong, await auth.login(good, "10.0.0.1")

    wrong, right = asyncio.run(attempts())
    assert wrong == [None] * 50 and right == token
    waited = len(clock.waits)
    assert waited == 50 and clock.waits[-1] == 10  # each failure waited, the last ones the cap
    assert asyncio.run(auth.login(good, "10.0.0.1")) == token and len(clock.waits) == waited  # no wait


def test_each_failure_is_logged_once_with_the_address_user_and_a_hint_never_the_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "spt_" + "S3cr3tT0k3n" * 4
    clock = Clock()
    guard = LoginGuard(1, 10, 60, service="HTTP API", clock=clock, sleep=clock.sleep)
    with caplog.at_level(logging.WARNING, logger="streampart.auth"):
        guard.failed("192.0.2.7", credential_hint(secret))
        guard.failed("192.0.2.7", credential_hint("wrong"), user="analyst")  # the SQL server's user
    records = [r for r in caplog.records if r.name == "streampart.auth"]
    assert [getattr(r, "event", None) for r in records] == ["login.failed", "login.failed"]  # once each
    fields = [(r.client, r.service, r.user, r.failures, r.delay_s, r.slowed) for r in records]  # type: ignore[attr-defined]
    assert fields == [
        ("192.0.2.7", "HTTP API", None, 1, 1, True),
        ("192.0.2.7", "HTTP API", "analyst", 2, 2, True),
    ]
    assert records[0].tried == "spt_S3cr… (48 characters)" and records[1].tried == "(5 characters)"  # type: ignore[attr-defined]
    assert "192.0.2.7" in records[0].getMessage() and "'analyst'" in records[1].getMessage()
    assert secret not in caplog.text and secret[:12] not in caplog.text
    assert "locked" not in caplog.text


def test_answers_waiting_at_once_are_bounded_and_a_failure_past_the_bound_is_answered_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A waiting answer holds a thread on the SQL server: slowing must never hold them all."""
    release = threading.Event()
    entered = threading.Semaphore(0)

    def held(seconds: float) -> None:  # a wait that lasts until the test lets it go (no real delay)
        entered.release()
        assert release.wait(10)

    guard = LoginGuard(1, 10, 60, 2, service="test", sleep=held)
    waiting = [threading.Thread(target=guard.failed, args=(f"10.0.0.{i}", "x")) for i in range(2)]
    for thread in waiting:
        thread.start()
    for _ in waiting:
        assert entered.acquire(timeout=10)
    try:
        assert guard.delayed == 2
        with caplog.at_level(logging.WARNING, logger="streampart.auth"):
            assert guard.failed("10.0.0.9", "x") == 0  # past the bound: at once, and said so
        (record,) = [r for r in caplog.records if getattr(r, "client", None) == "10.0.0.9"]
        assert (record.delay_s, record.slowed) == (0, False)  # type: ignore[attr-defined]
        assert "answered at once (2 answers waiting already)" in record.getMessage()
    finally:
        release.set()
        for thread in waiting:
            thread.join(10)
    assert guard.delayed == 0  # places given back: the next failure waits again
    assert LoginGuard(1, 10, 60, 2, service="test", sleep=lambda s: None).failed("10.0.0.9", "x") == 1


def test_an_async_wait_gives_its_place_back_when_cancelled(quiet: None) -> None:
    """A client that hangs up while its answer waits (the HTTP API cancels the request)."""

    async def scenario() -> int:
        guard = LoginGuard(1, 10, 60, 4, service="test")  # asyncio.sleep: cancelled before it ends
        waiting = asyncio.create_task(guard.failed_async("10.0.0.1", "x"))
        await asyncio.sleep(0)
        assert guard.delayed == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return guard.delayed

    assert asyncio.run(scenario()) == 0


def test_the_clients_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch, quiet: None) -> None:
    monkeypatch.setattr(login_guard, "MAX_CLIENTS", 100)
    clock = Clock()
    guard = LoginGuard(0, 0, 60, clock=clock)
    for i in range(1000):
        guard.failed(f"10.0.{i // 256}.{i % 256}", "x")
    assert len(guard._clients) <= 100
    clock.now += 61  # all stale: forgotten at the next failure
    guard.failed("10.9.9.9", "x")
    assert list(guard._clients) == ["10.9.9.9"]


def test_the_settings_make_the_guard_and_the_lockout_settings_are_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = LoginGuard.of(ServerConfig.model_validate({"login_delay": "250ms", "login_max_delayed": 3}))
    assert (guard.delay_s, guard.max_delay_s, guard.window_s, guard.max_delayed) == (0.25, 10, 60, 3)
    with caplog.at_level(logging.WARNING, logger="streampart.config"):
        old = ServerConfig.model_validate(
            {"login_max_failures": 10, "login_lockout": "1m", "login_window": "2m"}
        )
    assert old.login_window.total_seconds() == 120
    assert [r.getMessage() for r in caplog.records] == [
        "server.login_lockout is ignored: failed logins are no longer locked out, only slowed down "
        "(login_delay); remove it from the configuration",
        "server.login_max_failures is ignored: failed logins are no longer locked out, only slowed down "
        "(login_delay); remove it from the configuration",
    ]
    with pytest.raises(ValueError, match="login_delay_maxx"):  # any other unknown key is still an error
        ServerConfig.model_validate({"login_delay_maxx": "1s"})
