"""Tables over HTTP: the tables a token may read, and one table with its partitions.

Both answer in the shape of ``streampart table describe --json`` (:class:`~ingest.api.models.TableInfo`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ingest.api.deps import Caller, State
from ingest.api.models import TableInfo, error_responses
from metastore.models import Permission

router = APIRouter(tags=["tables"])


@router.get(
    "/v1/tables",
    response_model=list[TableInfo],
    response_model_exclude_unset=True,  # a table has no "link" key, as in describe --json
    responses=error_responses(401),
    summary="The tables the token may read",
)
def list_tables(who: Caller, st: State) -> list[dict[str, Any]]:
    """Every table and link of the namespaces the token may read (read or admin), as ``describe --json``.

    A link whose source was dropped is left out (describing it names the fault).
    """
    out = []
    for t in st.catalog.list_tables().merged():
        if who.allows(Permission.READ, t.name.namespace):
            out.append(st.catalog.describe(t))
    for link in st.catalog.router.fan_out(lambda store: store.list_links()).merged():
        if who.allows(Permission.READ, link.name.namespace) and not st.catalog.links.is_dangling(link):
            out.append(st.catalog.describe(st.catalog.resolve(link.name)))
    return out


@router.get(
    "/v1/tables/{namespace}/{table}",
    response_model=TableInfo,
    response_model_exclude_unset=True,  # a table has no "link" key, as in describe --json
    responses=error_responses(400, 401, 403, 404),
    summary="A table and its partitions",
)
def describe_table(namespace: str, table: str, who: Caller, st: State) -> dict[str, Any]:
    """The table (or link) and its partitions, as ``streampart table describe --json``."""
    return st.catalog.describe(st.resolved_of(who, namespace, table))
