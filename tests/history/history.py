"""The operation record, and the history file every client appends it to.

An operation is written twice: an ``invoke`` line when it starts and a ``complete`` line when its
outcome is known. Both are single ``write`` calls on a file opened ``O_APPEND``, so threads and
processes may record into the same file without interleaving lines. An operation whose client died
between the two lines (no ``complete``) loads as ``unknown``, as Jepsen treats a crashed client.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Outcome = Literal["ok", "fail", "unknown"]
# write: a chunk sent by a producer or a CLI writer (ids: its rows); read: the latest version read by
# a reader; read_at: a version read again by time travel; roll: a forced roll; delete: rows deleted by
# predicate (where: its condition; version: its commit's); check: ``streampart check`` after the run;
# log: an error line a server wrote in its log; fault: what the nemesis did; sql_read: the newest
# snapshot read through the SQL server (no version: it does not say which); sql_read_at: a version
# read through it (``VERSION AS OF``); sql_count: ``count(*)`` and ``count(DISTINCT id)`` through it
# (count: the first; detail: ``distinct N``), at a version or the newest. A ``roll`` of the client
# ``daemon`` is a roll attempt of a daemon process, observed in the metastore after the run (key:
# the partition's value).
Kind = Literal["write", "read", "read_at", "roll", "delete", "check", "log", "fault", "sql_read",
               "sql_read_at", "sql_count"]  # fmt: skip


@dataclass(frozen=True)
class Op:
    """One operation of the history."""

    id: str
    client: str
    kind: Kind
    invoked: float  # wall-clock seconds (time.time()): comparable across processes on one host
    completed: float | None  # None: never completed (its client died)
    outcome: Outcome
    ids: tuple[int, ...] = ()  # write: the rows sent; read/read_at: the rows seen
    version: int | None = None  # read/read_at: the Delta version read
    key: str | None = None  # write: the idempotency key
    detail: str = ""  # why it failed, what fault, …
    where: str = ""  # delete: its predicate (SQL, as sent); sql_*: the statement
    count: int | None = None  # sql_count: the rows counted


@dataclass
class History:
    """Appends operations to ``path`` (JSON lines); safe across threads and processes."""

    path: Path
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _prefix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def _append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one write on O_APPEND: whole lines, whoever else appends
        finally:
            os.close(fd)

    def invoke(self, client: str, kind: Kind, *, ids: Iterable[int] = (), key: str | None = None,
               version: int | None = None, detail: str = "", where: str = "") -> str:  # fmt: skip
        """Record the start of an operation; returns its id, for :meth:`complete`."""
        with self._lock:
            op_id = f"{self._prefix}-{next(self._seq)}"
        self._append({"type": "invoke", "op": op_id, "client": client, "kind": kind, "time": time.time(),
                      "ids": list(ids), "key": key, "version": version, "detail": detail,
                      "where": where})  # fmt: skip
        return op_id

    def complete(self, op_id: str, outcome: Outcome, *, ids: Iterable[int] | None = None,
                 version: int | None = None, detail: str = "", count: int | None = None) -> None:  # fmt: skip
        """Record the outcome of operation ``op_id`` (``ids``/``version``/``count``: what a read saw)."""
        seen = None if ids is None else list(ids)
        self._append({"type": "complete", "op": op_id, "time": time.time(), "outcome": outcome,
                      "ids": seen, "version": version, "detail": detail, "count": count})  # fmt: skip

    def load(self) -> list[Op]:
        return load(self.path)


def load(path: Path) -> list[Op]:
    """The operations recorded in ``path``, in order of invocation."""
    invokes: dict[str, dict[str, Any]] = {}
    completes: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        (invokes if record["type"] == "invoke" else completes)[record["op"]] = record
    ops = []
    for op_id, inv in invokes.items():
        done = completes.get(op_id)
        ids = inv["ids"] if done is None or done["ids"] is None else done["ids"]
        version = inv["version"] if done is None or done["version"] is None else done["version"]
        ops.append(
            Op(
                id=op_id, client=inv["client"], kind=inv["kind"], invoked=inv["time"],
                completed=None if done is None else done["time"],
                outcome="unknown" if done is None else done["outcome"],
                ids=tuple(ids), version=version, key=inv["key"],
                detail=" ".join(d for d in (inv["detail"], "" if done is None else done["detail"]) if d),
                where=inv.get("where", ""), count=None if done is None else done.get("count"),
            )
        )  # fmt: skip
    return sorted(ops, key=lambda op: op.invoked)
