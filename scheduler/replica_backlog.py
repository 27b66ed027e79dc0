"""How far each secondary cluster of a table is behind its primary: a reading for the roll daemon's
metrics (``scheduler/replication_jobs.py``) and the scheduler's status (``scheduler/status.py``),
apart from the copying itself (``scheduler/replication.py``)."""

from __future__ import annotations

from datetime import datetime

from metastore import clock
from metastore.catalog import Catalog
from metastore.models import PartitionState, Table
from metastore.replicas import CopyState, not_present


def backlog(catalog: Catalog, table: Table, now: datetime | None = None) -> dict[str, tuple[float, int]]:
    """Per secondary of ``table``: how long its oldest missing standard partition has been rolled
    (seconds; 0 when none is missing), and how many are missing."""
    now = now or clock.now()
    replicas = catalog.replicas.list(table)
    if not replicas:
        return {}
    standard = catalog.store.list_partitions(table.id, [PartitionState.STANDARD])
    out = {}
    for replica in replicas:
        missing = not_present(
            standard, catalog.store.list_copies(table.id, replica.cluster, CopyState.PRESENT)
        )
        rolled = [p.rolled_at for p in missing if p.rolled_at is not None]
        out[replica.cluster] = (
            max(0.0, (now - min(rolled)).total_seconds()) if rolled else 0.0,
            len(missing),
        )
    return out
