"""API tokens in the metastore (migration 0003), on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from metastore.errors import AlreadyExistsError, NotFoundError, UserInputError
from metastore.models import Permission, Scope
from metastore.store import Metastore
from tests.helpers import downgraded

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def test_a_token_is_found_by_its_digest_until_revoked(metastore_url: str) -> None:
    store = Metastore(metastore_url)
    try:
        scopes = [Scope.parse("write:shop"), Scope.parse("read:shop")]
        made = store.create_token("loader", digest("secret-1"), scopes, now=T0)
        assert made.name == "loader" and made.created_at == T0 and made.scopes == tuple(scopes)
        found = store.find_token_by_hash(digest("secret-1"))
        assert found == made
        assert store.find_token_by_hash(digest("secret-2")) is None
        # the token itself is nowhere in the database, only its digest
        with store.tx() as conn:
            cells = [str(v) for row in conn.execute(sa.select(sa.text("*")).select_from(sa.text("sp_tokens")))
                     for v in row]  # fmt: skip
        assert not any("secret-1" in c for c in cells) and digest("secret-1") in cells
        assert [t.name for t in store.list_tokens()] == ["loader"]
        assert store.revoke_token("loader").name == "loader"
        assert store.find_token_by_hash(digest("secret-1")) is None
        with pytest.raises(NotFoundError, match="'loader' does not exist"):
            store.revoke_token("loader")
        # the name is free again after revocation
        store.create_token("loader", digest("secret-3"), scopes)
        assert store.find_token_by_hash(digest("secret-3")) is not None
    finally:
        store.close()


def test_names_and_digests_are_unique_and_names_are_checked(metastore_url: str) -> None:
    store = Metastore(metastore_url)
    try:
        store.create_token("a", digest("x"), [Scope.parse("read:*")])
        with pytest.raises(AlreadyExistsError, match="'a' exists"):
            store.create_token("a", digest("y"), [Scope.parse("read:*")])
        with pytest.raises(AlreadyExistsError):
            store.create_token("b", digest("x"), [Scope.parse("read:*")])
        for bad in ("", "../x", "a/b", "x" * 129, "-lead"):
            with pytest.raises(UserInputError, match="token name"):
                store.create_token(bad, digest(bad + "z"), [Scope.parse("read:*")])
        with pytest.raises(UserInputError, match="at least one scope"):
            store.create_token("c", digest("c"), [])
        assert [t.name for t in store.list_tokens()] == ["a"]
    finally:
        store.close()


@pytest.mark.parametrize(
    "scope, permission, namespace, allowed",
    [
        ("write:shop", Permission.WRITE, "shop", True),
        ("write:shop", Permission.READ, "shop", False),  # write does not imply read
        ("write:shop", Permission.WRITE, "other", False),
        ("admin:shop", Permission.READ, "shop", True),  # admin implies read and write
        ("admin:shop", Permission.WRITE, "shop", True),
        ("read:*", Permission.READ, "anything", True),
        ("read:*", Permission.WRITE, "anything", False),
    ],
)
def test_scopes(scope: str, permission: Permission, namespace: str, allowed: bool) -> None:
    assert Scope.parse(scope).allows(permission, namespace) is allowed


@pytest.mark.parametrize(
    "text, message",
    [
        ("shop", "PERMISSION:NAMESPACE"),
        ("delete:shop", "permission must be one of"),
        ("read:../etc", "contains a path separator"),
        ("read:a..b", "contains '..'"),
        ("read:", "namespace is empty"),
    ],
)
def test_bad_scopes_are_refused_naming_the_fault(text: str, message: str) -> None:
    with pytest.raises(UserInputError, match=message.replace("(", r"\(")):
        Scope.parse(text)


def test_migrating_from_0002_adds_the_tokens_table_and_keeps_data(metastore_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    from metastore.store.engine import MIGRATIONS

    old = Metastore(metastore_url, migrate=False)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with old.tx() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0002")
    assert old.acquire_lease("roll", "a", timedelta(seconds=10), now=T0) is not None
    with old.tx() as conn:
        assert not sa.inspect(conn).has_table("sp_tokens")
    old.close()
    new = Metastore(metastore_url)  # migrates to head
    try:
        lease = new.get_lease("roll")
        assert lease is not None and lease.holder == "a"
        new.create_token("t", digest("t"), [Scope.parse("admin:*")])
        token = new.find_token_by_hash(digest("t"))
        assert token is not None and token.allows(Permission.WRITE, "ns")
    finally:
        new.close()


def test_migration_0004_adds_chunk_digests_and_keeps_every_chunk(metastore_url: str, tmp_path: Path) -> None:
    """A database at 0003 (made here by downgrading) upgrades with its chunks intact."""

    from metastore.catalog import Catalog
    from tests.fixtures import make_table

    catalog = Catalog.open(tmp_path / "wh", metastore_url)
    table = make_table(catalog)
    chunk = catalog.store.reserve_chunk(table.id, "old-token", timedelta(hours=1))
    catalog.close()
    with downgraded(metastore_url, "0003") as conn:
        assert "content_digest" not in {c["name"] for c in sa.inspect(conn).get_columns("sp_chunks")}
    new = Metastore(metastore_url)  # migrates to head
    try:
        again = new.find_chunk_by_key(table.id, "old-token")
        assert again is not None and again.id == chunk.id and again.content_digest is None
    finally:
        new.close()
