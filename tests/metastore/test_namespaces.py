"""Namespaces and links in the metastore and the catalog (issue 10), on SQLite and PostgreSQL, alone
and federated (``tests.fixtures.routed_catalog``: ``a`` and ``b`` in two other metastores, so links
cross metastores).

Names (one name space per namespace, tables and links alike), resolution (``T``, ``T@B``,
isolation, dangling links), the quota ledger against an independent count of the Delta logs,
and the migration of a warehouse made before namespaces existed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.delta.files import LiveFile, file_exists
from metastore.errors import (
    AlreadyExistsError,
    DanglingLinkError,
    IsolationError,
    NotFoundError,
    QuotaExceededError,
    ReadOnlyLinkError,
    UserInputError,
)
from metastore.links import Link, LinkMode, LinkSpec, PartitionRange, Reference
from metastore.models import ChunkState, LateDataPolicy, Mode, TableName
from metastore.namespaces import format_size, parse_size
from metastore.store import Metastore
from metastore.usage import namespace_usage
from scheduler.roll import Roller
from tests.fixtures import home, make_table, routed_catalog  # noqa: F401
from tests.helpers import downgraded, records

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
H = timedelta(hours=1)


def _links(store: Metastore) -> list[Link]:
    return store.list_links()


def link(catalog: Catalog, name: str, to: str, **kw: object) -> Link:
    return catalog.links.create(LinkSpec(name=TableName.parse(name), source=TableName.parse(to), **kw))


def delta_bytes(location: str) -> tuple[int, int]:
    """(standard, streaming) bytes of a table's newest version, read by delta-rs alone."""
    import pyarrow as pa
    from deltalake import DeltaTable

    adds = pa.table(DeltaTable(location).get_add_actions(flatten=True))
    standard = streaming = 0
    for path, size in zip(
        adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist(), strict=True
    ):
        if path.startswith("_staging/"):
            streaming += size
        else:
            standard += size
    return standard, streaming


# -- namespaces ------------------------------------------------------------------------------
def test_namespaces_are_made_on_first_use_or_explicitly(catalog) -> None:
    make_table(catalog, "sales.orders", dead_letter=True)
    assert [n.name for n in home(catalog, "sales").list_namespaces()] == ["sales"]
    home(catalog, "team").create_namespace(
        "team", isolated=True, quota_bytes=parse_size("1GiB"), description="d"
    )
    with pytest.raises(AlreadyExistsError, match="namespace team exists"):
        home(catalog, "team").create_namespace("team")
    team = home(catalog, "team").get_namespace("team")
    assert (team.isolated, team.quota_bytes, team.description) == (True, 1024**3, "d")
    # namespaces.require_explicit: a table in a missing namespace is refused, naming the command
    with pytest.raises(NotFoundError, match="streampart namespace create nope"):
        make_table_explicit(catalog, "nope.t")
    assert (
        home(catalog, "nope").find_namespace("nope") is None
        and home(catalog, "nope").find_table(TableName.parse("nope.t")) is None
    )
    make_table_explicit(catalog, "team.t")  # an existing one is fine
    changed = home(catalog, "team").alter_namespace("team", quota_bytes=None, isolated=False)
    assert (changed.quota_bytes, changed.isolated, changed.description) == (None, False, "d")


def make_table_explicit(catalog: Catalog, name: str) -> None:
    from metastore.models import TableSpec, parse_schema

    columns = parse_schema("id BIGINT, ts TIMESTAMP")
    spec = TableSpec(name=TableName.parse(name), columns=columns, time_column="ts", roll_every=H)
    catalog.create_table(spec, create_namespace=False)


