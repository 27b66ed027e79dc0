"""``streampart namespace move``: its answers and refusals as a user sees them (one backend here:
both directions across SQLite and PostgreSQL are in tests/metastore/test_moves.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from metastore.catalog import Catalog
from metastore.errors import StreampartError
from streampart.cli import app
from tests.fixtures import make_table


def _cli(primary: str, wh: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["--warehouse", str(wh), "--metastore", primary, *args])
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        assert isinstance(exc, StreampartError), exc
        return 1, str(exc)
    return result.exit_code, result.stdout


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("STREAMPART_") and key != "STREAMPART_TEST_PG":
            monkeypatch.delenv(key)


@pytest.mark.usefixtures("env")
def test_namespace_move_answers_and_refusals(tmp_path: Path) -> None:
    wh, primary = tmp_path / "wh", f"sqlite:///{tmp_path / 'primary.sqlite'}"
    catalog = Catalog.open(wh, primary)
    catalog.federation.add("m2", f"sqlite:///{tmp_path / 'm2.sqlite'}", "read-write-create")
    make_table(catalog, "shop.orders", dead_letter=True)
    catalog.close()
    refusals = [
        (("shop",), "give --to METASTORE to move the namespace, or --abort"),
        (("shop", "--to", "m2", "--abort"), "give --to METASTORE"),
        (("shop", "--to", "nowhere"), "metastore nowhere does not exist"),
        (("nothing", "--to", "m2"), "namespace nothing does not exist"),
        (("shop", "--to", "primary"), "lives in metastore primary already"),
        (("--abort", "shop"), "no move of namespace shop is in progress"),
    ]
    for args, message in refusals:
        code, out = _cli(primary, wh, "namespace", "move", *args)
        assert code == 1 and message in out, (args, out)
    code, out = _cli(primary, wh, "namespace", "move", "shop", "--to", "m2", "--grace", "0", "--json")
    assert code == 0, out
    info = json.loads(out)
    assert (info["from"], info["to"], info["links"], info["aborted"]) == ("primary", "m2", 0, False)
    assert set(info["tables"]) == {"shop.orders", "shop.orders__dead_letter"} and info["rows"] > 2
    code, out = _cli(primary, wh, "namespace", "move", "shop", "--to", "primary", "--grace", "0")
    assert code == 0 and "moved namespace shop from m2 to primary: 2 table(s), 0 link(s)" in out, out
