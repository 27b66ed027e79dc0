"""``streampart namespace …``, ``streampart link …``, and links seen by ``table``, ``write``, ``roll``.

In-process through typer's ``CliRunner`` (as ``test_cli.test_each_call_has_its_own_state``), on a
SQLite metastore in a temporary warehouse: these are the command line's tests; the store's
contract on PostgreSQL is covered by the metastore's suites. A user error raised by a command is
what ``streampart``'s ``main`` prints as one ``error:`` line with exit status 1; one test checks
that through a real process. Spark is not needed.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from metastore.errors import StreampartError
from streampart.cli import app
from tests.test_cli import COMMAND

CREATE = ["--schema", "id BIGINT, ts TIMESTAMP, msg STRING", "--time-column", "ts", "--roll-every", "1h"]


@dataclass(frozen=True)
class Out:
    args: tuple[str, ...]
    code: int
    stdout: str
    error: str  # the one line `streampart` prints for a user error (or stderr)

    def json(self) -> Any:
        assert self.code == 0, f"streampart {' '.join(self.args)} failed: {self.error}"
        return json.loads(self.stdout)

    def ok(self) -> Out:
        assert self.code == 0, f"streampart {' '.join(self.args)} failed: {self.error}"
        return self


@pytest.fixture(autouse=True)
def _no_outside_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("STREAMPART_"):
            monkeypatch.delenv(key)


def cli(wh: Path, *args: str | Path, env: dict[str, str] | None = None) -> Out:
    """One ``streampart`` call, in process; a StreampartError becomes what ``main`` makes of it."""
    argv = tuple(str(a) for a in args)
    result = CliRunner().invoke(app, ["--warehouse", str(wh), *argv], env=env)
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        if not isinstance(exc, StreampartError):
            raise exc  # a crash, never a user error
        return Out(argv, 1, result.stdout, f"error: {exc}")
    return Out(argv, result.exit_code, result.stdout, result.stderr)


def assert_user_error(out: Out, *fragments: str) -> None:
    context = f"streampart {' '.join(out.args)}\nstdout: {out.stdout}\nerror: {out.error}"
    assert out.code == 1, context
    assert out.stdout == "", context
    assert out.error.startswith("error: ") and out.error.count("error:") == 1, context
    assert "\n" not in out.error.strip(), context
    for fragment in fragments:
        assert fragment in out.error, f"{fragment!r} not in the message\n{context}"


def state(wh: Path) -> tuple[Any, ...]:
    """Everything the metastore says about namespaces, tables and links."""
    return (
        cli(wh, "namespace", "list", "--json").json(),
        cli(wh, "link", "list", "--json").json(),
        cli(wh, "table", "list", "--json").json(),
    )


def write(wh: Path, name: str, n: int, tmp: Path) -> dict[str, Any]:
    path = tmp / f"rows-{name}-{n}.jsonl"
    path.write_text(
        "".join(json.dumps({"id": i, "ts": "2026-11-21T10:00:00Z", "msg": "x" * 20}) + "\n" for i in range(n))
    )
    return cli(wh, "write", name, path, "--json").json()


@pytest.fixture
def teams(tmp_path: Path) -> Path:
    """sales owns orders (and its dead-letter table), 3 rows; analytics (isolated, a quota) links it."""
    wh = tmp_path / "wh"
    cli(wh, "table", "create", "sales.orders", *CREATE, "--dead-letter").ok()
    write(wh, "sales.orders", 3, tmp_path)
    cli(wh, "namespace", "create", "analytics", "--isolated", "--quota", "10MiB", "--description", "BI").ok()
    cli(wh, "link", "create", "analytics.orders", "--to", "sales.orders", "--include-streaming").ok()
    return wh


# -- namespaces ---------------------------------------------------------------------------------


def test_namespace_create_list_describe_alter(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    created = cli(wh, "namespace", "create", "team", "--isolated", "--quota", "500GiB", "--json").json()
    assert created["namespace"] == "team" and created["isolated"] is True
    assert created["quota_bytes"] == 500 * 1024**3 and created["description"] == ""
    cli(wh, "table", "create", "other.t", *CREATE).ok()  # made on first use

    listed = {n["namespace"]: n for n in cli(wh, "namespace", "list", "--json").json()}
    assert set(listed) == {"team", "other"}
    assert (listed["other"]["tables"], listed["other"]["links"], listed["other"]["isolated"]) == (1, 0, False)
    assert listed["other"]["quota_bytes"] is None

    altered = cli(wh, "namespace", "alter", "team", "--not-isolated", "--quota", "1.5TB", "--json").json()
    assert (altered["isolated"], altered["quota_bytes"]) == (False, 1_500_000_000_000)
    altered = cli(wh, "namespace", "alter", "team", "--quota", "none", "--description", "d", "--json").json()
    assert (altered["isolated"], altered["quota_bytes"], altered["description"]) == (False, None, "d")

    info = cli(wh, "namespace", "describe", "other", "--json").json()
    assert info["tables"] == ["other.t"] and info["links"] == [] and info["committed_bytes"] == 0
    assert info["quota_used_percent"] is None
    text = cli(wh, "namespace", "describe", "team").ok().stdout
    assert "team" in text and "no quota" in text

    assert_user_error(cli(wh, "namespace", "create", "team"), "namespace team exists already")
    assert_user_error(cli(wh, "namespace", "describe", "nope"), "namespace nope does not exist")
    assert_user_error(cli(wh, "namespace", "alter", "team"), "nothing to change")


def test_namespace_describe_counts_committed_bytes_against_the_quota(teams: Path) -> None:
    sales = cli(teams, "namespace", "describe", "sales", "--json").json()
    assert sales["tables"] == ["sales.orders", "sales.orders__dead_letter"]
    assert sales["committed_bytes"] > 0
    analytics = cli(teams, "namespace", "describe", "analytics", "--json").json()
    assert analytics["description"] == "BI" and analytics["isolated"] is True
    assert analytics["links"] == [
        {
            "name": "analytics.orders",
            "source": "sales.orders",
            "mode": "dynamic",
            "include_streaming": True,
            "dangling": False,
        }
    ]
    assert (analytics["committed_bytes"], analytics["quota_used_percent"]) == (0, 0.0)


def test_namespace_drop_refuses_a_namespace_holding_tables_or_links_naming_them(teams: Path) -> None:
    before = state(teams)
    assert_user_error(cli(teams, "namespace", "drop", "analytics"), "--yes")
    assert_user_error(
        cli(teams, "namespace", "drop", "sales", "--yes"),
        "namespace sales is not empty",
        "sales.orders",
        "sales.orders__dead_letter",
        "--cascade",
    )
    assert_user_error(
        cli(teams, "namespace", "drop", "analytics", "--yes"), "not empty", "links analytics.orders"
    )
    # --cascade on sales: its table is linked from analytics, so nothing is dropped without --force
    assert_user_error(
        cli(teams, "namespace", "drop", "sales", "--yes", "--cascade"),
        "linked by analytics.orders",
        "--force",
    )
    assert state(teams) == before
    assert (teams / "sales" / "orders" / "_delta_log").is_dir()


def test_namespace_drop_cascade(teams: Path) -> None:
    cli(teams, "namespace", "drop", "analytics", "--yes", "--cascade").ok()
    namespaces = [n["namespace"] for n in cli(teams, "namespace", "list", "--json").json()]
    assert namespaces == ["sales"]
    assert cli(teams, "link", "list", "--json").json() == []
    assert (teams / "sales" / "orders" / "_delta_log").is_dir()  # the source is untouched

    cli(teams, "namespace", "drop", "sales", "--yes", "--cascade").ok()
    assert state(teams) == ([], [], [])
    assert not (teams / "sales" / "orders").exists()
    assert not (teams / "sales" / "orders__dead_letter").exists()


def test_namespace_drop_cascade_force_leaves_links_dangling(teams: Path) -> None:
    cli(teams, "namespace", "drop", "sales", "--yes", "--cascade", "--force").ok()
    [link] = cli(teams, "link", "list", "--json").json()
    assert link["name"] == "analytics.orders" and link["dangling"] is True
    assert_user_error(cli(teams, "link", "describe", "analytics.orders"), "sales.orders was dropped")


def test_require_explicit_refuses_namespaces_made_on_first_use(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    env = {"STREAMPART_NAMESPACES__REQUIRE_EXPLICIT": "true"}
    assert_user_error(
        cli(wh, "table", "create", "sales.orders", *CREATE, env=env),
        "namespace sales does not exist",
        "streampart namespace create sales",
    )
    assert state(wh) == ([], [], [])
    cli(wh, "namespace", "create", "sales").ok()
    cli(wh, "table", "create", "sales.orders", *CREATE, "--dead-letter", env=env).ok()
    assert_user_error(
        cli(wh, "link", "create", "bi.orders", "--to", "sales.orders", env=env), "namespace bi does not exist"
    )
    assert [n["namespace"] for n in cli(wh, "namespace", "list", "--json").json()] == ["sales"]
    assert cli(wh, "link", "list", "--json").json() == []

    config = tmp_path / "streampart.toml"  # the same from the config file
    config.write_text("[namespaces]\nrequire_explicit = true\n")
    assert_user_error(
        cli(wh, "--config", config, "table", "create", "bi.t", *CREATE), "namespace bi does not exist"
    )
    # by default, a namespace is made on first use
    cli(wh, "link", "create", "bi.orders", "--to", "sales.orders").ok()
    assert [n["namespace"] for n in cli(wh, "namespace", "list", "--json").json()] == ["bi", "sales"]


# -- links --------------------------------------------------------------------------------------


def test_link_create_describe_list(teams: Path) -> None:
    info = cli(teams, "link", "describe", "analytics.orders", "--json").json()
    assert (info["name"], info["source"], info["mode"]) == ("analytics.orders", "sales.orders", "dynamic")
    assert info["include_streaming"] is True and info["dangling"] is False
    [exposed] = info["exposed"]
    assert exposed["state"] == "streaming" and exposed["rows"] == 3

    described = cli(teams, "table", "describe", "analytics.orders", "--json").json()
    assert described["kind"] == "link" and described["link"]["source"] == "sales.orders"
    assert described["partitions"] == info["exposed"]
    text = cli(teams, "table", "describe", "analytics.orders").ok().stdout
    assert "is a link to sales.orders (dynamic)" in " ".join(text.split())

    # without --include-streaming, a dynamic link shows standard partitions only: none yet
    cli(teams, "link", "create", "analytics.rolled", "--to", "sales.orders", "--retention", "3650d").ok()
    rolled = cli(teams, "link", "describe", "analytics.rolled", "--json").json()
    assert rolled["exposed"] == [] and rolled["retention"] == "3650d"

    listed = cli(teams, "link", "list", "analytics", "--json").json()
    assert [x["name"] for x in listed] == ["analytics.orders", "analytics.rolled"]
    assert cli(teams, "link", "list", "sales", "--json").json() == []
    tables = {t["table"]: t for t in cli(teams, "table", "list", "--json").json()}
    assert tables["analytics.orders"]["kind"] == "link"
    assert tables["analytics.orders"]["source"] == "sales.orders"
    assert tables["sales.orders"]["kind"] == "main"

    cli(teams, "link", "drop", "analytics.rolled").ok()
    assert [x["name"] for x in cli(teams, "link", "list", "--json").json()] == ["analytics.orders"]
    assert_user_error(cli(teams, "link", "drop", "analytics.rolled"), "link analytics.rolled does not exist")
    assert_user_error(cli(teams, "link", "drop", "sales.orders"), "sales.orders is a table, not a link")


def test_static_link_partitions(teams: Path, tmp_path: Path) -> None:
    value = cli(teams, "table", "describe", "sales.orders", "--json").json()["partitions"][0]["value"]
    cli(teams, "roll", "sales.orders", "--force").ok()
    static = cli(
        teams, "link", "create", "analytics.snap", "--to", "sales.orders", "--static", "--json"
    ).json()
    assert static["mode"] == "static" and static["partitions"] == []
    assert cli(teams, "link", "describe", "analytics.snap", "--json").json()["exposed"] == []

    added = cli(teams, "link", "add-partition", "analytics.snap", value, "--json").json()
    assert added["partitions"] == [value]
    [exposed] = cli(teams, "link", "describe", "analytics.snap", "--json").json()["exposed"]
    assert (exposed["value"], exposed["state"], exposed["rows"]) == (value, "standard", 3)

    before = state(teams)
    assert_user_error(
        cli(teams, "link", "drop-partition", "analytics.snap", "2020-01-01T00:00:00Z"), "does not list"
    )
    assert state(teams) == before
    dropped = cli(teams, "link", "drop-partition", "analytics.snap", value, "--json").json()
    assert dropped["partitions"] == []
    assert cli(teams, "link", "describe", "analytics.snap", "--json").json()["exposed"] == []

    # a range lists the periods in it (half-open: the end is not included)
    start = value[:11] + "00:00:00Z"
    end = value[:11] + "03:00:00Z"
    ranged = cli(
        teams, "link", "create", "analytics.day", "--to", "sales.orders", "--static",
        "--partitions", f"{start}..{end}", "--json",
    ).json()  # fmt: skip
    assert ranged["partitions"] == [value[:11] + f"0{h}:00:00Z" for h in range(3)]


def test_dynamic_link_with_a_range(teams: Path) -> None:
    out = cli(
        teams, "link", "create", "analytics.old", "--to", "sales.orders", "--include-streaming",
        "--partitions", "2000-01-01..2001-01-01", "--json",
    ).json()  # fmt: skip
    assert out["range"] == "2000-01-01T00:00:00Z..2001-01-01T00:00:00Z" and out["mode"] == "dynamic"
    assert cli(teams, "link", "describe", "analytics.old", "--json").json()["exposed"] == []


BAD_LINKS = [
    (["link", "create", "analytics.x", "--to", "sales.missing"], "table sales.missing does not exist"),
    (["link", "create", "ops.x", "--to", "analytics.orders"], "analytics.orders is a link"),
    (["link", "create", "sales.copy", "--to", "sales.orders"], "a link imports a table of another namespace"),
    (["link", "create", "analytics.orders", "--to", "sales.orders"], "link analytics.orders exists already"),
    (["link", "create", "analytics.events", "--to", "sales.orders"], "analytics.events is a table already"),
    (["table", "create", "analytics.orders", *CREATE], "analytics.orders"),
    (["link", "create", "analytics.a/b", "--to", "sales.orders"], "path separator"),
    (["link", "create", "analytics.x", "--to", "sales/orders"], "path separator"),
    (["link", "create", "analytics..x", "--to", "sales.orders"], "must have the form NAMESPACE.TABLE"),
    (["link", "create", "analytics.x", "--to", "sales.orders/../secret"], "path separator"),
    (["link", "create", 'analytics."x"', "--to", "sales.orders"], "quote"),
    (["link", "create", "analytics.`x`", "--to", "sales.orders"], "quote"),
    (["link", "create", "analytics.x@sales", "--to", "sales.orders"], "not a valid name"),
    (["link", "create", "analytics.x", "--to", "orders@sales"], "NAMESPACE.TABLE"),
    (["namespace", "create", "a@b"], "not a valid name"),
    (["namespace", "create", "../etc"], "path separator"),
    (["namespace", "create", "x", "--quota", "lots"], "--quota"),
    (
        [
            "link",
            "create",
            "analytics.s",
            "--to",
            "sales.orders",
            "--static",
            "--partition",
            "2026-11-21T10:30:00Z",
        ],
        "is not the start of a partition of sales.orders",
    ),
    (
        ["link", "create", "analytics.d", "--to", "sales.orders", "--partition", "2026-11-21T10:00:00Z"],
        "add --static",
    ),
    (
        ["link", "create", "analytics.r", "--to", "sales.orders", "--partitions", "2026-12-01..2026-11-01"],
        "empty",
    ),
    (["link", "create", "analytics.r", "--to", "sales.orders", "--partitions", "2026-12-01"], "FROM..TO"),
    (["link", "create", "analytics.r", "--to", "sales.orders", "--retention", "soon"], "--retention"),
    (["link", "add-partition", "analytics.orders", "2026-11-21T10:00:00Z"], "is dynamic"),
    (["link", "describe", "analytics.nope"], "link analytics.nope does not exist"),
]


@pytest.mark.parametrize(
    ("args", "message"), BAD_LINKS, ids=[" ".join(a[:3]) + " " + m for a, m in BAD_LINKS]
)
def test_bad_input_is_one_clear_error_and_changes_nothing(teams: Path, args: list[str], message: str) -> None:
    cli(teams, "table", "create", "analytics.events", *CREATE).ok()
    cli(teams, "namespace", "create", "ops").ok()
    before = state(teams)

    assert_user_error(cli(teams, *args), message)

    assert state(teams) == before


@pytest.mark.process
def test_writes_rolls_and_drops_through_a_link_are_refused(teams: Path, tmp_path: Path) -> None:
    rows = tmp_path / "one.jsonl"
    rows.write_text('{"id": 1, "ts": "2026-11-21T10:00:00Z"}\n')
    before = state(teams)
    version = cli(teams, "table", "describe", "sales.orders", "--json").json()["version"]

    for args in (("write", "analytics.orders", rows), ("roll", "analytics.orders", "--force"),
                 ("table", "drop", "analytics.orders", "--yes")):  # fmt: skip
        assert_user_error(cli(teams, *args), "analytics.orders is a link (to sales.orders)", "read-only")

    assert state(teams) == before
    assert cli(teams, "table", "describe", "sales.orders", "--json").json()["version"] == version
    # the real command line: one line on stderr, exit status 1
    proc = subprocess.run(
        [*COMMAND, "--warehouse", str(teams), "write", "analytics.orders", str(rows)],
        capture_output=True, text=True, timeout=120, env={k: v for k, v in os.environ.items()
                                                          if not k.startswith("STREAMPART_")},
    )  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert " ".join(proc.stderr.split()).startswith("error: analytics.orders is a link"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_dropping_a_linked_source_is_refused_then_forced_and_the_link_dangles(teams: Path) -> None:
    before = state(teams)
    assert_user_error(
        cli(teams, "table", "drop", "sales.orders", "--yes"),
        "sales.orders is linked by analytics.orders",
        "--force",
    )
    assert state(teams) == before

    cli(teams, "table", "drop", "sales.orders", "--yes", "--force").ok()

    assert_user_error(
        cli(teams, "link", "describe", "analytics.orders"), "sales.orders was dropped", "link drop"
    )
    assert_user_error(cli(teams, "table", "describe", "analytics.orders"), "sales.orders was dropped")
    listed = {t["table"]: t for t in cli(teams, "table", "list", "--json").json()}
    assert listed["analytics.orders"]["kind"] == "link" and listed["analytics.orders"]["dangling"] is True
    assert "dangling link" in cli(teams, "table", "list", env={"COLUMNS": "200"}).ok().stdout
    usage = cli(teams, "namespace", "usage", "analytics", "--json").json()
    assert "analytics.orders" in usage["errors"] and usage["linked"]["bytes"] == 0
    cli(teams, "link", "drop", "analytics.orders").ok()
    assert cli(teams, "link", "list", "--json").json() == []


# -- usage --------------------------------------------------------------------------------------


def independent_count(wh: Path, namespace: str) -> dict[str, dict[str, int]]:
    """Bytes, files and rows of the namespace's tables as a plain Delta reader counts them."""
    import pyarrow as pa
    from deltalake import DeltaTable

    out = {kind: {"bytes": 0, "files": 0, "rows": 0} for kind in ("standard", "streaming")}
    for table_dir in sorted((wh / namespace).iterdir()):
        if not (table_dir / "_delta_log").is_dir():
            continue
        for add in pa.table(DeltaTable(str(table_dir)).get_add_actions(flatten=True)).to_pylist():
            kind = "streaming" if add["path"].startswith("_staging/") else "standard"
            out[kind]["bytes"] += add["size_bytes"]
            out[kind]["files"] += 1
            out[kind]["rows"] += add["num_records"]
    return out


