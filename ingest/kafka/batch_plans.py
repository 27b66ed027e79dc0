"""The route log: the routes and the tables of each micro-batch, fixed at its first attempt.

Spark's offset log fixes which records a batch reads; this log fixes where they go. Before a batch
stages anything, the job writes ``<checkpoint>/streampart/plans/<batch id>.json``: the routes in
force (the routes file may change at any time) and the tables whose chunks it reserves up front.
A batch replayed after a crash reads its plan back instead, so its records go to the same tables as
on the first attempt and a table that committed its chunk is not written twice, nor a record sent
both to a table and to the job's dead letters. The file is created exclusively: two attempts can
never write two plans. Old plans go as Spark's own logs do (the newest ``KEEP`` stay).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ingest.kafka.routes import Routes

PLANS_DIR = "streampart/plans"
KEEP = 100  # Spark's spark.sql.streaming.minBatchesToRetain


@dataclass(frozen=True)
class BatchPlan:
    """What a batch was planned with: its routes, and the tables reserved up front."""

    routes: Routes
    tables: tuple[str, ...]

    def to_json(self) -> str:
        return json.dumps({"routes": self.routes.to_json(), "tables": list(self.tables)})

    @classmethod
    def from_json(cls, text: str) -> BatchPlan:
        data = json.loads(text)
        return cls(Routes.from_json(data["routes"]), tuple(data["tables"]))


def fix_plan(checkpoint: str | Path, batch_id: int, plan: BatchPlan) -> BatchPlan:
    """The plan of ``batch_id``: the one logged already (a replay), else ``plan``, logged now."""
    folder = Path(checkpoint) / PLANS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{batch_id}.json"
    tmp = folder / f".{batch_id}.{os.getpid()}.tmp"
    tmp.write_text(plan.to_json())
    try:
        os.link(tmp, path)  # atomic and exclusive: the first attempt's plan stands
    except FileExistsError:
        return BatchPlan.from_json(path.read_text())
    finally:
        tmp.unlink(missing_ok=True)
    for old in folder.glob("*.json"):
        stem = old.stem
        if stem.isdigit() and int(stem) <= batch_id - KEEP:
            with contextlib.suppress(OSError):
                old.unlink()
    return plan
