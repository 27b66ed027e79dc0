"""The HTTP API's bodies for the metastore federation (``/v1/federation/…``): a metastore as the
registry holds it, a metastore to add or alter, a namespace's route and the route table."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MetastoreInfo(BaseModel):
    """A metastore of the federation, as ``streampart federation describe --json`` shows it."""

    metastore: str = Field(description="Its name; ``primary`` is the server's own --metastore.")
    url: str = Field(description="Its URL as registered: secrets named as ${NAME}, never their values.")
    access: str = Field(
        description="read-only, read-write-whitelist, read-write-create-whitelist or read-write-create."
    )
    writable: list[str] = Field(description="The namespace patterns a whitelist writes.")
    prefix: str | None = Field(description="Namespaces named with this prefix are placed there.")
    routes: list[str] = Field(description="The namespaces routed there explicitly.")
    created_at: str | None
    health: str | None = Field(None, description="up or down: a live probe of the server's connection to it.")
    error: str | None = Field(None, description="Why it is down.")


class AddMetastore(BaseModel):
    """A metastore to register (``streampart federation add``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128, description="A plain identifier, not `primary`.")
    url: str = Field(
        min_length=1,
        description="sqlite:///… or postgresql://user:${SECRET}@host/db: a password only as a secret, "
        "resolved by every process from its config or STREAMPART_SECRET_<NAME>.",
    )
    access: str = Field(
        description="read-only, read-write-whitelist, read-write-create-whitelist or read-write-create."
    )
    writable: list[str] = Field(default_factory=list, description="Namespace patterns a whitelist writes.")
    prefix: str | None = Field(None, description="Namespaces named with this prefix are placed there.")
    routes: dict[str, str] = Field(
        default_factory=dict,
        description="namespace → `primary` or the new metastore's name: where a namespace present in both "
        "lives (a namespace in both and not routed is refused, 400).",
    )


class AlterMetastore(BaseModel):
    """What to change of a metastore (``streampart federation alter``): a field left out is unchanged."""

    model_config = ConfigDict(extra="forbid")

    access: str | None = Field(None, description="The new access type.")
    writable: list[str] | None = Field(
        None,
        description="The new whitelist, replacing the old one (left out: kept while the access type has a "
        "whitelist, dropped when it has none).",
    )
    prefix: str | None = Field(
        None, description="A new prefix; `null` removes it (checked for collisions as at registration)."
    )


class RouteNamespace(BaseModel):
    """Where a namespace lives from now on (``streampart federation route``)."""

    model_config = ConfigDict(extra="forbid")

    metastore: str = Field(min_length=1, max_length=128, description="A registered metastore, or `primary`.")
    force: bool = Field(
        False,
        description="Route it even if its tables and links stay behind in its current metastore (they "
        "vanish from view until it is routed back); without it that is refused, 400.",
    )


class RouteInfo(BaseModel):
    namespace: str
    metastore: str = Field(description="The metastore it lives in now.")
    previous: str = Field(description="The metastore it lived in before.")
    version: int = Field(description="The route table's version after the change.")


class RoutesInfo(BaseModel):
    version: int = Field(
        description="The route table's version: every change of the registry or routes bumps it."
    )
    routes: dict[str, str] = Field(description="The explicit routes: namespace → metastore.")
