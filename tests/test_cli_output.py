"""What people read: tables whose names are never cut at any terminal width, and ``table create``
saying which companion tables it made. Through real ``streampart`` processes (no Spark), and the
shared table printer (:meth:`streampart.cli.output.TextOutput.table`) at given widths."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from rich.console import Console

from streampart.cli.output import TextOutput, listing

_SCRIPT = Path(sys.executable).parent / "streampart"
COMMAND = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "streampart.cli"]
LONG = "analytics.page_views_by_country_and_device"


def run(warehouse: Path, *args: str, columns: int = 100) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    env |= {"STREAMPART_WAREHOUSE": str(warehouse), "COLUMNS": str(columns), "NO_COLOR": "1", "TZ": "UTC"}
    done = subprocess.run([*COMMAND, *args], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    wh = tmp_path_factory.mktemp("wh")
    schema = ["--schema", "id BIGINT, ts TIMESTAMP", "--time-column", "ts", "--roll-every", "1h"]
    created = run(
        wh, "table", "create", "shop.orders", *schema, "--mode", "event-time", "--late-data", "divert",
        "--dead-letter",
    )  # fmt: skip
    as_json = run(wh, "table", "create", LONG, *schema, "--dead-letter", "--json")
    return wh, created.stdout, as_json.stdout


def test_create_names_the_companion_tables_it_made(warehouse: tuple[Path, str, str]) -> None:
    _, text, as_json = warehouse
    said = " ".join(text.split())
    assert "created shop.orders (event-time, rolls every 1h)" in said
    assert "created shop.orders__late for its late rows (--late-data divert) at " in said
    assert "created shop.orders__dead_letter for its malformed records (--dead-letter) at " in said
    companions = json.loads(as_json)["companions"]
    assert [(c["table"], c["kind"]) for c in companions] == [(f"{LONG}__dead_letter", "dead-letter")]
    assert companions[0]["location"].endswith("page_views_by_country_and_device__dead_letter")


@pytest.mark.process
@pytest.mark.parametrize("columns", [200, 80, 60, 30])
def test_table_list_never_cuts_a_name(warehouse: tuple[Path, str, str], columns: int) -> None:
    shown = run(warehouse[0], "table", "list", columns=columns).stdout
    assert "…" not in shown
    names = (LONG, f"{LONG}__dead_letter", "shop.orders", "shop.orders__late", "shop.orders__dead_letter")
    for name in names:
        assert name in shown, f"{name} cut at {columns} columns:\n{shown}"
    for kind in ("dead-letter", "late", "main", "event-time"):
        assert kind in shown


def _printed(table_width: int, headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    out = TextOutput()
    printed = io.StringIO()
    out.console = Console(file=printed, width=table_width, soft_wrap=True, color_system=None)
    grid = listing(*headers)
    for row in rows:
        grid.add_row(*row)
    out.table(grid)
    return printed.getvalue()


@pytest.mark.parametrize("width", [160, 100, 80, 60, 40, 20])
def test_a_listing_keeps_names_whole_and_folds_the_rest(width: int) -> None:
    path = "/warehouse/" + "x" * 70
    rows = [(LONG, "a long description that can wrap between its words", path), ("b.c", "short", "/w/b/c")]
    shown = _printed(width, ("name", "description", "location"), rows)
    assert "…" not in shown
    assert LONG in shown and "b.c" in shown
    # what gives way is folded over lines, not cut: every character is still there
    letters = "".join(ch for ch in shown if ch == "x")
    assert len(letters) == 70


def test_a_listing_is_a_table_when_it_fits_and_records_when_not() -> None:
    rows = [("shop.orders", "1", "/w/shop/orders")]
    assert "┃ name" in _printed(100, ("name", "partitions", "location"), rows)
    narrow = _printed(20, ("name", "partitions", "location"), rows)
    assert narrow.splitlines()[:3] == ["shop.orders", "  partitions: 1", "  location: /w/shop/orders"]
