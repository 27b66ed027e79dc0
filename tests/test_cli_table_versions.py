"""``streampart table history|read``: a table's Delta versions and its committed rows as of one,
without Spark, on SQLite and PostgreSQL metastores (``--metastore``), in process.

The rows are checked against an independent reader (delta-rs, ``tests.helpers.all_ids``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.delta.checkpoints import set_log_settings
from scheduler.housekeeping import Housekeeper
from tests.helpers import SCRIPT_END, all_ids, records
from tests.test_cli_chunks import CREATE, Env, env  # noqa: F401  (the fixture)


def _write(e: Env, ids: range, key: str | None = None) -> int:
    """Commit ``ids`` as one chunk of ns.t; the version it landed at."""
    result = ChunkWriter(e.catalog, e.catalog.table("ns.t")).write(records(ids), Format.JSONL, key=key)
    assert result.version is not None
    return result.version


def _lines(out: str) -> list[dict[str, Any]]:  # JSON lines: values of any JSON type
    return [json.loads(line) for line in out.splitlines() if line]


def test_history_names_each_versions_chunks_and_rolls(env: Env) -> None:  # noqa: F811
    assert env.cli("table", "create", "ns.t", *CREATE)[0] == 0
    v1, v2 = _write(env, range(3), key="a"), _write(env, range(3, 5), key="b")
    rolled = env.json("roll", "ns.t", "--force")["rolled"][0]
    history = env.json("table", "history", "ns.t")
    versions = history["versions"]
    assert history["newest"] == versions[0]["version"] and history["oldest_readable"] == 0
    assert [v["version"] for v in versions] == list(range(history["newest"], -1, -1))
    by_version = {v["version"]: v for v in versions}
    chunk_ids = {c["idempotency_key"]: c["id"] for c in env.json("chunk", "list", "ns.t")}
    assert by_version[v1]["kind"] == "chunks" and by_version[v1]["chunks"] == [chunk_ids["a"]]
    assert by_version[v2]["chunks"] == [chunk_ids["b"]] and by_version[v2]["timestamp"].endswith("Z")
    assert by_version[0]["kind"] == "create"
    roll_steps = [(v["kind"], v["roll"]) for v in versions if v["roll"]]
    assert roll_steps == [("sweep", rolled["roll"]), ("seal", rolled["roll"])]  # newest first
    assert [v["version"] for v in env.json("table", "history", "ns.t", "--limit", "2")["versions"]] == [
        history["newest"],
        history["newest"] - 1,
    ]
    code, text = env.cli("table", "history", "ns.t")
    assert code == 0 and f"roll {rolled['roll']}" in text and chunk_ids["a"] in text


def test_read_shows_the_committed_rows_of_a_version(env: Env) -> None:  # noqa: F811
    assert env.cli("table", "create", "ns.t", *CREATE)[0] == 0
    v1 = _write(env, range(3))
    _write(env, range(3, 8))
    # a chunk staged but never committed: no version shows it
    writer = ChunkWriter(env.catalog, env.catalog.table("ns.t"))
    writer.stage(writer.reserve("open"), records(range(100, 110)), Format.JSONL)
    code, out = env.cli("table", "read", "ns.t", "--json")
    assert code == 0
    rows = _lines(out)
    assert sorted(r["id"] for r in rows) == sorted(all_ids(env.catalog.table("ns.t"))) == list(range(8))
    assert set(rows[0]) == {"id", "ts", "msg", "ts_period"}
    assert str(rows[0]["ts"]).endswith("Z") and str(rows[0]["ts_period"]).endswith("Z")
    old = _lines(env.cli("table", "read", "ns.t", "--version", str(v1), "--json")[1])
    assert sorted(r["id"] for r in old) == [0, 1, 2]
    assert _lines(env.cli("table", "read", "ns.t", "--version", "0", "--json")[1]) == []
    assert len(_lines(env.cli("table", "read", "ns.t", "--limit", "4", "--json")[1])) == 4
    # rolled: the same rows, now read from the standard partition
    assert env.cli("roll", "ns.t", "--force")[0] == 0
    after = _lines(env.cli("table", "read", "ns.t", "--json", "--limit", "0")[1])
    assert sorted(r["id"] for r in after) == list(range(8))
    code, text = env.cli("table", "read", "ns.t", "--version", str(v1))
    assert code == 0 and f"ns.t at version {v1}" in text and "3 row(s)" in text and "ts_period" in text


def test_read_of_a_link_shows_what_it_admits(env: Env) -> None:  # noqa: F811
    assert env.cli("table", "create", "ns.t", *CREATE)[0] == 0
    _write(env, range(4))
    assert env.cli("link", "create", "other.t", "--to", "ns.t")[0] == 0  # dynamic: standard partitions
    assert _lines(env.cli("table", "read", "other.t", "--json")[1]) == []
    assert env.cli("roll", "ns.t", "--force")[0] == 0
    _write(env, range(4, 6))  # into the next streaming partition: not admitted
    assert sorted(r["id"] for r in _lines(env.cli("table", "read", "other.t", "--json")[1])) == [0, 1, 2, 3]
    history = env.json("table", "history", "other.t")
    assert history["source"] == "ns.t" and history["table"] == "other.t"


def test_versions_out_of_reach_are_one_clear_error(env: Env) -> None:  # noqa: F811
    assert env.cli("table", "create", "ns.t", *CREATE)[0] == 0
    table = env.catalog.table("ns.t")
    set_log_settings(env.catalog.load(table), checkpoint_interval=5, log_retention=None)
    assert env.cli("table", "alter", "ns.t", "--log-retention", "1h")[0] == 0
    first = _write(env, range(2))
    for k in range(12):
        _write(env, range(10 + k, 11 + k))
    newest = int(env.catalog.load(table).version())
    code, said = env.cli("table", "read", "ns.t", "--version", str(newest + 1))
    assert (code, said) == (1, f"error: ns.t has no version {newest + 1}: its newest is {newest}")
    # two hours on, housekeeping deletes the commit files a checkpoint covers
    old = time.time() - 2 * 3600
    for path in (Path(table.location) / "_delta_log").iterdir():
        os.utime(path, (old, old))
    assert Housekeeper(env.catalog).run().log_files_removed
    oldest = env.json("table", "history", "ns.t")["oldest_readable"]
    assert oldest > first
    code, said = env.cli("table", "read", "ns.t", "--version", str(first))
    assert code == 1 and "\n" not in said.strip()
    assert said == (
        f"error: ns.t version {first} is older than its Delta log's retention (commit files are kept "
        f"1h): the oldest version that can be read is {oldest}, the newest {newest}"
    )
    code, out = env.cli("table", "read", "ns.t", "--version", str(oldest), "--json", "--limit", "0")
    at_oldest = _lines(out)
    assert len(at_oldest) == 2 + (oldest - first)  # the first chunk's 2 rows, one row a commit after
    code, said = env.cli("table", "read", "ns.t", "--version", "-1")
    assert code == 1 and "version must be 0 or more" in said


@pytest.mark.process
def test_history_and_read_import_no_spark(env: Env) -> None:  # noqa: F811
    assert env.cli("table", "create", "ns.t", *CREATE)[0] == 0
    _write(env, range(2))
    script = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from streampart.cli import app\n"
        "base = ['--warehouse', sys.argv[1], '--metastore', sys.argv[2]]\n"
        "for args in (['table', 'history', 'ns.t'], ['table', 'read', 'ns.t', '--json']):\n"
        "    result = CliRunner().invoke(app, base + args)\n"
        "    assert result.exit_code == 0, result.output\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j', 'sqlglot')))\n"
        + SCRIPT_END
    )
    found = subprocess.run(
        [sys.executable, "-c", script, str(env.wh), env.url], capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == "[]", found.stdout + found.stderr
