"""The operators' status page (``/ui``) in a real browser, against real servers and real rolls.

A ``streampart serve`` process and two ``streampart scheduler run --status-port 0`` processes
(a leader and a standby) share one warehouse with tables in two namespaces; chunks are
committed over the HTTP API, a table is rolled with ``Roller`` (what ``roll --force`` runs), and
one table cannot roll (its directory is a file: the daemon fails and backs off). One table has a
replica on a second cluster (one of its two rolled partitions copied there, by the local file
copy: no Spark) and a link to it from another namespace, made with ``streampart link create``;
tables have dead-letter and late-data companions. Debian's
Chromium, headless, driven by Playwright, reads the page as an operator would: the numbers come
from the page's ``data-field`` cells, never from the JSON. Set ``STREAMPART_SCREENSHOT=PATH`` to
keep a screenshot of the page (the README's ``docs/status-page.png`` is made so).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ingest.chunks import ChunkWriter
from ingest.client import Client
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.models import LateDataPolicy, Mode, RollOutcome, Table, parse_instant
from scheduler.replication import Replicator
from scheduler.roll import Roller
from tests.api.fixtures import Server
from tests.fixtures import make_table
from tests.helpers import ROOT, jsonl, wait_for
from tests.scheduler.helpers import daemon_env

CHROMIUM = os.environ.get("STREAMPART_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags, Chromium's own connections (updates, sync, field
# trials) are refused on a closed network and can hold up the page's loads.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
# Generous: a loaded 2-core machine; the page itself refreshes every second here.
PAGE_TIMEOUT_MS = 60_000
# How many standard partitions a table's timeline shows, in the page's script (%s: the table).
_STANDARD_ROWS = "document.querySelectorAll(\"article[data-table='%s'] .row[data-state='standard']\").length"


def _chromium() -> str | None:
    return shutil.which(CHROMIUM) or (CHROMIUM if Path(CHROMIUM).is_file() else None)


MISSING = (
    f"Chromium is missing ({CHROMIUM}): the status page is tested in a real browser. Install it with "
    "`apt-get install -y chromium` (make test and .ci/run do, as root), or point STREAMPART_CHROMIUM at one."
)


class Fleet:
    """The server, the two daemons and the tokens the tests open the page with."""

    # made by the fixture (fleet): the tables the tests look at, and the tokens
    events: Table
    clicks: Table
    broken: Table
    metrics: Table
    orders: Table
    admin: str
    reader: str
    analyst: str
    writer: str

    def __init__(self, tmp: Path) -> None:
        self.server = Server(tmp / "warehouse", f"sqlite:///{tmp / 'warehouse' / '_metastore.sqlite'}", tmp)
        self.tmp = tmp
        self.daemons: list[subprocess.Popen[str]] = []
        self.daemon_ports: list[int] = []

    @property
    def catalog(self) -> Catalog:
        return self.server.catalog

    def start_daemon(self, n: int) -> None:
        log = self.tmp / f"daemon-{n}.log"
        # the first turns the page on in its settings, the second with --status-port
        page: dict[str, Any] = {"status": True, "status_port": 0} if n == 1 else {}
        # replication off: the leader's pass would copy ns.orders' missing partition within its
        # interval, and what the page says of the replica would depend on when it is read
        env = daemon_env(
            self.catalog,
            housekeeping={"enabled": True, "interval": "2s"},
            replication={"enabled": False},
            status_host="127.0.0.1",
            status_refresh="1s",
            **page,
        )
        env["STREAMPART_SERVER__AUTH_CACHE_TTL"] = "0"
        flag = [] if n == 1 else ["--status-port", "0"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "streampart.cli", "scheduler", "run", "--log-format", "json", *flag],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True,
        )  # fmt: skip
        self.daemons.append(proc)

        def port() -> int | None:
            assert proc.poll() is None, f"daemon exited:\n{log.read_text()}"
            for line in log.read_text(errors="replace").splitlines():
                if '"status_page.listening"' in line:
                    return int(json.loads(line)["port"])
            return None

        self.daemon_ports.append(wait_for(port, f"daemon {n}'s status page", timeout=60))

    def stop(self) -> None:
        for proc in self.daemons:
            proc.terminate()
        for proc in self.daemons:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.server.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    f = Fleet(tmp_path_factory.mktemp("ui"))
    cat = f.catalog
    f.events = make_table(cat, "ns.events")
    f.clicks = make_table(cat, "ns.clicks", dead_letter=True)
    f.broken = make_table(cat, "ns.broken", roll_every="2s")
    make_table(cat, "secret.payroll")
    f.metrics = make_table(cat, "ns.metrics", roll_every="3s")
    (f.tmp / "c2").mkdir()
    cat.clusters.add("c2", str(f.tmp / "c2"), "local[2]")
    # event time, late rows diverted to ns.orders__late, a replica on c2
    f.orders = make_table(
        cat, "ns.orders", mode=Mode.EVENT_TIME, late_data=LateDataPolicy.DIVERT, replicate_to=("c2",)
    )
    f.admin = f.server.token("admin", "admin:*")
    f.reader = f.server.token("oncall", "read:ns")
    f.analyst = f.server.token("analyst", "read:ns", "read:analytics")
    f.writer = f.server.token("producer", "write:ns", "write:secret")
    f.server.start(STREAMPART_SCHEDULER__STATUS_REFRESH="1s")
    rows = [{"id": i, "ts": "2026-11-21T10:15:00Z", "msg": f"m{i}"} for i in range(5)]
    with Client(f.server.url, f.admin) as api:
        for _ in range(3):
            api.events("ns.events", rows)
        api.events("ns.clicks", [*rows, {"id": "not a number", "ts": "2026-11-21T10:15:00Z"}])
        api.events("ns.broken", rows)
        api.events("secret.payroll", rows)
    Roller(cat).roll_table(f.events, force=True)
    with Client(f.server.url, f.admin) as api:
        api.events("ns.events", rows)  # into the partition opened by the roll
    # ns.orders: the 10:00 partition rolled and copied to c2, the 11:00 one rolled and not copied
    # (the daemons do not replicate here), then a row for 10:00 arrives late: to ns.orders__late
    with Client(f.server.url, f.admin) as api:
        api.events("ns.orders", rows)
        Roller(cat).roll_table(f.orders, force=True)
        assert len(Replicator(cat).replicate(f.orders).copied) == 1
        api.events("ns.orders", [{**r, "ts": "2026-11-21T11:15:00Z"} for r in rows])
        Roller(cat).roll_table(f.orders, force=True)
        api.events("ns.orders", [{"id": 99, "ts": "2026-11-21T10:20:00Z", "msg": "late"}])
    subprocess.run(
        [sys.executable, "-m", "streampart.cli", "link", "create", "analytics.orders", "--to", "ns.orders"],
        cwd=ROOT, env=daemon_env(cat), check=True, capture_output=True, text=True,
    )  # fmt: skip
    # ns.broken cannot roll: its directory is a file (root ignores permissions)
    location = Path(f.broken.location)
    shutil.rmtree(location)
    location.write_text("not a directory")
    try:
        f.start_daemon(1)
        f.start_daemon(2)
        wait_for(
            lambda: (
                len([a for a in cat.store.list_roll_attempts(f.broken.id) if a.outcome is RollOutcome.FAILED])
                >= 2
            ),
            "two failed rolls of ns.broken",
            timeout=90,
        )
        wait_for(lambda: len(cat.store.list_daemons("roll-daemon")) == 2, "both daemons' heartbeats")
        yield f
    finally:
        f.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    path = _chromium()
    if path is None:  # each browser test fails (not skips) with MISSING: see _open
        yield None
        return
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def _open(browser: Any, url: str, token: str | None, width: int = 1280) -> Any:
    """A fresh browser context (no cookie) at ``url``/ui/, the token entered in the page's form."""
    if browser is None:
        pytest.fail(MISSING, pytrace=False)
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    page = context.new_page()
    page.goto(f"{url}/ui/")
    if token is not None:
        page.fill("#token", token)
        page.click("button[type=submit]")
        page.wait_for_load_state()
    return page


