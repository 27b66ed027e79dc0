"""Links through Spark (issue 10; invariants 10 and 11): a link reads its source's own files at
one pinned version of the source, exactly the partitions it admits, never a copy.

Checked against delta-rs reading the source's log on its own, version by version, and while
writer processes commit and a real roll daemon rolls the source every two seconds.
"""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore import clock
from metastore.catalog import Catalog
from metastore.errors import IsolationError, NotFoundError, UserInputError
from metastore.links import LinkMode, LinkSpec
from metastore.models import TableName
from scheduler.roll import Roller
from streampart.query import read_table, run_sql
from tests.fixtures import make_table
from tests.helpers import records, worker_call
from tests.scheduler.helpers import start_daemon

pytestmark = pytest.mark.spark


# Alone, and as the primary of a federation where a (m1), b (m2), c and iso (m3) live elsewhere:
# links across metastores, read by Spark through the router (tests.fixtures.federate).
FEDERATED = pytest.mark.parametrize("sqlite_catalog", ["single", "federated"], indirect=True)


def link(catalog: Catalog, name: str, to: str, **kw: object) -> None:
    catalog.links.create(LinkSpec(name=TableName.parse(name), source=TableName.parse(to), **kw))


def ids_at(location: str, version: int, standard_only: bool) -> list[int]:
    """The ids of one version of a table, read from its Delta log and Parquet files alone."""
    from deltalake import DeltaTable

    adds = pa.table(DeltaTable(location, version=version).get_add_actions(flatten=True))
    out: list[int] = []
    for path in adds.column("path").to_pylist():
        if standard_only and path.startswith("_staging/"):
            continue
        on_disk = Path(location) / urllib.parse.unquote(path)  # the log holds URI-encoded paths
        out += pq.read_table(on_disk, columns=["id"]).column("id").to_pylist()
    return sorted(out)


def ids(df) -> list[int]:
    return sorted(r["id"] for r in df.select("id").collect())


@FEDERATED
def test_a_dynamic_link_shows_a_partition_from_the_version_that_swept_it(spark, sqlite_catalog) -> None:
    """At every version of the source: the dynamic link shows exactly the swept (standard)
    partitions' rows — none at the seal, all at the sweep, never twice — and a link with
    --include-streaming shows exactly every committed row."""
    cat = sqlite_catalog
    source = make_table(cat, "b.t")
    link(cat, "a.l", "b.t")
    link(cat, "c.s", "b.t", include_streaming=True)
    w = ChunkWriter(cat, source)
    for k in range(3):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL, key=f"before-{k}")
    Roller(cat).roll_table(source, force=True)
    [rolled] = cat.home(source).store.list_rolls(source.id)
    for k in range(2):
        w.write(records(range(100 + k * 10, 110 + k * 10)), Format.JSONL, key=f"after-{k}")
    newest = int(cat.load(source).version())
    assert rolled.seal_version is not None and rolled.sweep_version == rolled.seal_version + 1
    for v in range(newest + 1):
        dynamic = ids(read_table(spark, cat, "a.l", version=v))
        assert dynamic == ids_at(source.location, v, standard_only=True), v
        assert dynamic == (list(range(30)) if v >= rolled.sweep_version else []), v
        assert ids(read_table(spark, cat, "c.s", version=v)) == ids_at(source.location, v, False), v


QUERY = """
    SELECT 'l1' AS side, id, input_file_name() AS f FROM l
    UNION ALL SELECT 'l2', id, input_file_name() FROM t@b
    UNION ALL SELECT 's', id, input_file_name() FROM c.s
    UNION ALL SELECT 'src', id, input_file_name() FROM b.t
"""


