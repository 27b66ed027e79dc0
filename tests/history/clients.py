"""The clients: each does real calls in a loop until told to stop, recording every operation.

- :func:`producer`: chunks of fresh row ids through ``streampart serve`` (HTTP, idempotency keys);
  now and then a chunk with a malformed record, or another chunk under an acknowledged key: both
  must fail for sure (4xx) and leave nothing. A write whose outcome is unknown is retried as a new
  operation under the same key, so the history shows how it resolved.
- :func:`reader`: the table's latest version read with delta-rs (an engine independent of ours),
  now and then an earlier version again by time travel.
- :func:`roller`: a forced roll of the open streaming partition, through the Python API.
"""

from __future__ import annotations

import json
import random
import threading

from ingest.client import Client
from ingest.errors import ApiClientError
from tests.helpers import records
from tests.history.checker import EXPECTED_REFUSALS
from tests.history.history import History

CHUNK_ROWS = 20
# Why 20 s: a restarted server answers within a few seconds, and a commit its dead predecessor left
# takes over after twice the commit timeout (0.5 s in the run); a call not done by then is unknown
RETRY_FOR = 20.0
UNKNOWN_RETRIES = 3


def producer(name: str, base: int, url: str, token: str, table: str, history: History,
             stop: threading.Event, rng: random.Random) -> None:  # fmt: skip
    """Write chunks of ids ``base``, ``base + 1``, … until ``stop``."""
    acked: list[str] = []
    with Client(url, token, timeout=30, retry_for=RETRY_FOR, backoff=0.05, max_backoff=1.0) as api:
        n = 0
        while not stop.is_set():
            ids = list(range(base + n * CHUNK_ROWS, base + (n + 1) * CHUNK_ROWS))
            key, body, why = f"{name}-{n}", records(ids), ""
            n += 1
            roll = rng.random()
            if roll < 0.08:  # a record whose id is no number: the whole chunk is refused
                bad = json.dumps({"id": "not-a-number", "ts": "2026-11-21T10:15:00Z", "msg": "bad"})
                body, why = body + bad.encode() + b"\n", EXPECTED_REFUSALS[0]
            elif roll < 0.14 and acked:  # other rows under an acknowledged key: 409, never a success
                key, why = rng.choice(acked), f"{EXPECTED_REFUSALS[1]}, other rows"
            for _attempt in range(1 + UNKNOWN_RETRIES):
                op = history.invoke(name, "write", ids=ids, key=key, detail=why)
                try:
                    api.write(table, body, idempotency_key=key)
                except ApiClientError as exc:
                    certain = exc.status is not None and 400 <= exc.status < 500
                    history.complete(op, "fail" if certain else "unknown", detail=f"{exc.code}: {exc}"[:300])
                    if certain:
                        break
                except Exception as exc:  # an answer we could not read: it may have landed
                    history.complete(op, "unknown", detail=f"{type(exc).__name__}: {exc}"[:300])
                else:
                    history.complete(op, "ok")
                    if not why:
                        acked.append(key)
                    break


def reader(name: str, location: str, history: History, stop: threading.Event, rng: random.Random) -> None:
    """Read the table with delta-rs until ``stop``: its latest version, sometimes an earlier one."""
    from deltalake import DeltaTable, QueryBuilder

    seen: list[int] = []
    while not stop.wait(rng.uniform(0.05, 0.4)):
        again = seen and rng.random() < 0.25
        version = rng.choice(seen) if again else None
        op = history.invoke(name, "read_at" if again else "read", version=version)
        try:
            dt = DeltaTable(location, version=version)
            got = dt.version()
            ids = QueryBuilder().register("t", dt).execute("SELECT id FROM t").read_all().column("id")
        except Exception as exc:
            history.complete(op, "fail", detail=f"{type(exc).__name__}: {exc}"[:300])
        else:
            history.complete(op, "ok", ids=ids.to_pylist(), version=got)
            seen.append(got)


def roller(name: str, warehouse: str, metastore: str, table: str, history: History,
           stop: threading.Event, rng: random.Random, every: tuple[float, float]) -> None:  # fmt: skip
    """Force-roll the open streaming partition of ``table`` every ``every`` seconds until ``stop``."""
    from metastore.catalog import Catalog
    from scheduler.roll import Roller

    catalog = Catalog.open(warehouse, metastore)
    try:
        while not stop.wait(rng.uniform(*every)):
            op = history.invoke(name, "roll")
            try:
                results = Roller(catalog).roll_table(catalog.table(table), force=True)
            except Exception as exc:  # a roll may fail (a busy lease, a frozen server): it resumes later
                history.complete(op, "fail", detail=f"{type(exc).__name__}: {exc}"[:300])
            else:
                history.complete(op, "ok", detail=f"rolled {len(results)}")
    finally:
        catalog.close()