def _cell(page: Any, table: str, field: str) -> str:
    return str(page.locator(f"tr[data-table='{table}'] [data-field='{field}']").inner_text()).strip()


def test_without_a_known_token_the_page_asks_for_one_and_shows_nothing(fleet: Fleet, browser: Any) -> None:
    page = _open(browser, fleet.server.url, None)
    assert page.locator("#token").is_visible()
    assert page.locator("[data-table]").count() == 0
    page.fill("#token", "spt_not-a-token")
    page.click("button[type=submit]")
    assert "unknown or revoked token" in page.locator("p.error").inner_text()
    assert page.locator("[data-table]").count() == 0
    assert "ns.events" not in page.content()
    assert not page.context.cookies(), "an unknown token must not be kept"
    assert httpx.get(f"{fleet.server.url}/ui/status.json").status_code == 401
    page.context.close()


def test_a_token_without_read_scope_sees_no_table(fleet: Fleet, browser: Any) -> None:
    page = _open(browser, fleet.server.url, fleet.writer)
    assert page.locator("[data-field='viewer']").inner_text() == "producer"
    assert page.locator("[data-field='no-tables']").is_visible()
    assert page.locator("[data-table]").count() == 0
    html = page.content()
    for name in ("ns.events", "ns.broken", "secret.payroll", "payroll"):
        assert name not in html, f"{name} shown to a token without read scope"
    answer = httpx.get(
        f"{fleet.server.url}/ui/status.json", headers={"Authorization": f"Bearer {fleet.writer}"}
    )
    assert answer.status_code == 200 and answer.json()["tables"] == [] and answer.json()["recent_rolls"] == []
    page.context.close()