def test_a_namespace_is_dropped_only_when_empty(catalog) -> None:
    make_table(catalog, "b.t")
    link(catalog, "a.l", "b.t")
    with pytest.raises(UserInputError, match=r"namespace a is not empty: it holds a\.l"):
        home(catalog, "a").drop_namespace("a")
    assert home(catalog, "b").namespace_members("b") == (["b.t"], [])
    home(catalog, "a").drop_link(home(catalog, "a").get_link(TableName.parse("a.l")))
    home(catalog, "a").drop_namespace("a")
    assert home(catalog, "a").find_namespace("a") is None


@pytest.mark.parametrize(
    "text, says",
    [
        ("500", None),
        ("1.5KiB", None),
        ("2GB", None),
        ("10G", None),
        ("ten", "is not a size"),
        ("5XB", "is not a size"),
        ("", "is not a size"),
    ],
)
def test_sizes(text: str, says: str | None) -> None:
    if says is None:
        assert parse_size(text) >= 0
    else:
        with pytest.raises(UserInputError, match=says):
            parse_size(text)
    assert (
        parse_size("1.5KiB") == 1536 and parse_size("2GB") == 2_000_000_000 and format_size(1536) == "1.5 KiB"
    )


# -- links: names and refusals ---------------------------------------------------------------
def test_tables_and_links_share_one_name_space(catalog) -> None:
    make_table(catalog, "b.t")
    make_table(catalog, "a.own")
    with pytest.raises(AlreadyExistsError, match=r"a\.own is a table already"):
        link(catalog, "a.own", "b.t")
    link(catalog, "a.l", "b.t")
    with pytest.raises(AlreadyExistsError, match=r"link a\.l exists"):
        link(catalog, "a.l", "b.t")
    with pytest.raises(AlreadyExistsError, match=r"a\.l is a link \(to b\.t\)"):
        make_table(catalog, "a.l")


# Each bad link is refused with one clear error, and nothing is recorded.
BAD_LINKS = [
    ({"name": "a.l", "to": "b.missing"}, NotFoundError, r"table b\.missing does not exist"),
    ({"name": "c.l2", "to": "a.l"}, UserInputError, r"a\.l is a link \(to b\.t\); link to b\.t itself"),
    ({"name": "b.back", "to": "b.t"}, UserInputError, "a link imports a table of another namespace"),
    ({"name": "a.x/y", "to": "b.t"}, UserInputError, "path separator"),
    ({"name": "a...y", "to": "b.t"}, UserInputError, r"NAMESPACE\.TABLE|'\.\.'"),
    ({"name": "a.x'y", "to": "b.t"}, UserInputError, "quote"),
    ({"name": "a.x@y", "to": "b.t"}, UserInputError, "not a valid name"),
    ({"name": "a.z", "to": "b.t@c"}, UserInputError, "not a valid name"),
]


@pytest.mark.parametrize(
    "bad, error, says", BAD_LINKS, ids=[b[0]["name"] + "->" + b[0]["to"] for b in BAD_LINKS]
)
def test_bad_links_are_refused_and_change_nothing(catalog, bad, error, says) -> None:
    make_table(catalog, "b.t")
    link(catalog, "a.l", "b.t")
    before = [x.model_dump() for x in catalog.router.fan_out(_links).merged()]
    with pytest.raises(error, match=says):
        link(catalog, bad["name"], bad["to"])
    assert [x.model_dump() for x in catalog.router.fan_out(_links).merged()] == before


def test_a_cycle_cannot_be_made(catalog) -> None:
    """Links point at tables only: a.l → b.t exists, so b.m → a.l (which would close a loop) is refused."""
    make_table(catalog, "b.t")
    link(catalog, "a.l", "b.t")
    with pytest.raises(UserInputError, match=r"a\.l is a link"):
        link(catalog, "b.m", "a.l")


