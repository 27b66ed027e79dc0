"""Progress bars of ``roll --force`` and ``housekeep``: on stderr, only on a terminal, never with --json.

The terminal is simulated with ``FORCE_COLOR`` (rich then treats stdout and stderr as terminals).
With ``--json`` the output is what it always was: one JSON document on stdout, the same keys,
and nothing on stderr.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from typer.testing import CliRunner

from ingest.chunks import ChunkWriter
from ingest.config import ChunkConfig
from ingest.formats import Format
from metastore import clock
from streampart.cli import app
from tests.helpers import records
from tests.test_cli_chunks import CREATE, Env, env  # noqa: F401  (the fixture)

TERMINAL = {"FORCE_COLOR": "1", "COLUMNS": "200"}
ROLLED_KEYS = {"table", "partition", "roll", "state", "chunks", "rows", "bytes", "files_before",
               "files_after", "seconds", "next_partition", "resumed"}  # fmt: skip


@dataclass(frozen=True)
class Call:
    code: int
    stdout: str
    stderr: str


def _call(e: Env, *args: str, terminal: bool) -> Call:
    result = CliRunner().invoke(
        app, ["--warehouse", str(e.wh), "--metastore", e.url, *args], env=TERMINAL if terminal else {}
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return Call(result.exit_code, result.stdout, result.stderr)


def _table_with_chunks(e: Env, n: int) -> None:
    assert e.cli("table", "create", "ns.t", *CREATE)[0] == 0
    writer = ChunkWriter(e.catalog, e.catalog.table("ns.t"))
    for k in range(n):
        writer.write(records(range(k * 5, k * 5 + 5)), Format.JSONL)


def test_a_forced_roll_draws_a_bar_on_a_terminal_only(env: Env) -> None:  # noqa: F811
    _table_with_chunks(env, 3)
    shown = _call(env, "roll", "ns.t", "--force", terminal=True)
    assert (
        shown.code == 0
        and "rolling ns.t 20" in shown.stderr  # the partition's start
        and "B/" in shown.stderr  # bytes compacted of bytes in all
    )
    assert "rolling ns.t" not in shown.stdout and "rolled ns.t partition" in shown.stdout
    # a new chunk in the next streaming partition, rolled without a terminal: no bar
    ChunkWriter(env.catalog, env.catalog.table("ns.t")).write(records(range(50, 55)), Format.JSONL)
    piped = _call(env, "roll", "ns.t", "--force", terminal=False)
    assert piped.code == 0 and piped.stderr == "" and "rolled ns.t partition" in piped.stdout


def test_a_forced_roll_with_json_prints_json_only_even_on_a_terminal(env: Env) -> None:  # noqa: F811
    _table_with_chunks(env, 3)
    out = _call(env, "roll", "ns.t", "--force", "--json", terminal=True)
    assert out.code == 0 and out.stderr == ""
    (line,) = out.stdout.splitlines()
    info = json.loads(line)
    assert set(info) == {"table", "rolled", "in_progress", "open"} and info["in_progress"] == []
    (rolled,) = info["rolled"]
    assert set(rolled) == ROLLED_KEYS and rolled["chunks"] == 3 and rolled["rows"] == 15


def test_housekeep_draws_a_bar_on_a_terminal_and_prints_json_only_with_json(env: Env) -> None:  # noqa: F811
    _table_with_chunks(env, 0)
    table = env.catalog.table("ns.t")
    writer = ChunkWriter(env.catalog, table)
    long_ago = clock.now() - 3 * ChunkConfig().commit_timeout

    def died_mid_commit(key: str) -> str:
        chunk = writer.stage(writer.reserve(key), records(range(3)), Format.JSONL)
        return env.catalog.store.begin_commit(chunk, int(env.catalog.load(table).version()), now=long_ago).id

    first = died_mid_commit("died-1")
    shown = _call(env, "housekeep", terminal=True)
    assert shown.code == 0 and "finishing 1 interrupted commit(s)" in shown.stderr
    assert "interrupted commits" in shown.stdout and "finishing" not in shown.stdout
    second = died_mid_commit("died-2")
    out = _call(env, "housekeep", "--json", terminal=True)
    assert out.code == 0 and out.stderr == ""
    info = json.loads(out.stdout)
    assert set(info) == {"expired", "recovered"} and info["expired"] == []
    assert [r["chunk"] for r in info["recovered"]] == [second] != [first]