def test_the_page_shows_tables_rolls_failures_and_daemons(fleet: Fleet, browser: Any) -> None:
    cat = fleet.catalog
    page = _open(browser, fleet.server.url, fleet.reader)
    cookie = {c["name"]: c for c in page.context.cookies()}["streampart_ui_token"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    shown = {
        page.locator("tr[data-table]").nth(i).get_attribute("data-table")
        for i in range(page.locator("tr[data-table]").count())
    }
    assert {"ns.events", "ns.clicks", "ns.broken"} <= shown
    assert not any(t.startswith("secret.") for t in shown), "a namespace the token may not read is shown"
    # the numbers: 4 commits into ns.events within the last 5 minutes, a dead letter in ns.clicks
    assert _cell(page, "ns.events", "mode") == "arrival"
    assert _cell(page, "ns.events", "roll_every") == "1h"
    assert float(_cell(page, "ns.events", "commits")) == pytest.approx(4 / 5)
    assert _cell(page, "ns.clicks", "dead_letters") == "1"
    assert _cell(page, "ns.events", "dead_letters") == "0"
    assert _cell(page, "ns.events", "freshness").endswith(("s", "m")), (
        "the newest commit is minutes old at most"
    )
    assert _cell(page, "ns.events", "health") == "ok"
    # the failing table: its state, its last error, and its partition due but not rolled
    assert _cell(page, "ns.broken", "health").startswith("failing ×")
    broken = page.locator("article[data-table='ns.broken']")
    shown_error = broken.locator("[data-field='last_error']").inner_text()
    failed = [a for a in cat.store.list_roll_attempts(fleet.broken.id) if a.outcome is RollOutcome.FAILED]
    assert failed[0].error is not None and "ns.broken" in shown_error
    assert failed[0].error.split(":")[0] in shown_error, "the last error is not the daemon's"
    late = broken.locator(".row[data-late='true']")
    assert late.count() >= 1 and "LATE" in late.first.inner_text()
    assert page.locator("[data-field='failing']").inner_text() == "1 failing"
    # the timeline of ns.events: one standard partition (rolled, with its duration), one streaming
    events = page.locator("article[data-table='ns.events']")
    assert events.locator(".row[data-state='standard']").count() == 1
    assert events.locator(".row[data-state='streaming']").count() == 1
    assert "rolled " in events.locator(".row[data-state='standard']").inner_text()
    # the daemons: the lease's holder and epoch, the other one standing by, housekeeping's last pass
    lease = cat.store.get_lease("roll-daemon")
    assert lease is not None  # a daemon leads
    wait_for(
        lambda: page.locator("[data-field='standbys']").inner_text() != "none", "the standby on the page"
    )
    assert page.locator("[data-field='leader']").inner_text() == lease.holder
    assert page.locator("[data-field='epoch']").inner_text() == str(lease.epoch)
    standby = next(d.holder for d in cat.store.list_daemons("roll-daemon") if d.holder != lease.holder)
    assert standby in page.locator("[data-field='standbys']").inner_text()
    page.wait_for_function("document.querySelector(\"[data-field='housekeeping']\").innerText != 'never'")
    passes = [d for d in cat.store.list_daemons("roll-daemon") if d.housekeeping_at is not None]
    assert passes and page.locator("[data-field='housekeeping']").inner_text().startswith(("ok", "failed"))
    page.context.close()


def test_the_page_updates_after_a_roll_without_a_reload(fleet: Fleet, browser: Any) -> None:
    # as the analyst: the screenshot shows the link too
    page = _open(browser, fleet.server.url, fleet.analyst)
    events = page.locator("article[data-table='ns.events']")
    before = events.locator(".row[data-state='standard']").count()
    page.evaluate("window.__not_reloaded = true")
    [result] = Roller(fleet.catalog).roll_table(fleet.events, force=True)
    assert result.state == "done"
    page.wait_for_function(f"{_STANDARD_ROWS % 'ns.events'} == {before + 1}")
    assert page.evaluate("window.__not_reloaded") is True, "the page reloaded instead of refreshing"
    if os.environ.get("STREAMPART_SCREENSHOT"):  # the README's: the daemon's rolls of ns.metrics too
        page.wait_for_function(f"{_STANDARD_ROWS % 'ns.metrics'} >= 5")
        page.set_viewport_size({"width": 1100, "height": 900})
        page.screenshot(path=os.environ["STREAMPART_SCREENSHOT"], full_page=True)
    page.context.close()


def test_on_a_narrow_screen_nothing_runs_off_the_side(fleet: Fleet, browser: Any) -> None:
    page = _open(browser, fleet.server.url, fleet.analyst, width=400)
    assert page.locator("tr[data-table='ns.broken']").is_visible()
    assert page.locator("tr[data-table='ns.clicks__dead_letter']").is_visible()
    assert page.locator("[data-field='replica']").is_visible()
    assert page.locator("li[data-link='analytics.orders']").is_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 400
    if os.environ.get("STREAMPART_SCREENSHOT"):
        page.screenshot(
            path=os.environ["STREAMPART_SCREENSHOT"].replace(".png", "-narrow.png"), full_page=True
        )
    page.context.close()


def test_the_daemon_serves_the_page_too(fleet: Fleet, browser: Any) -> None:
    url = f"http://127.0.0.1:{fleet.daemon_ports[0]}"
    page = _open(browser, url, fleet.reader)
    assert "served by the roll daemon" in page.locator("header").inner_text()
    assert page.locator("tr[data-table='ns.broken']").is_visible()
    assert page.locator("tr[data-table='secret.payroll']").count() == 0
    page.context.close()
    for port in fleet.daemon_ports:  # the page turned on by the settings, and by --status-port
        assert httpx.get(f"http://127.0.0.1:{port}/ui/status.json", timeout=30).status_code == 401
        answer = httpx.get(
            f"http://127.0.0.1:{port}/ui/status.json",
            headers={"Authorization": f"Bearer {fleet.reader}"},
            timeout=30,
        )
        assert "ns.broken" in {t["table"] for t in answer.json()["tables"]}


def test_with_auth_off_the_page_shows_every_namespace(fleet: Fleet) -> None:
    """``serve --insecure-no-auth``: the page and its JSON answer without a token, every namespace shown."""
    from ingest.api.auth import Authenticator
    from scheduler.config import SchedulerConfig
    from scheduler.status_page import StatusPage
    from scheduler.status_page.server import StatusServer

    cat = fleet.catalog
    server = StatusServer(
        StatusPage(cat, SchedulerConfig(), Authenticator(cat.primary, 0), auth=False), "127.0.0.1", 0
    )
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        json_answer = wait_for(lambda: _get(f"{url}/ui/status.json"), "the page's server")
        html = httpx.get(f"{url}/ui/", timeout=30).text
    finally:
        server.stop()
    assert {"ns.events", "ns.broken", "secret.payroll"} <= {t["table"] for t in json_answer.json()["tables"]}
    assert 'data-table="secret.payroll"' in html and 'id="token"' not in html


def test_companion_tables_show_with_their_main_table(fleet: Fleet, browser: Any) -> None:
    page = _open(browser, fleet.server.url, fleet.reader)
    grid = page.locator("tr[data-table]")
    order = [grid.nth(i).get_attribute("data-table") for i in range(grid.count())]
    # each right under its main table, marked as what it holds
    for main, companion, kind in (
        ("ns.clicks", "ns.clicks__dead_letter", "dead letters"),
        ("ns.orders", "ns.orders__late", "late rows"),
    ):
        assert order[order.index(main) + 1] == companion, order
        row = page.locator(f"tr[data-table='{companion}']")
        assert row.get_attribute("class") == "companion"
        tag = row.locator("[data-field='companion_of']")
        assert (tag.get_attribute("data-main"), tag.inner_text()) == (main, kind)
        # its timeline inside its main table's card, folded while it is ok
        folded = page.locator(f"article[data-table='{main}'] details[data-table='{companion}']")
        assert folded.count() == 1 and not folded.evaluate("d => d.open")
        assert page.locator(f"article[data-table='{companion}']").count() == 0
    assert _cell(page, "ns.orders__late", "health") == "ok"
    late_rows = page.locator("details[data-table='ns.orders__late'] .row[data-state='streaming']")
    assert late_rows.count() == 1 and not late_rows.first.is_visible(), "a folded timeline is shown"
    page.locator("details[data-table='ns.orders__late'] > summary").click()
    assert late_rows.first.is_visible()
    # counted as tables of their own nowhere: 5 main tables (ns.events, clicks, broken, metrics, orders)
    assert page.locator("[data-field='tables']").inner_text() == "5 tables"
    page.context.close()
    # status.json keeps them as tables of their own (scripts read them), naming their main table
    answer = httpx.get(
        f"{fleet.server.url}/ui/status.json", headers={"Authorization": f"Bearer {fleet.reader}"}, timeout=30
    )
    tables = {t["table"]: t for t in answer.json()["tables"]}
    assert (tables["ns.clicks__dead_letter"]["kind"], tables["ns.clicks__dead_letter"]["companion_of"]) == (
        "dead-letter",
        "ns.clicks",
    )
    assert (tables["ns.orders__late"]["kind"], tables["ns.orders__late"]["companion_of"]) == (
        "late",
        "ns.orders",
    )
    assert tables["ns.orders"]["companion_of"] is None


def test_replicas_and_links_show_with_their_table_to_those_who_may_read_them(
    fleet: Fleet, browser: Any
) -> None:
    """Last in the module: it copies ns.orders' missing partition to c2."""
    cat = fleet.catalog
    page = _open(browser, fleet.server.url, fleet.analyst)
    orders = page.locator("article[data-table='ns.orders']")
    replica = orders.locator("[data-field='replica'][data-cluster='c2']")
    text = replica.inner_text()
    assert text.startswith("replica on c2: 1 partition missing, lag "), text
    # the lag: how long ago the partition that is not on c2 rolled (seconds or minutes here)
    [missing] = [p for p in cat.store.list_partitions(fleet.orders.id) if p.value.hour == 11]
    assert missing.value not in cat.store.present_values(fleet.orders.id, "c2")
    assert text.rsplit("lag ", 1)[1].endswith("s")
    answer = httpx.get(
        f"{fleet.server.url}/ui/status.json", headers={"Authorization": f"Bearer {fleet.analyst}"}, timeout=30
    )
    [shown] = [t for t in answer.json()["tables"] if t["table"] == "ns.orders"]
    [behind] = shown["replication"]
    assert (behind["cluster"], behind["missing_partitions"], shown["replicas"]) == ("c2", 1, ["c2"])
    assert missing.rolled_at is not None
    since_roll = parse_instant(answer.json()["now"]) - missing.rolled_at  # as of the answer's now
    assert behind["lag_seconds"] == pytest.approx(since_roll.total_seconds(), abs=1e-3)
    # the timeline says which partition is on c2: the 10:00 one, not the 11:00 one (newest on top)
    standard = orders.locator("> .rows > .row[data-state='standard']")
    assert [standard.nth(i).get_attribute("data-partition")[11:16] for i in range(2)] == ["11:00", "10:00"]
    assert standard.nth(0).inner_text().endswith("5 rows · not yet on c2")
    assert standard.nth(1).inner_text().endswith("5 rows · copied to c2")
    assert standard.nth(0).locator(".when").inner_text().split() == ["21", "Nov", "11:00"]
    # the link: on the card of its source, and in the list of links with its source and mode
    assert orders.locator("[data-field='linked_as']").inner_text() == "linked as analytics.orders"
    link = page.locator("li[data-link='analytics.orders']")
    assert link.locator("[data-field='source']").inner_text() == "ns.orders"
    assert link.locator("[data-field='mode']").inner_text() == "dynamic"
    # once the partition is copied, the page says so at its next refresh
    assert len(Replicator(cat).replicate(fleet.orders).copied) == 1
    page.wait_for_function(
        "document.querySelector(\"article[data-table='ns.orders'] [data-field='replica']\").innerText"
        " == 'replica on c2: every standard partition copied'"
    )
    page.context.close()
    # a token that may read ns but not analytics: the replica, but no sign of the link
    page = _open(browser, fleet.server.url, fleet.reader)
    assert page.locator("article[data-table='ns.orders'] [data-field='replica']").count() == 1
    assert page.locator("[data-link]").count() == 0
    assert page.locator("[data-field='linked_as']").count() == 0
    assert "analytics" not in page.content()
    page.context.close()


def _get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=30)
    except httpx.TransportError:
        return None