def test_static_links_list_period_starts_only(catalog) -> None:
    make_table(catalog, "b.t", roll_every="1h")
    with pytest.raises(
        UserInputError, match=r"2026-11-21T10:30:00Z is not the start .* did you mean 2026-11-21T10:00:00Z"
    ):
        link(catalog, "a.s", "b.t", mode=LinkMode.STATIC, partitions=(T0 + H / 2,))
    with pytest.raises(UserInputError, match="add --static"):
        link(catalog, "a.s", "b.t", partitions=(T0,))
    s = link(catalog, "a.s", "b.t", mode=LinkMode.STATIC, partitions=(T0,),
             range=PartitionRange.parse("2026-11-21T12:00Z..2026-11-21T14:00Z"))  # fmt: skip
    assert s.partitions == (T0, T0 + 2 * H, T0 + 3 * H) and s.range is None
    s = catalog.links.set_partitions(s, add=[T0 + 5 * H], drop=[T0])
    assert s.partitions == (T0 + 2 * H, T0 + 3 * H, T0 + 5 * H)
    with pytest.raises(UserInputError, match="is not the start"):
        catalog.links.set_partitions(s, add=[T0 + timedelta(minutes=1)])
    dynamic = link(catalog, "a.d", "b.t")
    with pytest.raises(UserInputError, match="is dynamic"):
        catalog.links.set_partitions(dynamic, add=[T0])


def test_links_are_read_only_and_a_linked_source_is_dropped_only_with_force(catalog) -> None:
    source = make_table(catalog, "b.t")
    link(catalog, "a.l", "b.t")
    with pytest.raises(ReadOnlyLinkError, match=r"a\.l is a link \(to b\.t\), and links are read-only"):
        catalog.table("a.l")  # what every write, roll and drop looks its table up with
    with pytest.raises(UserInputError, match=r"table b\.t is linked by a\.l"):
        catalog.drop_table(source)
    resolved = catalog.resolve("a.l")
    assert resolved.table.id == source.id and resolved.table.uid == source.uid
    assert resolved.table.metastore == catalog.router.metastore_of("b")  # federated: m2, the link in m1
    assert catalog.describe(resolved)["link"]["source"] == "b.t"
    assert resolved.link is not None and catalog.links.info(resolved.link)["dangling"] is False
    catalog.drop_table(source, force=True)
    make_table(catalog, "b.t")  # a new table of the same name is not the link's source
    with pytest.raises(DanglingLinkError, match=r"link a\.l: its source b\.t was dropped"):
        catalog.resolve("a.l")
    left = home(catalog, "a").get_link(TableName.parse("a.l"))
    assert left.source_table_id is None and catalog.links.info(left)["dangling"] is True


# -- resolution ------------------------------------------------------------------------------
def test_names_resolve_in_a_namespace_and_isolation_refuses_other_namespaces(catalog) -> None:
    bt = make_table(catalog, "b.t")
    at = make_table(catalog, "a.own")
    link(catalog, "a.l", "b.t")
    assert catalog.resolve("b.t").table.id == bt.id  # outside any namespace: two-part names
    assert catalog.resolve("own", "a").table.id == at.id
    assert str(catalog.resolve("l", "a").name) == "a.l"
    via = catalog.resolve("t@b", "a")
    assert str(via.name) == "a.l" and via.link is not None and via.table.id == bt.id
    assert catalog.resolve("b.t", "a").table.id == bt.id  # a is not isolated (yet)
    home(catalog, "a").alter_namespace("a", isolated=True)
    with pytest.raises(
        IsolationError, match=r"namespace a is isolated.*streampart link create a\.t --to b\.t"
    ):
        catalog.resolve("b.t", "a")
    assert str(catalog.resolve("a.l", "a").name) == "a.l" and str(catalog.resolve("t@b", "a").name) == "a.l"
    with pytest.raises(NotFoundError, match=r"namespace a has no link to b\.zz; create one"):
        catalog.resolve("zz@b", "a")
    with pytest.raises(UserInputError, match="names a link of the namespace the query runs in"):
        catalog.resolve("t@b")
    with pytest.raises(UserInputError, match=r"NAMESPACE\.TABLE, or run the query in a namespace"):
        catalog.resolve("own")
    link(catalog, "a.l2", "b.t")
    with pytest.raises(UserInputError, match=r"t@b is ambiguous: namespace a links b\.t as a\.l, a\.l2"):
        catalog.resolve("t@b", "a")


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("ns.t", Reference("ns", "t")),
        ("t", Reference(None, "t")),
        ("t@b", Reference(None, "t", "b")),
        ("a.t@b", UserInputError),
        ("t@b@c", UserInputError),
        ("t@", UserInputError),
        ("../x", UserInputError),
    ],
)
def test_references(text: str, parsed: object) -> None:
    if isinstance(parsed, Reference):
        assert Reference.parse(text) == parsed
    else:
        with pytest.raises(UserInputError):
            Reference.parse(text)


