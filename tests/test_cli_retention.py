"""``--retain`` and ``streampart expire`` from the command line (issue 30): bad input is one error
naming what is wrong and changes nothing; a dry run says what a pass would remove, the pass removes
it (checked with delta-rs, not through streampart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from metastore.catalog import Catalog
from tests.helpers import all_ids
from tests.test_cli import assert_user_error, run

SCHEMA = "id BIGINT, ts TIMESTAMP, msg STRING"


@pytest.mark.process
def test_retention_from_the_command_line(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    create = ("table", "create", "ns.t", "--schema", SCHEMA, "--time-column", "ts", "--roll-every", "1h")
    assert_user_error(
        run(wh, *create, "--retain", "30m"),
        "--retain 30m is shorter than ns.t's roll interval 1h: its partitions would expire before they",
    )
    assert run(wh, "table", "list", "--json").json() == []  # nothing made
    made = run(wh, *create, "--mode", "event-time", "--retain", "90d", "--json").json()
    assert made["retention"]["retain"] == "90d"
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(f'{{"id": {i}, "ts": "2026-11-21T0{i}:10:00Z", "msg": "m"}}\n' for i in range(6)))
    run(wh, "write", "ns.t", data, "--json").json()
    run(wh, "roll", "ns.t", "--now", "2026-11-21T07:00:00Z", "--json").json()
    run(wh, "table", "alter", "ns.t", "--retain", "3h", "--json").json()
    for bad, fragment in [
        (("table", "alter", "ns.t", "--retain", "10x"), "--retain '10x' is not a duration"),
        (("table", "alter", "ns.t", "--retain", "0s"), "--retain '0s': give a duration above 0, or none"),
        (("table", "alter", "ns.t__late", "--retain", "1d"), "table ns.t__late does not exist"),
        (("namespace", "alter", "ns", "--retain", "abc"), "--retain 'abc' is not a duration"),
        (("expire", "ns.nope"), "ns.nope"),
        (("expire", "ns.t", "--now", "yesterday"), "--now"),
    ]:
        assert_user_error(run(wh, *bad), fragment)
    run(wh, "link", "create", "other.t", "--to", "ns.t", "--json").json()
    run(wh, "link", "create", "other.s", "--to", "ns.t", "--static", "--partition", "2026-11-21T00:00:00Z",
        "--partition", "2026-11-21T05:00:00Z", "--json").json()  # fmt: skip
    assert_user_error(run(wh, "table", "alter", "other.t", "--retain", "1d"), "other.t is a link")
    assert run(wh, "table", "describe", "ns.t", "--json").json()["retention"]["retain"] == "3h"

    altered = run(wh, "table", "alter", "ns.t", "--retain", "2h", "--json").json()["retention"]
    assert altered["retain"] == "2h" and altered["would_expire"]["partitions"][0] == "2026-11-21T00:00:00Z"
    dry = run(wh, "expire", "--now", "2026-11-21T07:00:00Z", "--dry-run", "--json").json()
    assert [len(e["partitions"]) for e in dry["expired"]] == [5]  # hours 0..4 ended 2 h or more ago
    done = run(wh, "expire", "--now", "2026-11-21T07:00:00Z", "--json").json()
    assert [(e["partitions"], e["rows"]) for e in done["expired"]] == [(dry["expired"][0]["partitions"], 5)]
    catalog = Catalog.open(wh)
    try:
        assert all_ids(catalog.table("ns.t")) == [5]
    finally:
        catalog.close()
    static = run(wh, "link", "describe", "other.s", "--json").json()
    assert static["expired"] == ["2026-11-21T00:00:00Z"] and len(static["exposed"]) == 1
    assert static["source_retention"]["expired"]["partitions"] == 5
    said = " ".join(run(wh, "link", "describe", "other.s").stdout.split())
    assert "5 of its partitions expired, 1 of those this link lists: 2026-11-21T00:00:00Z" in said
    dynamic = run(wh, "table", "describe", "other.t", "--json").json()
    assert [p["value"] for p in dynamic["partitions"]] == ["2026-11-21T05:00:00Z"]
    text = run(wh, "table", "describe", "ns.t")
    assert "5 partition(s) expired by retention" in " ".join(text.stdout.split())