def test_usage_agrees_with_the_delta_logs_before_and_after_a_roll(teams: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 7, "ts": "2026-11-21T10:00:00Z"}\n{"id": "seven"}\n')  # one to the dead letters
    cli(teams, "write", "sales.orders", bad).ok()
    write(teams, "sales.orders", 5, tmp_path)

    for step in ("before", "after"):
        if step == "after":
            cli(teams, "roll", "sales.orders", "--force").ok()
        [sales, analytics] = cli(teams, "namespace", "usage", "--json").json()[::-1]
        assert (sales["namespace"], analytics["namespace"]) == ("sales", "analytics")
        expected = independent_count(teams, "sales")
        assert {k: sales["owned"][k] for k in ("standard", "streaming")} == expected, step
        assert sales["owned"]["bytes"] == expected["standard"]["bytes"] + expected["streaming"]["bytes"]
        assert {t["name"] for t in sales["owned"]["tables"]} == {"sales.orders", "sales.orders__dead_letter"}
        assert sales["linked"]["bytes"] == 0
        # analytics owns nothing; its link shows all of sales.orders (include-streaming), not charged
        assert analytics["owned"]["bytes"] == 0 and analytics["quota_bytes"] == 10 * 1024**2
        [main] = [t for t in sales["owned"]["tables"] if t["name"] == "sales.orders"]
        [link] = analytics["linked"]["links"]
        assert (link["name"], link["bytes"], link["version"]) == (
            "analytics.orders",
            main["bytes"],
            main["version"],
        )
        assert link["standard_rows"] + link["streaming_rows"] == 9
        if step == "before":
            assert expected["standard"]["files"] == 0 and expected["streaming"]["rows"] == 10
        else:  # the orders rolled; the dead letter waits for its own table's roll
            assert (expected["standard"]["rows"], expected["streaming"]["rows"]) == (9, 1)

    one = cli(teams, "namespace", "usage", "sales", "--json").json()
    assert one["namespace"] == "sales" and one["owned"] == sales["owned"]
    text = " ".join(cli(teams, "namespace", "usage").ok().stdout.split())
    assert "analytics" in text and "10.0 MiB" in text and "not charged" in text
    assert_user_error(cli(teams, "namespace", "usage", "nope"), "namespace nope does not exist")


def test_a_write_past_the_quota_is_refused_and_commits_nothing(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    cli(wh, "namespace", "create", "small", "--quota", "100B").ok()
    cli(wh, "table", "create", "small.t", *CREATE).ok()
    before = cli(wh, "table", "describe", "small.t", "--json").json()
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": 1, "ts": "2026-11-21T10:00:00Z", "msg": "hello"}\n')

    assert_user_error(
        cli(wh, "write", "small.t", rows), "namespace small is over its quota", "nothing was committed"
    )

    after = cli(wh, "table", "describe", "small.t", "--json").json()
    assert (after["version"], after["partitions"]) == (before["version"], before["partitions"])
    cli(wh, "namespace", "alter", "small", "--quota", "none").ok()
    assert cli(wh, "write", "small.t", rows, "--json").json()["rows"] == 1
