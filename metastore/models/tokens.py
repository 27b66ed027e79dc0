"""API tokens: the HTTP API's bearer tokens, their scopes and permissions."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from metastore.errors import UserInputError
from metastore.models.names import check_identifier


class Permission(StrEnum):
    """What a token may do in a namespace. ``admin`` includes ``read`` and ``write``."""

    READ = "read"
    WRITE = "write"
    ADMIN = "admin"


_TOKEN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")


def check_token_name(name: str) -> str:
    """A token's name: letters, digits, ``_``, ``.``, ``-``; at most 128 characters."""
    if not _TOKEN_NAME.fullmatch(name or "") or ".." in name:
        raise UserInputError(
            f"token name {name!r} is not valid: use letters, digits, '_', '.' and '-' "
            "(not '..'), starting with a letter, digit or '_', at most 128 characters"
        )
    return name


class Scope(BaseModel):
    """``PERMISSION:NAMESPACE``, e.g. ``write:shop``; the namespace ``*`` means every namespace."""

    model_config = ConfigDict(frozen=True)

    permission: Permission
    namespace: str

    @classmethod
    def parse(cls, text: str) -> Scope:
        permission, sep, namespace = text.strip().partition(":")
        if not sep:
            raise UserInputError(f"scope {text!r} must have the form PERMISSION:NAMESPACE (e.g. write:shop)")
        try:
            perm = Permission(permission)
        except ValueError:
            raise UserInputError(
                f"scope {text!r}: permission must be one of read, write, admin; got {permission!r}"
            ) from None
        if namespace != "*":
            check_identifier(namespace, f"scope {text!r}: namespace")
        return cls(permission=perm, namespace=namespace)

    def allows(self, permission: Permission, namespace: str) -> bool:
        if self.namespace not in ("*", namespace):
            return False
        return self.permission is permission or self.permission is Permission.ADMIN

    def __str__(self) -> str:
        return f"{self.permission.value}:{self.namespace}"


class ApiToken(BaseModel):
    """A bearer token of the HTTP API. Only its SHA-256 digest is stored, never the token."""

    model_config = ConfigDict(frozen=True)

    id: int
    name: str
    token_hash: str
    scopes: tuple[Scope, ...]
    created_at: datetime
    expires_at: datetime | None = None  # None: never

    def allows(self, permission: Permission, namespace: str) -> bool:
        return any(s.allows(permission, namespace) for s in self.scopes)

    def expired(self, now: datetime) -> bool:
        """Whether the token has expired at ``now``: from then on it authenticates nothing."""
        return self.expires_at is not None and now >= self.expires_at
