"""Namespaces and their links over HTTP: what a namespace holds, and the tables it imports.

``GET /v1/namespaces`` lists the namespaces a token may read; one namespace, its usage (owned
and linked bytes, read from the Delta logs) and its links are read with ``read`` scope on it.
Links are made, changed and dropped with ``admin`` scope on their namespace; making one (or
adding partitions to a static one) also needs ``read`` on the source's namespace, since it
exposes the source's data to every reader of the link's namespace. Reading a link needs no
scope on its source's namespace: ``read:A`` reads A's links, as it reads A's tables.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter

from ingest.api.deps import Caller, State
from ingest.api.errors import blame
from ingest.api.models import (
    CreateLink,
    LinkDescription,
    LinkInfo,
    LinkPartitions,
    NamespaceInfo,
    UsageInfo,
    error_responses,
)
from ingest.api.state import require
from metastore.description import link_info
from metastore.durations import parse_duration
from metastore.errors import DanglingLinkError, UserInputError
from metastore.links import LinkMode, LinkSpec, PartitionRange, Resolved
from metastore.models import Permission, TableName, check_identifier, parse_instant
from metastore.usage import namespace_usage

router = APIRouter(tags=["namespaces"])

_LINK = "/v1/namespaces/{namespace}/links/{name}"


@router.get(
    "/v1/namespaces",
    response_model=list[NamespaceInfo],
    responses=error_responses(401),
    summary="The namespaces the token may read",
)
def list_namespaces(who: Caller, st: State) -> list[NamespaceInfo]:
    """Every namespace the token has ``read`` (or ``admin``) scope on."""
    return [
        NamespaceInfo.of(ns)
        for ns in st.catalog.namespaces.list().merged()
        if who.allows(Permission.READ, ns.name)
    ]


@router.get(
    "/v1/namespaces/{namespace}",
    response_model=NamespaceInfo,
    responses=error_responses(400, 401, 403, 404),
    summary="A namespace",
)
def get_namespace(namespace: str, who: Caller, st: State) -> NamespaceInfo:
    """Its settings: isolation, quota, description."""
    return NamespaceInfo.of(st.namespace_of(who, Permission.READ, namespace))


@router.get(
    "/v1/namespaces/{namespace}/usage",
    response_model=UsageInfo,
    responses=error_responses(400, 401, 403, 404),
    summary="A namespace's capacity: owned and linked bytes",
)
def get_usage(namespace: str, who: Caller, st: State) -> dict[str, Any]:
    """What its tables hold (charged, what its quota caps) and what its links show (never charged),
    standard and streaming apart, read from the newest Delta version of each table (one log replay
    per table and link: call it when needed, not in a loop). A link whose source cannot be read is
    named in ``errors``."""
    ns = st.namespace_of(who, Permission.READ, namespace)
    return namespace_usage(st.catalog, ns.name).to_json()


@router.get(
    "/v1/namespaces/{namespace}/links",
    response_model=list[LinkInfo],
    responses=error_responses(400, 401, 403, 404),
    summary="The links of a namespace",
)
def list_links(namespace: str, who: Caller, st: State) -> list[dict[str, Any]]:
    """Each link's settings (no scope on the sources' namespaces is needed)."""
    ns = st.namespace_of(who, Permission.READ, namespace)
    return [st.catalog.links.info(x) for x in st.catalog.links.list(ns.name)]


@router.get(
    _LINK,
    response_model=LinkDescription,
    responses=error_responses(400, 401, 403, 404),
    summary="A link and the partitions it exposes",
)
def describe_link(namespace: str, name: str, who: Caller, st: State) -> dict[str, Any]:
    """The link's settings and the source's partitions it shows now, read at one version of the
    source. A dangling link (its source dropped) answers ``dangling: true``, no version and nothing
    exposed."""
    link = st.link_of(who, Permission.READ, namespace, name)
    try:
        info = st.catalog.describe(Resolved(link.name, st.catalog.links.source(link), link))
    except DanglingLinkError:
        return link_info(link, dangling=True) | {"version": None, "exposed": []}
    return link_info(link, dangling=False) | {"version": info["version"], "exposed": info["partitions"]}


@router.post(
    "/v1/namespaces/{namespace}/links",
    status_code=201,
    response_model=LinkInfo,
    responses=error_responses(400, 401, 403, 404, 409, 422),
    summary="Link a table of another namespace",
)
def create_link(namespace: str, body: CreateLink, who: Caller, st: State) -> dict[str, Any]:
    """Import ``to`` (``B.T``) into the namespace as ``name``, without copying: reads of the link read
    B's files. Needs ``admin`` on the namespace **and** ``read`` on B: otherwise an admin of any
    namespace could expose any table to its readers. The namespace must exist (404); a name taken
    by a table or a link is 409 ``already_exists``; bad input is 400 naming the field."""
    ns = st.namespace_of(who, Permission.ADMIN, namespace)
    with blame("name"):
        name = TableName(namespace=ns.name, table=check_identifier(body.name, "link name"))
    with blame("to"):
        source_name = TableName.parse(body.to)
    require(who, Permission.READ, source_name.namespace)
    with blame("partitions"):
        rng = PartitionRange.parse(body.partitions) if body.partitions is not None else None
    values = _instants(body.values)
    with blame("values"):
        if values and not body.static:
            raise UserInputError(
                '"values" lists the partitions of a static link: set "static": true (a dynamic link '
                'is bounded by "partitions": "FROM..TO")'
            )
    with blame("retention"):
        retention = parse_duration(body.retention, "retention") if body.retention is not None else None
    with blame("to"):
        source = st.catalog.links.source_for(name, source_name)
    if body.static:  # each value named by its own field (the catalog checks them again, as a whole)
        with blame("partitions"):
            if rng is not None:
                rng.values(source)
        with blame("values"):
            st.catalog.links.static_values(source, values)
    spec = LinkSpec(
        name=name,
        source=source_name,
        mode=LinkMode.STATIC if body.static else LinkMode.DYNAMIC,
        include_streaming=body.include_streaming,
        retention=retention,
        range=rng,
        partitions=tuple(values),
    )
    with blame("name"):
        return st.catalog.links.info(st.catalog.links.create(spec, create_namespace=False))


@router.post(
    f"{_LINK}/partitions",
    response_model=LinkInfo,
    responses=error_responses(400, 401, 403, 404, 422),
    summary="Add partitions to a static link",
)
def add_link_partitions(
    namespace: str, name: str, body: LinkPartitions, who: Caller, st: State
) -> dict[str, Any]:
    """Each value must start a partition of the source (400 names the nearest one); values listed
    already are kept once. Needs ``admin`` on the namespace and ``read`` on the source's, as creating
    the link does. A partition still streaming in the source shows once it is rolled."""
    link = st.link_of(who, Permission.ADMIN, namespace, name)
    require(who, Permission.READ, link.source.namespace)
    values = _instants(body.values)
    with blame("values"):
        return st.catalog.links.info(st.catalog.links.set_partitions(link, add=values))


@router.delete(
    f"{_LINK}/partitions",
    response_model=LinkInfo,
    responses=error_responses(400, 401, 403, 404, 422),
    summary="Drop partitions from a static link",
)
def drop_link_partitions(
    namespace: str, name: str, body: LinkPartitions, who: Caller, st: State
) -> dict[str, Any]:
    """The values stop showing in the link at once (the source keeps them); a value the link does not
    list is a 400 and nothing changes. Needs ``admin`` on the namespace."""
    link = st.link_of(who, Permission.ADMIN, namespace, name)
    values = _instants(body.values)
    with blame("values"):
        return st.catalog.links.info(st.catalog.links.set_partitions(link, drop=values))


@router.delete(
    _LINK,
    response_model=LinkInfo,
    responses=error_responses(400, 401, 403, 404),
    summary="Drop a link",
)
def drop_link(namespace: str, name: str, who: Caller, st: State) -> dict[str, Any]:
    """Remove the link (its source and the source's files are untouched); answers the link as it was.
    Needs ``admin`` on the namespace."""
    link = st.link_of(who, Permission.ADMIN, namespace, name)
    info = st.catalog.links.info(link)
    st.catalog.links.drop(link)
    return info


def _instants(values: list[str]) -> list[datetime]:
    """Partition values of a request body; 400 naming ``values`` and the bad one."""
    with blame("values"):
        return [parse_instant(v, "partition value") for v in values]