# -- which partitions a link admits ----------------------------------------------------------
def files(*spec: tuple[datetime, bool]) -> list[LiveFile]:
    return [
        LiveFile(f"_staging/{k}.parquet" if staged else f"p={k}/f.parquet", value, 10, 1)
        for k, (value, staged) in enumerate(spec)
    ]


def admitted(lk: Link, source, live: list[LiveFile], now: datetime) -> list[tuple[datetime, bool]]:
    return [(f.partition, f.staged) for f in lk.filter(live, source, now)]


def test_what_each_kind_of_link_admits(catalog) -> None:
    source = make_table(catalog, "b.t", roll_every="1h")
    live = files((T0, False), (T0 + H, False), (T0 + 2 * H, True))  # two standard, one streaming
    now = T0 + 3 * H
    dynamic = link(catalog, "a.d", "b.t")
    assert admitted(dynamic, source, live, now) == [(T0, False), (T0 + H, False)]
    streaming = link(catalog, "a.s", "b.t", include_streaming=True)
    assert admitted(streaming, source, live, now) == [(T0, False), (T0 + H, False), (T0 + 2 * H, True)]
    ranged = link(catalog, "a.r", "b.t", range=PartitionRange.parse("2026-11-21T11:00Z.."))
    assert admitted(ranged, source, live, now) == [(T0 + H, False)]
    # retention 90 min at 13:00: the 10:00 partition ended at 11:00, longer ago; 11:00 ended at 12:00
    kept = link(catalog, "a.k", "b.t", retention=timedelta(minutes=90), include_streaming=True)
    assert admitted(kept, source, live, now) == [(T0 + H, False), (T0 + 2 * H, True)]
    static = link(catalog, "a.st", "b.t", mode=LinkMode.STATIC, partitions=(T0 + 2 * H, T0 + 5 * H))
    assert admitted(static, source, live, now) == []  # listed, but still streaming
    static_live = link(
        catalog, "a.sl", "b.t", mode=LinkMode.STATIC, partitions=(T0 + 2 * H,), include_streaming=True
    )
    assert admitted(static_live, source, live, now) == [(T0 + 2 * H, True)]


