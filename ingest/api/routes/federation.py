"""The federation's administration over HTTP: ``/v1/admin/federation/…`` (issue 12, part 3).

The twin of ``streampart federation add|list|describe|alter|remove|route`` for operators and
non-Python clients. Every route needs ``admin`` scope on every namespace (``admin:*``): the
registry and the routes decide where every namespace lives. A change is recorded in the primary
with a bump of the route-table version, so every running process (API servers, daemons, ingest
jobs) follows within its ``[federation] refresh_interval``, without a restart; this server at once.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from ingest.api.auth import Principal
from ingest.api.deps import Caller, State
from ingest.api.errors import ApiError, blame
from ingest.api.federation_models import (
    AddMetastore,
    AlterMetastore,
    MetastoreInfo,
    RouteInfo,
    RouteNamespace,
    RoutesInfo,
)
from ingest.api.models import error_responses
from metastore.catalog.federation import metastore_info
from metastore.models import Permission
from metastore.namespaces import check_namespace

router = APIRouter(tags=["federation"])

_BASE = "/v1/admin/federation"
_ONE = _BASE + "/metastores/{name}"


def require_global_admin(who: Principal) -> None:
    """Raise 403 unless ``who`` has ``admin`` on every namespace (the scope ``admin:*``)."""
    if not who.allows(Permission.ADMIN, "*"):
        raise ApiError(
            403,
            "forbidden",
            f"token {who.name!r} lacks the scope admin:* (the federation places every namespace)",
            "Authorization",
        )


@router.get(
    f"{_BASE}/metastores",
    response_model=list[MetastoreInfo],
    responses=error_responses(401, 403),
    summary="The metastores of the federation, each with its health",
)
def list_metastores(who: Caller, st: State) -> list[dict[str, Any]]:
    """``primary`` (the server's own --metastore) first, then every registered metastore by name, each
    probed live now (all at once, a short timeout each): ``health`` up, or down with the ``error``."""
    require_global_admin(who)
    return st.catalog.federation.listed()


@router.get(
    _ONE,
    response_model=MetastoreInfo,
    responses=error_responses(401, 403, 404),
    summary="A metastore: URL, access, whitelist, prefix, routes, health",
)
def describe_metastore(name: str, who: Caller, st: State) -> dict[str, Any]:
    """Its URL names secrets, never their values; ``health`` is a live probe."""
    require_global_admin(who)
    with blame("name"):
        return st.catalog.federation.described(name)


@router.post(
    f"{_BASE}/metastores",
    status_code=201,
    response_model=MetastoreInfo,
    responses=error_responses(400, 401, 403, 409, 422),
    summary="Register a metastore",
)
def add_metastore(body: AddMetastore, who: Caller, st: State) -> dict[str, Any]:
    """Checked (name, access, patterns, prefix, a URL without a clear-text password), reached (an
    unreachable database is a 400), migrated, checked for namespaces present in both it and the
    primary (400 unless each is in ``routes``), then recorded. A taken name is 409 ``already_exists``.
    Nothing is recorded when it fails."""
    require_global_admin(who)
    with blame("body"):
        added = st.catalog.federation.add(
            body.name, body.url, body.access, body.writable, body.prefix, body.routes
        )
    return metastore_info(added, st.catalog.primary.routes(), None)


@router.patch(
    _ONE,
    response_model=MetastoreInfo,
    responses=error_responses(400, 401, 403, 404, 422),
    summary="Change a metastore's access type, whitelist or prefix",
)
def alter_metastore(name: str, body: AlterMetastore, who: Caller, st: State) -> dict[str, Any]:
    """A field left out is unchanged; ``"prefix": null`` removes the prefix. Every running process
    follows within its refresh interval: e.g. after ``{"access": "read-only"}`` a chunk commit to one
    of its namespaces is refused (403 ``federation_access``, naming the rule)."""
    require_global_admin(who)
    given = body.model_fields_set
    with blame("body"):
        altered = st.catalog.federation.alter(
            name,
            access=body.access,
            writable=body.writable,
            prefix=body.prefix,
            no_prefix="prefix" in given and body.prefix is None,
        )
    return metastore_info(altered, st.catalog.primary.routes())


@router.delete(
    _ONE,
    status_code=204,
    responses=error_responses(400, 401, 403, 404),
    summary="Remove a metastore from the registry",
)
def remove_metastore(name: str, who: Caller, st: State) -> Response:
    """Refused (400) while a route or a namespace with its prefix places namespaces there; its
    database is untouched."""
    require_global_admin(who)
    with blame("name"):
        st.catalog.federation.remove(name)
    return Response(status_code=204)


@router.get(
    f"{_BASE}/routes",
    response_model=RoutesInfo,
    responses=error_responses(401, 403),
    summary="The explicit routes and the route table's version",
)
def list_routes(who: Caller, st: State) -> dict[str, Any]:
    """Namespaces without an explicit route live in the metastore whose prefix starts their name (the
    longest), else in the primary."""
    require_global_admin(who)
    return {"version": st.catalog.primary.route_version(), "routes": st.catalog.primary.routes()}


@router.put(
    f"{_BASE}/routes/{{namespace}}",
    response_model=RouteInfo,
    responses=error_responses(400, 401, 403, 404),
    summary="Route a namespace to a metastore",
)
def route_namespace(namespace: str, body: RouteNamespace, who: Caller, st: State) -> dict[str, Any]:
    """Moves nothing: the namespace is looked up in ``metastore`` from now on. Refused (400) when its
    current metastore holds its tables or links and ``metastore`` does not have it, unless ``force``;
    an unknown metastore is 404."""
    require_global_admin(who)
    with blame("namespace"):
        check_namespace(namespace)
    with blame("metastore"):
        previous = st.catalog.federation.route(namespace, body.metastore, force=body.force)
    return {
        "namespace": namespace,
        "metastore": body.metastore,
        "previous": previous,
        "version": st.catalog.primary.route_version(),
    }