def test_a_tables_card_marks_its_schema_evolution_and_newest_change(fleet: Fleet, browser: Any) -> None:
    """Issue 27: a table whose schema evolves says so, and its newest schema change (the version that
    made it, what it changed) shows on its card and in status.json."""
    cat = fleet.catalog
    table = cat.schemas.set_evolution("ns.metrics", "add-columns")
    row = {"id": 1, "ts": "2026-11-21T10:15:00Z", "msg": "m", "coupon": "X"}
    version = ChunkWriter(cat, table).write(jsonl([row]), Format.JSONL).version
    page = _open(browser, fleet.server.url, fleet.reader)
    card = page.locator("article[data-table='ns.metrics']")
    change = card.locator("[data-field='schema_change']")
    change.wait_for()
    assert change.get_attribute("data-version") == str(version)
    assert "add coupon STRING" in change.inner_text()
    assert card.locator("[data-field='schema_evolution']").inner_text() == "schema evolves: add-columns"
    assert page.locator("article[data-table='ns.events'] [data-field='schema_change']").count() == 0
    page.context.close()
    answer = httpx.get(
        f"{fleet.server.url}/ui/status.json", headers={"Authorization": f"Bearer {fleet.reader}"}, timeout=30
    )
    metrics = next(t for t in answer.json()["tables"] if t["table"] == "ns.metrics")
    assert metrics["last_schema_change"]["version"] == version and metrics["columns"] == 4