# -- capacity --------------------------------------------------------------------------------
def test_usage_and_the_quota_ledger_agree_with_the_delta_logs(catalog) -> None:
    t = make_table(catalog, "b.t", dead_letter=True)
    w = ChunkWriter(catalog, t)
    for k in range(3):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL, key=f"c{k}")
    w.write(records(range(100, 105)) + b"not json\n", Format.JSONL, key="bad")  # one dead letter
    rolled = Roller(catalog).roll_table(t, force=True)
    assert [r.rows for r in rolled] == [
        35
    ]  # 3 chunks of 10 and 5 good rows; in b's metastore (m2 if federated)
    w.write(records(range(200, 210)), Format.JSONL, key="after")
    ev = make_table(catalog, "b.ev", mode=Mode.EVENT_TIME, late_data=LateDataPolicy.DIVERT)
    two_periods = records(range(5), "2026-11-21T10:15:00Z") + records(range(5, 9), "2026-11-21T11:15:00Z")
    ChunkWriter(catalog, ev).write(two_periods, Format.JSONL, key="e")
    link(catalog, "a.l", "b.t", include_streaming=True)
    usage = namespace_usage(catalog, "b")
    tables = {
        Path(x.location).name: delta_bytes(x.location)
        for x in home(catalog, "b").list_tables()
        if x.name.namespace == "b"
    }
    assert {h.name.split(".")[1]: (h.standard_bytes, h.streaming_bytes) for h in usage.owned} == tables
    assert {"t", "t__dead_letter", "ev", "ev__late"} <= set(tables)
    total = sum(a + b for a, b in tables.values())
    assert usage.owned_bytes == total > 0 and usage.linked_bytes == 0
    assert home(catalog, "b").committed_bytes("b") == total  # the ledger the quota checks
    linked = namespace_usage(catalog, "a")
    assert linked.owned_bytes == 0 and linked.linked_bytes == sum(
        delta_bytes(t.location)
    )  # shown, not charged


def test_a_write_past_the_quota_is_refused_whole_and_leaves_nothing(catalog) -> None:
    t = make_table(catalog, "b.t")
    w = ChunkWriter(catalog, t)
    w.write(records(range(10)), Format.JSONL, key="fits")
    used = home(catalog, "b").committed_bytes("b")
    home(catalog, "b").alter_namespace("b", quota_bytes=used + 100)  # less than any chunk
    with pytest.raises(
        QuotaExceededError, match=r"namespace b is over its quota: it holds .* this chunk adds"
    ):
        w.write(records(range(10, 20)), Format.JSONL, key="over")
    refused = home(catalog, "b").find_chunk_by_key(t.id, "over")
    assert refused is not None and refused.state is ChunkState.ABORTED and "quota" in (refused.error or "")
    assert all(not file_exists(t, f.path) for f in refused.files)
    assert home(catalog, "b").committed_bytes("b") == used == sum(delta_bytes(t.location))
    home(catalog, "b").alter_namespace("b", quota_bytes=None)
    assert w.write(records(range(10, 20)), Format.JSONL, key="later").rows == 10


def test_migrating_from_0004_adds_namespaces_and_the_ledger(metastore_url: str, tmp_path: Path) -> None:
    """A warehouse made before namespaces (0004, made here by downgrading) upgrades with every
    namespace its tables use, and each open partition's bytes as its committed chunks hold them."""

    catalog = Catalog.open(tmp_path / "wh", metastore_url)
    t = make_table(catalog, "sales.orders")
    make_table(catalog, "ops.events", mode=Mode.EVENT_TIME)
    w = ChunkWriter(catalog, t)
    w.write(records(range(10)), Format.JSONL, key="a")
    Roller(catalog).roll_table(t, force=True)
    w.write(records(range(10, 30)), Format.JSONL, key="b")
    ev = catalog.table("ops.events")
    two_periods = records(range(3), "2026-11-21T10:15:00Z") + records(range(3, 5), "2026-11-21T11:15:00Z")
    ChunkWriter(catalog, ev).write(two_periods, Format.JSONL, key="e")
    expected = {n: catalog.store.committed_bytes(n) for n in ("sales", "ops")}
    assert expected["sales"] == sum(delta_bytes(t.location)) and expected["ops"] == sum(
        delta_bytes(ev.location)
    )
    catalog.close()
    with downgraded(metastore_url, "0004") as conn:
        assert not sa.inspect(conn).has_table("sp_namespaces")
    new = Metastore(metastore_url)  # migrates to head
    try:
        assert [n.name for n in new.list_namespaces()] == ["ops", "sales"]
        assert {n: new.committed_bytes(n) for n in ("sales", "ops")} == expected
        assert [c.state for c in new.list_chunks(t.id)] == [ChunkState.COMMITTED] * 2
    finally:
        new.close()
