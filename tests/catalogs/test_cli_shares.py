"""``streampart share …`` and the catalog options of ``token create`` (--expires-in, a Delta Sharing
profile), through the real CLI."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from tests.test_cli import CREATE, assert_user_error, run

pytestmark = pytest.mark.process


def test_shares_hold_tables_and_links_and_say_what_is_wrong(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    assert run(wh, "table", "create", "shop.orders", *CREATE).returncode == 0
    assert run(wh, "table", "create", "other.src", *CREATE).returncode == 0
    assert run(wh, "link", "create", "shop.peek", "--to", "other.src").returncode == 0
    made = run(wh, "share", "create", "partners", "--comment", "for partners", "--json").json()
    assert made == {**made, "name": "partners", "tables": [], "comment": "for partners"}
    for name in ("shop.orders", "shop.peek", "shop.orders"):  # adding one again changes nothing
        assert run(wh, "share", "add", "partners", name).returncode == 0
    [listed] = run(wh, "share", "list", "--json").json()
    assert listed["tables"] == ["shop.orders", "shop.peek"]
    assert_user_error(run(wh, "share", "add", "partners", "shop.nosuch"), "shop.nosuch does not exist")
    assert_user_error(run(wh, "share", "add", "nosuch", "shop.orders"), "share 'nosuch' does not exist")
    assert_user_error(run(wh, "share", "create", "partners"), "share 'partners' exists already")
    assert_user_error(run(wh, "share", "create", "bad/name"), "share name 'bad/name' is not valid")
    assert_user_error(run(wh, "share", "remove", "partners", "other.src"), "does not hold other.src")
    assert run(wh, "share", "remove", "partners", "shop.peek").returncode == 0
    assert run(wh, "share", "list", "--json").json()[0]["tables"] == ["shop.orders"]
    assert run(wh, "share", "drop", "partners").returncode == 0
    assert run(wh, "share", "list", "--json").json() == []


def test_a_token_with_an_expiry_and_a_profile_for_a_recipient(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    profile = tmp_path / "acme.share"
    endpoint = "https://data.example.com/delta-sharing/"
    made = run(
        wh, "token", "create", "acme", "--scope", "read:shop", "--expires-in", "30d",
        "--sharing-profile", profile, "--sharing-endpoint", endpoint, "--json",
    ).json()  # fmt: skip
    assert made["expires_at"].endswith("Z")
    written = json.loads(profile.read_text())
    assert written == {
        "shareCredentialsVersion": 1,
        "endpoint": "https://data.example.com/delta-sharing",
        "bearerToken": made["token"],
        "expirationTime": made["expires_at"],
    }
    assert stat.S_IMODE(profile.stat().st_mode) == 0o600  # it holds the token
    [listed] = run(wh, "token", "list", "--json").json()
    assert listed["expires_at"] == made["expires_at"] and "token" not in listed
    assert_user_error(
        run(wh, "token", "create", "b", "--scope", "read:shop", "--sharing-profile", tmp_path / "b.share"),
        "--sharing-profile and --sharing-endpoint go together",
    )
    assert_user_error(
        run(wh, "token", "create", "c", "--scope", "read:shop", "--expires-in", "soon"), "--expires-in"
    )
    assert_user_error(
        run(wh, "token", "create", "d", "--scope", "read:shop", "--expires-in", "-1h"), "expire"
    )


def test_a_token_for_a_namespace_that_does_not_exist_says_so(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    made = run(wh, "token", "create", "oncall", "--scope", "read:nosuch", "--json")
    assert made.json()["scopes"] == ["read:nosuch"]
    assert "namespace nosuch does not exist (yet)" in made.message
    assert run(wh, "table", "create", "shop.orders", *CREATE).returncode == 0
    quiet = run(wh, "token", "create", "reader", "--scope", "read:shop", "--json")
    assert quiet.json() and "does not exist" not in quiet.stderr