def test_links_read_one_version_of_their_source_while_writers_commit_and_a_daemon_rolls(
    spark, catalog, tmp_path
) -> None:
    """One query reads a dynamic link twice (by its local name and as t@b), a link with
    --include-streaming, and the source itself: all at one version of the source, so the
    link's rows are exactly the source's rows in swept partitions, and the streaming link's
    all of them — while writer processes commit and a roll daemon rolls every two seconds."""
    source = make_table(catalog, "b.t", roll_every="2s")
    link(catalog, "a.l", "b.t")
    link(catalog, "c.s", "b.t", include_streaming=True)
    stop = tmp_path / "stop"  # the writers commit until it exists (however fast commits are)
    writers = [
        subprocess.Popen(
            **worker_call(
                catalog,
                source,
                "writer",
                "--writer",
                str(k),
                "--rows",
                "5",
                "--until",
                str(stop),
                "--interval",
                "0.1",
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for k in range(2)
    ]
    daemon = start_daemon(catalog, tmp_path / "daemon.log")
    seen: list[tuple[int, int]] = []

    def swept_rolls() -> int:
        return sum(r.sweep_version is not None for r in catalog.store.list_rolls(source.id))

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (len(seen) >= 3 and swept_rolls() >= 2 and seen[-1][0] > 0):
            assert all(w.poll() is None for w in writers), "a writer stopped early"
            rows = run_sql(spark, catalog, QUERY, namespace="a").collect()
            by: dict[str, list[tuple[int, str]]] = {"l1": [], "l2": [], "s": [], "src": []}
            for r in rows:
                by[r["side"]].append((r["id"], r["f"]))
            src = sorted(i for i, _ in by["src"])
            swept = sorted(i for i, f in by["src"] if "/_staging/" not in f)
            l1, l2 = sorted(i for i, _ in by["l1"]), sorted(i for i, _ in by["l2"])
            assert len(set(src)) == len(src), "the source shows a row twice"
            assert l1 == l2 == swept, "the link differs from the source's standard partitions"
            assert sorted(i for i, _ in by["s"]) == src, "the streaming link differs from the source"
            assert all(source.location in f for side in by.values() for _, f in side), "a copy was read"
            seen.append((len(l1), len(src)))
    finally:
        stop.touch()
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        for w in writers:
            _, err = w.communicate(timeout=120)
            assert w.returncode == 0, err
    assert [a for a, _ in seen] == sorted(a for a, _ in seen), "the link's rows went backwards"
    assert [b for _, b in seen] == sorted(b for _, b in seen), "the source's rows went backwards"
    assert len(seen) >= 3 and swept_rolls() >= 2 and seen[-1][0] > 0, (seen, swept_rolls())


def at(instant: datetime) -> clock.SystemClock:
    """A clock that reads ``instant`` now (and runs on from there)."""
    return clock.SystemClock(instant - datetime.now(UTC))


@FEDERATED
def test_static_links_retention_and_partitions_added_and_dropped(spark, sqlite_catalog) -> None:
    cat = sqlite_catalog
    hour = timedelta(hours=1)
    start = datetime(2026, 11, 21, 10, 1, tzinfo=UTC)
    with clock.use(at(start)):
        source = make_table(cat, "b.t", roll_every="1h")
    w, roller = ChunkWriter(cat, source), Roller(cat)
    for k in range(3):  # three partitions, 10:00, 11:00 and 12:00, each rolled at its end
        with clock.use(at(start + k * hour)):
            w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL, key=f"p{k}")
        with clock.use(at(start + (k + 1) * hour)):
            roller.roll_table(source)
    parts = [p.value for p in cat.partitions(source)]
    assert [p.hour for p in parts] == [10, 11, 12, 13]
    link(cat, "a.st", "b.t", mode=LinkMode.STATIC, partitions=(parts[0], parts[2], parts[3]))
    assert ids(read_table(spark, cat, "a.st")) == list(range(10)) + list(range(20, 30))  # 13:00 streams
    cat.links.set_partitions(
        cat.home("a").store.get_link(TableName.parse("a.st")), add=[parts[1]], drop=[parts[0]]
    )
    assert ids(read_table(spark, cat, "a.st")) == list(range(10, 30))
    # retention 90 minutes: at 13:01 the partitions that ended after 11:31 show (11:00 and 12:00)
    link(cat, "a.k", "b.t", retention=timedelta(minutes=90))
    with clock.use(at(start + 3 * hour)):
        assert ids(read_table(spark, cat, "a.k")) == list(range(10, 30))
    with clock.use(at(start + 5 * hour)):
        assert ids(read_table(spark, cat, "a.k")) == []


@FEDERATED
def test_an_isolated_namespace_reads_its_own_tables_and_links_only(spark, sqlite_catalog) -> None:
    cat = sqlite_catalog
    b = make_table(cat, "b.t")
    ChunkWriter(cat, b).write(records(range(5)), Format.JSONL, key="x")
    own = make_table(cat, "a.own")
    ChunkWriter(cat, own).write(records(range(100, 103)), Format.JSONL, key="y")
    cat.namespaces.create("iso", isolated=True)
    make_table(cat, "iso.mine")
    link(cat, "iso.l", "b.t", include_streaming=True)
    with pytest.raises(IsolationError, match=r"namespace iso is isolated.*link create iso\.t --to b\.t"):
        run_sql(spark, cat, "SELECT * FROM b.t", namespace="iso")
    with pytest.raises(IsolationError, match=r"not a\.own"):
        run_sql(spark, cat, "USE iso; SELECT count(*) FROM l JOIN a.own USING (id)")
    with pytest.raises(NotFoundError, match=r"namespace iso has no link to a\.own"):
        run_sql(spark, cat, "SELECT * FROM own@a", namespace="iso")
    with pytest.raises(UserInputError, match="USE a contradicts --namespace iso"):
        run_sql(spark, cat, "USE a; SELECT 1", namespace="iso")
    got = run_sql(
        spark, cat, "USE iso; SELECT count(*) AS n FROM l JOIN t@b USING (id) JOIN iso.mine m ON false"
    )
    assert got.collect()[0]["n"] == 0
    assert run_sql(spark, cat, "SELECT count(*) AS n FROM t@b", namespace="iso").collect()[0]["n"] == 5
    # a namespace that is not isolated keeps two-part access to any table
    assert run_sql(spark, cat, "SELECT count(*) AS n FROM b.t", namespace="a").collect()[0]["n"] == 5
