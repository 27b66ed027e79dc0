"""API tokens: the HTTP API's bearer tokens, stored by digest only (never the token itself)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from metastore import schema as s
from metastore.errors import AlreadyExistsError, NotFoundError, UserInputError
from metastore.models import ApiToken, Scope, check_token_name
from metastore.store.engine import Database, _db, _now, _out


def token_from_row(row: Any) -> ApiToken:
    m = row._mapping
    return ApiToken(
        id=m["id"],
        name=m["name"],
        token_hash=m["token_hash"],
        scopes=tuple(Scope.parse(x) for x in m["scopes"]),
        created_at=_out(m["created_at"]),
        expires_at=_out(m["expires_at"]),
    )


class TokenStore(Database):
    """API tokens."""

    def create_token(
        self,
        name: str,
        token_hash: str,
        scopes: Sequence[Scope],
        now: datetime | None = None,
        expires_at: datetime | None = None,
    ) -> ApiToken:
        """Record a token by its digest (the caller hashes it; the token itself is never stored),
        valid until ``expires_at`` (None: until revoked).

        Raises:
            AlreadyExistsError: a token of that name exists (revoke it first).
        """
        check_token_name(name)
        if not scopes:
            raise UserInputError(f"token {name!r} needs at least one scope")
        now = now or _now()
        if expires_at is not None and expires_at <= now:
            raise UserInputError(f"token {name!r} would expire before it is made")
        try:
            with self.tx() as conn:
                conn.execute(
                    sa.insert(s.tokens).values(
                        name=name,
                        token_hash=token_hash,
                        scopes=[str(x) for x in scopes],
                        created_at=_db(now),
                        expires_at=_db(expires_at),
                    )
                )
                row = conn.execute(sa.select(s.tokens).where(s.tokens.c.name == name)).one()
        except IntegrityError:
            raise AlreadyExistsError(f"token {name!r} exists already; revoke it first") from None
        return token_from_row(row)

    def find_token(self, token_id: int) -> ApiToken | None:
        """The token with the id ``token_id``, or None (revoked, or never made)."""
        with self.read_tx() as conn:
            row = conn.execute(sa.select(s.tokens).where(s.tokens.c.id == token_id)).first()
        return None if row is None else token_from_row(row)

    def find_token_by_hash(self, token_hash: str) -> ApiToken | None:
        """The token whose digest is ``token_hash``, or None (unknown or revoked)."""
        with self.read_tx() as conn:
            row = conn.execute(sa.select(s.tokens).where(s.tokens.c.token_hash == token_hash)).first()
        return None if row is None else token_from_row(row)

    def list_tokens(self) -> list[ApiToken]:
        with self.read_tx() as conn:
            rows = conn.execute(sa.select(s.tokens).order_by(s.tokens.c.name)).all()
        return [token_from_row(r) for r in rows]

    def revoke_token(self, name: str) -> ApiToken:
        """Delete the token ``name``: from then on it authenticates nothing.

        Raises:
            NotFoundError: no token has that name.
        """
        with self.tx() as conn:
            row = conn.execute(sa.select(s.tokens).where(s.tokens.c.name == name)).first()
            if row is None or not conn.execute(sa.delete(s.tokens).where(s.tokens.c.id == row.id)).rowcount:
                raise NotFoundError(f"token {name!r} does not exist")
        return token_from_row(row)
