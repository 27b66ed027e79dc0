"""``streampart federation …`` and ``namespace create --metastore`` (issue 12, part 1), on SQLite and
PostgreSQL primaries (``--metastore``) with a second real database as the federated metastore.

Every bad call exits 1 with one message and changes nothing: the registry, the routes and the
route table's version are as before.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from metastore.errors import StreampartError
from metastore.store import Metastore
from streampart.cli import app
from tests.pg import drop_scratch_schema, scratch_schema_url


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("STREAMPART_") and key != "STREAMPART_TEST_PG":
            monkeypatch.delenv(key)


@pytest.fixture
def other_url(metastore_url: str, tmp_path: Path) -> Iterator[str]:
    if metastore_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'other.sqlite'}"
        return
    url = scratch_schema_url("sp_fed")
    yield url
    drop_scratch_schema(url)


def _cli(primary: str, wh: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["--warehouse", str(wh), "--metastore", primary, *args], env=env)
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        assert isinstance(exc, StreampartError), exc
        return 1, str(exc)
    return result.exit_code, result.stdout


def _registry(primary: str) -> tuple[list[str], dict[str, str], int]:
    store = Metastore(primary)
    try:
        return [m.name for m in store.list_metastores()], store.routes(), store.route_version()
    finally:
        store.close()


@pytest.mark.usefixtures("env")
def test_the_federation_commands(metastore_url: str, other_url: str, tmp_path: Path) -> None:
    wh = tmp_path / "wh"

    def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        return _cli(metastore_url, wh, *args, env=env)

    code, out = cli("federation", "add", "m1", "--url", other_url, "--access", "read-write-create-whitelist",
                    "--writable", "sales_*", "--writable", "ops", "--prefix", "sales_", "--json")  # fmt: skip
    assert code == 0, out
    added = json.loads(out)
    assert (added["url"], added["writable"], added["prefix"], added["health"]) == (
        other_url,
        ["sales_*", "ops"],
        "sales_",
        "up",
    )
    # a second one in a directory that goes away: it is listed as down, with the reason
    gone = tmp_path / "gone"
    gone.mkdir()
    m2 = f"sqlite:///{gone}/m2.sqlite"
    assert cli("federation", "add", "m2", "--url", m2, "--access", "read-only")[0] == 0
    shutil.rmtree(gone)
    code, out = cli("federation", "list", "--json")
    rows = {r["metastore"]: r for r in json.loads(out)}
    assert list(rows) == ["primary", "m1", "m2"]
    assert (rows["primary"]["health"], rows["m1"]["health"], rows["m2"]["health"]) == ("up", "up", "down")
    assert "does not exist" in rows["m2"]["error"]
    code, out = cli("federation", "list")
    assert code == 0 and "down:" in out  # with the reason (wrapped in its cell)

    # namespace create --metastore: a route, checked against the access type
    code, out = cli("namespace", "create", "ops", "--metastore", "m1", "--json")
    assert code == 0 and json.loads(out)["metastore"] == "m1"
    code, said = cli("namespace", "create", "hr", "--metastore", "m1")
    assert code == 1 and "creates only namespaces of its whitelist (sales_*, ops), not hr" in said
    code, said = cli("namespace", "create", "hr", "--metastore", "m2")
    assert code == 1 and "metastore m2 is read-only: no namespace is created there" in said
    code, out = cli("federation", "describe", "m1", "--json")
    info = json.loads(out)
    assert (info["routes"], info["access"], info["health"]) == (["ops"], "read-write-create-whitelist", "up")
    assert cli("federation", "describe", "m1")[1].startswith("m1  read-write-create-whitelist  up")

    assert cli("namespace", "create", "finance")[0] == 0  # on the primary, with no route
    before = _registry(metastore_url)
    bad = [
        (("federation", "describe", "nope"), "metastore nope does not exist (streampart federation list"),
        (("federation", "remove", "nope"), "metastore nope does not exist"),
        (("namespace", "create", "x", "--metastore", "nope"), "metastore nope does not exist"),
        (("federation", "add", "m1", "--url", other_url, "--access", "read-only"),
         "metastore m1 exists already"),
        (("federation", "add", "m3", "--url", "postgresql://postgres@127.0.0.1:1/test", "--access",
          "read-only"), "metastore m3 is unreachable at"),
        (("federation", "add", "m3", "--url", "postgresql://u:hunter2@127.0.0.1/x", "--access", "read-only"),
         "in clear text"),
        (("federation", "add", "m3", "--url", "postgresql://u:${M3_PW}@127.0.0.1/x", "--access",
          "read-only"), "secret M3_PW is unknown"),
        (("federation", "add", "m3", "--url", f"sqlite:///{tmp_path}/m3.sqlite", "--access",
          "read-write-whitelist"), "give at least one --writable PATTERN"),
        (("federation", "add", "m3", "--url", f"sqlite:///{tmp_path}/m3.sqlite", "--access", "all"),
         "is not one of read-only"),
        (("federation", "add", "m3", "--url", f"sqlite:///{tmp_path}/m3.sqlite", "--access", "read-only",
          "--prefix", "fin"), "prefix fin collides with namespaces of the primary: finance"),
        (("federation", "add", "m3", "--url", f"sqlite:///{tmp_path}/m3.sqlite", "--access", "read-only",
          "--route", "ops"), "must have the form NAMESPACE=METASTORE"),
        (("federation", "remove", "m1"), "metastore m1 is in use: namespaces ops are routed there; "
         "drop them first, or move each elsewhere (streampart namespace move)"),
        (("federation", "remove", "primary"), "needs no registration"),
    ]  # fmt: skip
    for args, says in bad:
        code, said = cli(*args)
        assert code == 1 and says in said, (args, said)
        assert _registry(metastore_url) == before, args
    assert "hunter2" not in "".join(cli(*bad[5][0])[1])

    assert cli("federation", "remove", "m2") == (0, "removed metastore m2\n")
    names, _, version = _registry(metastore_url)
    assert names == ["m1"] and version == before[2] + 1


@pytest.mark.usefixtures("env")
def test_secrets_come_from_the_config_or_the_environment(metastore_url: str, tmp_path: Path) -> None:
    wh, fed = tmp_path / "wh", tmp_path / "fed"
    fed.mkdir()
    url = "sqlite:///${FED_DIR}/m.sqlite"  # a secret may stand for any part of the URL
    config = tmp_path / "streampart.toml"
    config.write_text(f'[federation]\nsecrets = {{ FED_DIR = "{fed}" }}\n')
    code, out = _cli(metastore_url, wh, "--config", str(config), "federation", "add", "m1", "--url", url,
                     "--access", "read-only", "--json")  # fmt: skip
    assert code == 0, out
    assert json.loads(out)["url"] == url and (fed / "m.sqlite").is_file()
    # another process without the config: the environment names it, or the metastore is down
    code, out = _cli(metastore_url, wh, "federation", "describe", "m1", "--json")
    assert json.loads(out)["health"] == "down" and "secret FED_DIR is unknown" in json.loads(out)["error"]
    secret = {"STREAMPART_SECRET_FED_DIR": str(fed)}
    code, out = _cli(metastore_url, wh, "federation", "describe", "m1", "--json", env=secret)
    assert json.loads(out)["health"] == "up"


@pytest.mark.usefixtures("env")
def test_a_name_clash_is_named_with_the_command_that_settles_it(
    metastore_url: str, other_url: str, tmp_path: Path
) -> None:
    wh = tmp_path / "wh"
    assert _cli(metastore_url, wh, "namespace", "create", "default")[0] == 0
    theirs = Metastore(other_url)
    try:
        theirs.create_namespace("default")  # Waggle Dance's two `default` databases (#260)
    finally:
        theirs.close()
    add = ("federation", "add", "m1", "--url", other_url, "--access", "read-only")
    code, said = _cli(metastore_url, wh, *add)
    assert code == 1 and "namespaces default exist both in the primary and in m1" in said
    assert "--route default=primary or --route default=m1" in said
    assert _registry(metastore_url)[:2] == ([], {})
    assert _cli(metastore_url, wh, *add, "--route", "default=primary")[0] == 0
    assert _registry(metastore_url)[:2] == (["m1"], {"default": "primary"})


def test_federation_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from streampart.config import load_settings

    monkeypatch.setenv("STREAMPART_SECRET_PG_PW", "x")  # read where a URL names it: not an unknown setting
    config = tmp_path / "streampart.toml"
    config.write_text('[federation]\nsecrets = { PG_PW = "s3cret" }\nrefresh_interval = "2s"\n')
    settings = load_settings(config)
    assert settings.federation.secret_values() == {"PG_PW": "s3cret"}
    assert "s3cret" not in repr(settings) and settings.federation.refresh_interval.total_seconds() == 2
    assert settings.federation.health_interval.total_seconds() == 5


@pytest.mark.usefixtures("env")
def test_federation_alter(metastore_url: str, other_url: str, tmp_path: Path) -> None:
    wh = tmp_path / "wh"

    def cli(*args: str) -> tuple[int, str]:
        return _cli(metastore_url, wh, *args)

    assert cli("federation", "add", "m1", "--url", other_url, "--access", "read-write-create")[0] == 0
    assert cli("namespace", "create", "ops", "--metastore", "m1")[0] == 0
    version = _registry(metastore_url)[2]
    code, out = cli("federation", "alter", "m1", "--access", "read-write-whitelist", "--writable", "ops",
                    "--prefix", "sales_", "--json")  # fmt: skip
    assert code == 0, out
    info = json.loads(out)
    assert (info["access"], info["writable"], info["prefix"], info["routes"]) == (
        "read-write-whitelist", ["ops"], "sales_", ["ops"],
    )  # fmt: skip
    assert _registry(metastore_url)[2] == version + 1  # one change, one bump
    assert cli("federation", "alter", "m1", "--access", "read-only", "--no-prefix") == (
        0,
        "metastore m1 is read-only, no prefix\n",
    )
    code, said = cli("table", "create", "ops.t", "--schema", "id BIGINT, ts TIMESTAMP", "--time-column", "ts",
                     "--roll-every", "1h")  # fmt: skip
    assert code == 1 and "namespace ops is on metastore m1, which is read-only: no writes" in said

    before = _registry(metastore_url)
    bad = [
        (("federation", "alter", "nope", "--access", "read-only"), "metastore nope does not exist"),
        (("federation", "alter", "m1"), "nothing to alter for metastore m1"),
        (("federation", "alter", "m1", "--access", "rw"), "access 'rw' is not one of"),
        (("federation", "alter", "m1", "--prefix", "a_", "--no-prefix"), "give one of them"),
        (("federation", "alter", "primary", "--access", "read-only"), "has no access type"),
    ]
    for args, says in bad:
        code, said = cli(*args)
        assert code == 1 and says in said, (args, said)
        assert _registry(metastore_url) == before, args
