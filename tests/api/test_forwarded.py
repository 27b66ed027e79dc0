"""Forwarded headers: believed only from the proxies ``server.trusted_proxies`` lists.

A real ``streampart serve`` on loopback: the tests' requests come from 127.0.0.1, a proxy when the
settings list it and an ordinary client when they do not (uvicorn's own default would believe it).
What a failed login is counted and logged against is the address that decides.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ingest.api.config import ServerConfig
from tests.api.fixtures import Server, auth
from tests.fixtures import make_table

WRONG = ["spt_WRONG" + c * 40 for c in "abcdefgh"]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Server]:
    """An unstarted server with table ``ns.events`` and a ``read:ns`` token at ``.admin``."""
    srv = Server(tmp_path / "wh", f"sqlite:///{tmp_path / 'wh' / '_metastore.sqlite'}", tmp_path)
    make_table(srv.catalog, "ns.events")
    srv.admin = srv.token("reader", "read:ns")
    try:
        yield srv
    finally:
        srv.close()


def _failed_logins(srv: Server) -> list[tuple[str, int]]:
    """Each failed login's client and its count of failures in the window (what its delay grows by)."""
    lines = [json.loads(line) for line in srv.log.read_text().splitlines() if line.startswith("{")]
    return [(e["client"], e["failures"]) for e in lines if e.get("event") == "login.failed"]


def _get(srv: Server, token: str, forwarded: str | None = None) -> httpx.Response:
    headers = auth(token) | ({"X-Forwarded-For": forwarded} if forwarded is not None else {})
    return httpx.get(f"{srv.url}/v1/tables/ns/events", headers=headers)


@pytest.mark.process
def test_forwarded_headers_from_an_unlisted_peer_change_nothing(serve: Server) -> None:
    """By default no proxy is trusted: a client on the server's host that rotates X-Forwarded-For
    neither resets the count its failed answers are slowed by nor charges another address. Every
    failure counts against its own address (127.0.0.1), the one it cannot forge, even with uvicorn
    told to trust everyone."""
    serve.start(
        STREAMPART_SERVER__LOGIN_DELAY="10ms",
        FORWARDED_ALLOW_IPS="*",  # uvicorn's own switch: the server does not read it
    )
    assert [_get(serve, t, f"203.0.113.{i}").status_code for i, t in enumerate(WRONG[:3])] == [401] * 3
    assert _failed_logins(serve) == [("127.0.0.1", 1), ("127.0.0.1", 2), ("127.0.0.1", 3)]
    assert _get(serve, serve.admin, "203.0.113.99").status_code == 200  # a correct token: never refused
    page = httpx.post(
        f"{serve.url}/ui/login", data={"token": WRONG[3]}, headers={"X-Forwarded-For": "203.0.113.98"}
    )  # the status page's login reads the same address
    assert page.status_code == 401 and _failed_logins(serve)[-1] == ("127.0.0.1", 4)
    assert "203.0.113" not in serve.log.read_text()


@pytest.mark.process
def test_forwarded_headers_from_a_listed_proxy_name_the_client(serve: Server) -> None:
    """With 127.0.0.0/8 listed, the client is the nearest X-Forwarded-For address that is not a listed
    proxy: failures count and are logged against it, so one client's slowing is not another's, and
    addresses a client prepends to the header do not move its count."""
    serve.start(
        STREAMPART_SERVER__LOGIN_DELAY="10ms",
        STREAMPART_SERVER__TRUSTED_PROXIES='["127.0.0.0/8", "10.9.0.0/16"]',
    )
    assert _get(serve, WRONG[0], "198.51.100.7").status_code == 401
    # prepended by the client, then the proxy's own entry (a listed one): still 198.51.100.7
    assert _get(serve, WRONG[1], "192.0.2.1, 198.51.100.7, 10.9.0.3").status_code == 401
    assert _get(serve, WRONG[2], "198.51.100.8").status_code == 401  # another client: its own count
    assert _failed_logins(serve) == [("198.51.100.7", 1), ("198.51.100.7", 2), ("198.51.100.8", 1)]
    assert _get(serve, serve.admin, "198.51.100.7").status_code == 200  # its correct token gets in
    assert _get(serve, serve.admin).status_code == 200  # the proxy itself (no header)


def test_trusted_proxies_are_addresses_or_networks_and_none_by_default() -> None:
    assert ServerConfig().trusted_proxies == ()
    listed = ServerConfig.model_validate({"trusted_proxies": ["10.0.0.5", "10.1.0.0/16", "::1"]})
    assert [str(n) for n in listed.trusted_proxies] == ["10.0.0.5/32", "10.1.0.0/16", "::1/128"]
    for bad in ("*", "localhost", "10.0.0.5/8"):  # no wildcard, no names, no host bits in a network
        with pytest.raises(ValueError, match="trusted_proxies"):
            ServerConfig.model_validate({"trusted_proxies": [bad]})
