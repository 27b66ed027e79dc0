"""Tables over HTTP: the tables a token may read, one table with its partitions, and its ALTER.

All answer in the shape of ``streampart table describe --json`` (:class:`~ingest.api.models.TableInfo`).
``PATCH`` (``admin`` scope) is ``streampart table alter``'s schema part: it adds and widens columns
through ``catalog.schemas`` (one Delta ``metaData`` commit, then the metastore) and sets the table's
schema evolution, and gives an empty table a primary key (``catalog.keys``). Everything is checked
before anything changes: a mistake is a 400 naming it, a
race with another schema change a 409 ``conflict`` (run it again).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ingest.api.deps import Caller, State
from ingest.api.errors import blame
from ingest.api.models import AlteredTable, AlterTable, TableInfo, error_responses
from metastore.errors import UserInputError
from metastore.models import (
    Column,
    Permission,
    SchemaEvolution,
    check_cluster_by,
    iso,
    keys_from_options,
    parse_cluster_by,
    parse_column_change,
)
from metastore.retention import parse_retain

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


@router.patch(
    "/v1/tables/{namespace}/{table}",
    response_model=AlteredTable,
    response_model_exclude_unset=True,
    responses=error_responses(400, 401, 403, 404, 409, 422),
    summary="Change a table's columns, schema evolution, retention or clustering, or give it a primary key",
)
def alter_table(namespace: str, table: str, body: AlterTable, who: Caller, st: State) -> dict[str, Any]:
    """Add nullable columns (rows written before read null) and widen columns in place, as ``streampart table
    alter --add-column/--widen-column`` does, set ``schema_evolution``, ``max_new_columns`` and ``retain``
    (as ``--retain``) and ``cluster_by`` (as ``--cluster-by``), and give an empty table a ``primary_key``
    (as ``--primary-key``). Needs ``admin`` on the namespace. Answers the table as ``GET`` does, with
    ``schema_change``."""
    found = st.table_of(who, Permission.ADMIN, namespace, table)
    add = _columns(body.add_columns, "add_columns")
    widen = _columns(body.widen_columns, "widen_columns")
    evolution = None
    if body.schema_evolution is not None:
        with blame("schema_evolution"):
            evolution = _evolution(body.schema_evolution)
    settings = evolution is not None or body.max_new_columns is not None
    with blame("primary_key"):
        keys = keys_from_options(
            body.primary_key, body.sequence_by, body.op_column, body.delete_ops, body.upsert_ops, flag="{}"
        )
    clustering = body.cluster_by is not None
    if not (add or widen or settings or body.retain is not None or keys is not None or clustering):
        with blame("body"):
            raise UserInputError(
                "nothing to change: give add_columns, widen_columns, schema_evolution, max_new_columns, "
                "retain, cluster_by or (on an empty table) primary_key"
            )
    cluster_to: tuple[str, ...] = ()
    if body.cluster_by is not None:
        with blame("cluster_by"):
            cluster_to = parse_cluster_by(body.cluster_by, "cluster_by")
            check_cluster_by(cluster_to, [*found.columns, *add], "cluster_by")
    retain = None
    if body.retain is not None:
        with blame("retain"):
            retain = parse_retain(body.retain, "retain")
            st.catalog.retention.check(found, retain)
    try:
        if keys is not None:
            with blame("primary_key"):
                found = st.catalog.keys.declare(found, keys)
        with blame("body"):
            change = (
                st.catalog.schemas.alter(found, add, widen, source="http").change if add or widen else None
            )
        if settings:
            st.catalog.schemas.set_evolution(found, evolution, body.max_new_columns)
        if body.retain is not None:
            st.catalog.retention.set(found, retain)
        if clustering:
            with blame("cluster_by"):
                st.catalog.clustering.set(st.catalog.rebound(found), cluster_to, "cluster_by")
    finally:
        st.lookups.forget(found.name)
    info = st.catalog.describe(st.catalog.rebound(found))
    info["schema_change"] = None
    if change is not None:
        info["schema_change"] = {
            "version": change.version,
            "change": change.description,
            "source": change.source,
            "at": iso(change.at),
            "key": change.key,
        }
    return info


def _columns(texts: list[str], field: str) -> list[Column]:
    """The columns of a body's list ``field``; 400 naming the field and the bad one."""
    with blame(field):
        return [parse_column_change(t, field) for t in texts]


def _evolution(mode: str) -> SchemaEvolution:
    try:
        return SchemaEvolution(mode)
    except ValueError:
        modes = ", ".join(m.value for m in SchemaEvolution)
        raise UserInputError(f"schema_evolution {mode!r}: give one of {modes}") from None
