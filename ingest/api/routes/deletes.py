"""Deletes by predicate over HTTP (``admin`` scope): ``POST /v1/tables/{ns}/{t}/deletes``, as
``streampart delete`` (:mod:`ingest.deletes.deleter`). It answers when the delete is done (one
Delta commit); a bad ``where`` is a 400 naming it, a link 409 ``read_only_link``, another delete of
the table running 409 ``delete_busy``. Deleted rows reach a table's secondaries when the roll
daemon copies the rewritten partitions again.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ingest.api.deps import Caller, State
from ingest.api.errors import blame
from ingest.api.models import DeleteInfo, DeleteRows, error_responses
from ingest.deletes.deleter import Deleter
from metastore.models import Permission

router = APIRouter(tags=["tables"])


@router.post(
    "/v1/tables/{namespace}/{table}/deletes",
    response_model=list[DeleteInfo],
    responses=error_responses(400, 401, 403, 404, 409, 422, 503),
    summary="Delete the rows matching a condition",
)
def delete_rows(namespace: str, table: str, body: DeleteRows, who: Caller, st: State) -> list[dict[str, Any]]:
    """Delete the rows of the table matching ``where`` from its standard and streaming partitions in
    one Delta commit (a delete of it that had died is finished first, and answered first). Rows
    committed while it runs are not deleted."""
    found = st.table_of(who, Permission.ADMIN, namespace, table)
    with blame("where"):
        done = Deleter(st.catalog).delete(
            found, body.where, all_rows=body.all, dry_run=body.dry_run, requested_by=f"http:{who.name}"
        )
    return [r.to_json() for r in done]
