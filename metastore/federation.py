"""Federation: namespaces spread over several metastore databases (issue 12, after Waggle Dance).

The metastore a process starts with (``--metastore``) is the **primary**: it needs no row (as
cluster ``default``), and it holds the registry of the other, **federated** metastores and the
route table. Each federated metastore has an **access type**, Waggle Dance's four:

- ``read-only``: its namespaces are read, never written, and none is created there;
- ``read-write-whitelist``: namespaces matching one of its ``writable`` patterns are written;
- ``read-write-create-whitelist``: those may also be created there;
- ``read-write-create``: every namespace there is written, and any may be created there.

A namespace is placed explicitly (a route, ``namespace create NS --metastore M``), by a
metastore's ``prefix``, or on the primary. Part 1 (this) records the registry and the routes;
routing the catalog's calls through them comes next.

**Secrets.** A URL is stored as the user gave it, and may not hold a password in clear text: it
names secrets instead, ``${NAME}``, resolved when a connection is opened (:func:`resolve_url`)
from the config (``[federation] secrets``) or the environment (``STREAMPART_SECRET_<NAME>``).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field

from metastore.errors import FederationAccessError, UserInputError
from metastore.models import PRIMARY, check_identifier

SECRET_ENV_PREFIX = "STREAMPART_SECRET_"

# Why 3 s: a probe at `federation add` and `federation list` is a TCP connect plus one
# round trip to a database on the same network; a reachable one answers in milliseconds, and a
# dead host must not hold a command (or, later, a health poll) for the OS's default of minutes.
PROBE_TIMEOUT_S: float = 3

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,126}$")


class AccessType(StrEnum):
    """What a federated metastore lets streampart do to its namespaces (Waggle Dance's four)."""

    READ_ONLY = "read-only"
    READ_WRITE_WHITELIST = "read-write-whitelist"
    READ_WRITE_CREATE_WHITELIST = "read-write-create-whitelist"
    READ_WRITE_CREATE = "read-write-create"

    @property
    def whitelisted(self) -> bool:
        """Its writes are limited to the namespaces its ``writable`` patterns match."""
        return self in (AccessType.READ_WRITE_WHITELIST, AccessType.READ_WRITE_CREATE_WHITELIST)


class FederatedMetastore(BaseModel):
    """A metastore of the federation as recorded in the primary (or the primary itself)."""

    model_config = ConfigDict(frozen=True)

    name: str
    url: str = Field(description="The URL as given: secrets named as ${NAME}, never a clear-text password.")
    access: AccessType
    writable: tuple[str, ...] = Field(
        default=(), description="fnmatch-style patterns of the namespaces a whitelist lets it write."
    )
    prefix: str | None = Field(None, description="Namespaces named with this prefix are placed here.")
    created_at: datetime | None = None

    @property
    def is_primary(self) -> bool:
        return self.name == PRIMARY


def primary(url: str) -> FederatedMetastore:
    """The primary: the metastore the process starts with; every namespace may be made there."""
    return FederatedMetastore(name=PRIMARY, url=url, access=AccessType.READ_WRITE_CREATE)


# -- checks ------------------------------------------------------------------------------------
def check_metastore_name(name: str) -> str:
    """A federated metastore's name: a plain identifier, and not ``primary`` (it needs no row)."""
    check_identifier(name, "metastore name")
    if name == PRIMARY:
        raise UserInputError(
            "metastore 'primary' is the one a process starts with (--metastore); it needs no "
            "registration: choose another name"
        )
    return name


def check_access(access: AccessType, writable: Sequence[str]) -> tuple[str, ...]:
    """The ``writable`` patterns ``access`` takes: one at least for a whitelist, none otherwise."""
    patterns = tuple(dict.fromkeys(p.strip() for p in writable))
    if any(not p for p in patterns):
        raise UserInputError("--writable takes a pattern of namespace names, such as sales_* (it is empty)")
    if access.whitelisted and not patterns:
        raise UserInputError(
            f"access {access} writes only the namespaces of its whitelist: give at least one "
            "--writable PATTERN (e.g. --writable 'sales_*')"
        )
    if not access.whitelisted and patterns:
        raise UserInputError(
            f"access {access} has no whitelist, so --writable does not apply; use read-write-whitelist "
            "or read-write-create-whitelist to write only some namespaces"
        )
    return patterns


def check_prefix(prefix: str | None) -> str | None:
    """A namespace prefix: the start of a namespace name (a letter or '_', then letters, digits, '_')."""
    if prefix is None:
        return None
    if not _PREFIX.fullmatch(prefix):
        raise UserInputError(
            f"prefix {prefix!r} cannot start a namespace name: use letters, digits and '_', starting "
            "with a letter or '_' (e.g. sales_)"
        )
    return prefix


def check_url(url: str) -> str:
    """A URL the registry may keep: a SQLAlchemy URL whose password, if any, is only secrets.

    Raises:
        UserInputError: the URL does not parse, or holds a password in clear text (the message
            says how to name a secret instead).
    """
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise UserInputError(f"metastore URL {url!r} is not a database URL: {exc}") from None
    passwords = [("password", parsed.password)] + [
        (key, value) for key, value in parsed.query.items() if key.lower() in ("password", "passwd")
    ]
    for where, value in passwords:
        for one in [value] if isinstance(value, str) else list(value or ()):
            if one and _PLACEHOLDER.sub("", str(one)):
                hidden = {key: "***" for key, _ in passwords[1:]}
                masked = parsed.update_query_dict(hidden).render_as_string(hide_password=True)
                raise UserInputError(
                    f"metastore URL {masked} holds a {where} in clear text, and the registry keeps URLs "
                    "for every process to read: name a secret instead, e.g. postgresql://user:${PG_PASSWORD}"
                    "@host/db, and give its value in the config ([federation] secrets = { PG_PASSWORD = "
                    '"…" }) or the environment (STREAMPART_SECRET_PG_PASSWORD)'
                )
    return url


def secret_names(url: str) -> list[str]:
    """The secrets a URL names (``${NAME}``), in order, once each."""
    return list(dict.fromkeys(_PLACEHOLDER.findall(url)))


def resolve_url(
    url: str, secrets: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """The URL to connect with: each ``${NAME}`` replaced by its secret.

    A secret comes from ``secrets`` (the config's ``[federation] secrets``) first, then from the
    environment variable ``STREAMPART_SECRET_<NAME>``. The result holds passwords: connect with
    it, never log or store it.

    Raises:
        UserInputError: a secret named by the URL is in neither place (naming both).
    """
    known = dict(secrets or {})
    env = os.environ if environ is None else environ

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in known:
            return known[name]
        if SECRET_ENV_PREFIX + name in env:
            return env[SECRET_ENV_PREFIX + name]
        raise UserInputError(
            f"secret {name} is unknown: the metastore URL names ${{{name}}}; give it in the config "
            f'([federation] secrets = {{ {name} = "…" }}) or the environment ({SECRET_ENV_PREFIX}{name})'
        )

    return _PLACEHOLDER.sub(value, url)


# -- the access rule ---------------------------------------------------------------------------
class Verdict(NamedTuple):
    """Whether an operation is allowed, and the rule that decided (for the error message)."""

    allowed: bool
    rule: str

    def check(self) -> None:
        """Raise :class:`FederationAccessError` naming the rule if it is not allowed."""
        if not self.allowed:
            raise FederationAccessError(self.rule)


def _whitelisted(metastore: FederatedMetastore, namespace: str) -> bool:
    return any(fnmatch.fnmatchcase(namespace, p) for p in metastore.writable)


def _whitelist(metastore: FederatedMetastore) -> str:
    return ", ".join(metastore.writable)


def may_read(metastore: FederatedMetastore, namespace: str) -> Verdict:
    """Every access type reads every namespace of its metastore."""
    return Verdict(True, f"metastore {metastore.name} ({metastore.access}) reads every namespace")


def may_write(metastore: FederatedMetastore, namespace: str) -> Verdict:
    """Write (tables, chunks, rolls, links) into ``namespace`` on ``metastore``."""
    m, access = metastore, metastore.access
    if access is AccessType.READ_ONLY:
        return Verdict(
            False, f"namespace {namespace} is on metastore {m.name}, which is read-only: no writes"
        )
    if access is AccessType.READ_WRITE_CREATE:
        return Verdict(True, f"metastore {m.name} ({access}) writes every namespace")
    if _whitelisted(m, namespace):
        return Verdict(True, f"namespace {namespace} is in the whitelist of metastore {m.name} ({access})")
    return Verdict(
        False,
        f"namespace {namespace} is on metastore {m.name} ({access}) but not in its whitelist "
        f"({_whitelist(m)}): no writes",
    )


def may_create(metastore: FederatedMetastore, namespace: str) -> Verdict:
    """Create the namespace ``namespace`` on ``metastore``."""
    m, access = metastore, metastore.access
    if access is AccessType.READ_WRITE_CREATE:
        return Verdict(True, f"metastore {m.name} ({access}) creates any namespace")
    if access is AccessType.READ_WRITE_CREATE_WHITELIST:
        if _whitelisted(m, namespace):
            return Verdict(
                True, f"namespace {namespace} is in the whitelist of metastore {m.name} ({access})"
            )
        return Verdict(
            False,
            f"metastore {m.name} ({access}) creates only namespaces of its whitelist ({_whitelist(m)}), "
            f"not {namespace}",
        )
    return Verdict(False, f"metastore {m.name} is {access}: no namespace is created there")


# -- reachability ------------------------------------------------------------------------------
def missing_sqlite_file(url: str) -> str | None:
    """Why a registered SQLite metastore cannot be opened without making it anew (its file or its
    directory is gone), or None (it is there, or ``url`` is not SQLite). Connecting would make an
    empty database, whose namespaces then seem to be dropped."""
    from pathlib import Path

    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    path = Path(parsed.database)
    if not path.parent.is_dir():
        return f"directory {path.parent} does not exist"
    if not path.is_file():
        return f"file {path} does not exist"
    return None


def probe(url: str, timeout_s: float = PROBE_TIMEOUT_S, *, new: bool = False) -> str | None:
    """Open one real connection to ``url`` (resolved and normalized) and run ``SELECT 1``.

    Args:
        new: The database may be made now (``federation add``): a SQLite file that does not
            exist yet is fine if its directory does. Otherwise (a health probe of a registered
            metastore) a missing SQLite file is down: connecting would make an empty one.

    Returns:
        None if it answered; otherwise the error, in one line, without the URL's password.
    """
    from pathlib import Path

    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError as exc:
        return f"not a database URL: {exc}"
    connect_args: dict[str, object] = {}
    if parsed.get_backend_name() == "sqlite":
        path = Path(parsed.database) if parsed.database and parsed.database != ":memory:" else None
        if path is not None and not path.parent.is_dir():
            return f"directory {path.parent} does not exist"
        if not new and (missing := missing_sqlite_file(url)):
            return missing
        connect_args["timeout"] = timeout_s
    elif parsed.get_backend_name() == "postgresql":
        connect_args["connect_timeout"] = max(1, round(timeout_s))
    try:
        engine = sa.create_engine(parsed, poolclass=sa.pool.NullPool, connect_args=connect_args)
    except (sa.exc.ArgumentError, ModuleNotFoundError) as exc:
        return f"not usable: {exc}"
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.DBAPIError as exc:
        return " ".join(str(exc.orig).split())
    finally:
        engine.dispose()
    return None
