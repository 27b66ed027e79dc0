"""The clients: each does real calls in a loop until told to stop, recording every operation.

- :func:`producer`: chunks of fresh row ids through ``streampart serve`` (HTTP, idempotency keys);
  now and then a chunk with a malformed record, or another chunk under an acknowledged key: both
  must fail for sure (4xx) and leave nothing. A write whose outcome is unknown is retried as a new
  operation under the same key, so the history shows how it resolved.
- :func:`reader`: the table's latest version read with delta-rs (an engine independent of ours),
  now and then an earlier version again by time travel.
- :func:`roller`: a forced roll of the open streaming partition, through the Python API.
- :func:`cli_writer`: chunks of fresh row ids as ``streampart write NS.T FILE --key K --json``
  processes (straight into the warehouse and metastore, no server); the nemesis may SIGKILL or
  SIGSTOP them (see :class:`Processes`). A write the CLI could not finish for sure is retried as a
  new operation under the same key, as the producer does.
- :func:`deleter`: ``streampart delete NS.T --where "msg = 'gR' AND id BETWEEN LO AND HI"`` processes
  (a residue class of ids, in a range of one writer's ids: part of some chunks, written before or
  while it runs), recorded with the predicate and the version of the delete's commit.
- :func:`sql_reader`: statements through a running ``streampart sql-server`` (a token with
  ``read:NS``), on one connection kept while it works (a new one after any error): the newest
  snapshot's ids (``sql_read``), a version's ids (``sql_read_at``, ``VERSION AS OF``, the version
  picked among the last ones delta-rs lists), or a count (``sql_count``: ``count(*)`` and
  ``count(DISTINCT id)``, at a version or the newest);
- :func:`cli_check`: ``streampart check --json`` after the run, its problems recorded.

Every row a client writes has ``msg = 'g<id % 10>'``: the column deletes pick rows by.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ingest.client import Client
from ingest.errors import ApiClientError
from tests.helpers import ROOT, jsonl
from tests.history.checker import EXPECTED_REFUSALS, NOT_COMMITTED, RETRY_SAME_KEY
from tests.history.history import History, Kind, Outcome

CHUNK_ROWS = 20
# Why 20 s: a restarted server answers within a few seconds, and a commit its dead predecessor left
# takes over after twice the commit timeout (0.5 s in the run); a call not done by then is unknown
RETRY_FOR = 20.0
UNKNOWN_RETRIES = 3
# Why 60 s: a CLI write or delete takes about a second; one frozen by the nemesis (SIGSTOP) gets
# up to 4 s, and one waiting on a stopped or paused metastore retries for its own budget. A process
# not done by then is SIGKILLed and its operation is unknown.
CLI_TIMEOUT = 60.0
TS = "2026-11-21T10:15:00Z"


def records(ids: Sequence[int]) -> bytes:
    """JSON lines of rows ``ids``; ``msg`` is ``g<id % 10>``, the group a delete picks rows by."""
    return jsonl([{"id": i, "ts": TS, "msg": f"g{i % 10}"} for i in ids])


MALFORMED = json.dumps({"id": "not-a-number", "ts": TS, "msg": "bad"}).encode() + b"\n"


@dataclass
class Processes:
    """The CLI processes the clients run now, for the nemesis to SIGKILL or SIGSTOP one of them."""

    _running: dict[int, tuple[str, subprocess.Popen[str]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._running[proc.pid] = (name, proc)

    def remove(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._running.pop(proc.pid, None)

    def pick(self, rng: random.Random, prefix: str = "") -> tuple[str, subprocess.Popen[str]] | None:
        """A running process (of a client whose name starts with ``prefix``), or None."""
        with self._lock:
            alive = [(n, p) for n, p in self._running.values() if n.startswith(prefix) and p.poll() is None]
        return rng.choice(alive) if alive else None


@dataclass(frozen=True)
class Cli:
    """How to run ``streampart`` against the run's warehouse and metastore."""

    warehouse: str
    metastore: str
    env: dict[str, str] = field(default_factory=dict)

    def run(self, name: str, args: Sequence[str], procs: Processes | None = None,
            timeout: float = CLI_TIMEOUT) -> tuple[int, str, str]:  # fmt: skip
        """``streampart --warehouse … --metastore … ARGS --json``: (exit status, stdout, stderr); a
        negative status is the signal that ended it (-9: the nemesis, or this timeout)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
        env.update(PYTHONPATH=str(ROOT), **self.env)
        argv = [sys.executable, "-m", "streampart.cli", "--warehouse", self.warehouse,
                "--metastore", self.metastore, *args, "--json"]  # fmt: skip
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)  # fmt: skip
        if procs is not None:
            procs.add(name, proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGCONT)  # frozen by the nemesis: a SIGKILL waits for no one
            proc.kill()
            out, err = proc.communicate()
            err += f"\n(killed after {timeout:.0f} s)"
        finally:
            if procs is not None:
                procs.remove(proc)
        return proc.returncode, out, err


def cli_outcome(status: int, err: str, why: str) -> tuple[Outcome, str, bool]:
    """A CLI write's outcome by its exit status and message: ok; fail when it says nothing was
    committed, or it refused what was sent to be refused; else unknown (it may have landed). And
    whether to send it again under the same key: after an unknown, or a fail that says to."""
    if status == 0:
        return "ok", "", False
    detail = err.strip()[-600:] if status > 0 else f"killed by signal {-status} {err.strip()[-300:]}"
    if status > 0 and (why or any(s in err for s in NOT_COMMITTED)):
        return "fail", detail, not why and RETRY_SAME_KEY in err
    return "unknown", detail, True


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
                body, why = body + MALFORMED, EXPECTED_REFUSALS[0]
            elif roll < 0.14 and acked:  # other rows under an acknowledged key: 409, never a success
                key, why = rng.choice(acked), f"{EXPECTED_REFUSALS[1]}, other rows"
            for _attempt in range(1 + UNKNOWN_RETRIES):
                op = history.invoke(name, "write", ids=ids, key=key, detail=why)
                try:
                    answer = api.write(table, body, idempotency_key=key)
                except ApiClientError as exc:
                    certain = exc.status is not None and 400 <= exc.status < 500
                    detail = f"HTTP {exc.status} {exc.code}: {exc}"[:300]
                    history.complete(op, "fail" if certain else "unknown", detail=detail)
                    if certain:
                        break
                except Exception as exc:  # an answer we could not read: it may have landed
                    history.complete(op, "unknown", detail=f"{type(exc).__name__}: {exc}"[:300])
                else:
                    history.complete(op, "ok", version=answer.get("version"))
                    if not why:
                        acked.append(key)
                    break


def reader(name: str, location: str, history: History, stop: threading.Event, rng: random.Random) -> None:
    """Read the table with delta-rs until ``stop``: its latest version, sometimes an earlier one."""
    from deltalake import DeltaTable, QueryBuilder

    from metastore.storage import delta_options

    seen: list[int] = []
    while not stop.wait(rng.uniform(0.05, 0.4)):
        again = seen and rng.random() < 0.25
        version = rng.choice(seen) if again else None
        op = history.invoke(name, "read_at" if again else "read", version=version)
        try:
            dt = DeltaTable(location, version=version, storage_options=delta_options(location))
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


def sql_reader(name: str, address: tuple[str, int], user: str, token: str, table: str, location: str,
               history: History, stop: threading.Event, rng: random.Random) -> None:  # fmt: skip
    """Read ``table`` through the SQL server at ``address`` until ``stop`` (see the module's docstring)."""
    from deltalake import DeltaTable

    from metastore.storage import delta_options
    from streampart.sql_client import Connection, Target

    conn: Connection | None = None
    try:
        while not stop.wait(rng.uniform(0.1, 0.5)):
            roll, version = rng.random(), None
            if roll < 0.4:  # a version among the last ones (delta-rs says which exist)
                try:
                    newest = DeltaTable(location, storage_options=delta_options(location)).version()
                except Exception:
                    continue  # the store may be down: delta-rs readers record that, not this one
                version = rng.randint(max(0, newest - 8), newest)
            at = "" if version is None else f" VERSION AS OF {version}"
            if roll < 0.12 or roll > 0.92:
                kind: Kind = "sql_count"
                sql = f"SELECT count(*), count(DISTINCT id) FROM {table}{at}"
            else:
                kind = "sql_read" if version is None else "sql_read_at"
                sql = f"SELECT id FROM {table}{at}"
            op = history.invoke(name, kind, version=version, where=sql)
            try:
                if conn is None:
                    conn = Connection(Target(address[0], address[1], user, token))
                rows = list(conn.execute(sql)[1])
            except Exception as exc:  # recorded with its type: the checker classifies it
                history.complete(op, "fail", detail=f"{type(exc).__name__}: {exc}"[:400])
                if conn is not None:
                    conn.close()
                conn = None
                stop.wait(1.0)  # a server down (or starting: a JVM) is not asked ten times a second
                continue
            if kind == "sql_count":
                [(count, distinct)] = rows
                history.complete(op, "ok", count=int(count), detail=f"distinct {int(distinct)}")
            else:
                history.complete(op, "ok", ids=[int(r[0]) for r in rows])
    finally:
        if conn is not None:
            conn.close()


def cli_writer(name: str, base: int, cli: Cli, table: str, history: History, stop: threading.Event,
               rng: random.Random, procs: Processes, work: Path) -> None:  # fmt: skip
    """Write chunks of ids ``base``, ``base + 1``, … with ``streampart write`` processes until ``stop``."""
    acked: list[str] = []
    n = 0
    while not stop.wait(rng.uniform(0.0, 0.3)):
        ids = list(range(base + n * CHUNK_ROWS, base + (n + 1) * CHUNK_ROWS))
        key, body, why = f"{name}-{n}", records(ids), ""
        n += 1
        roll = rng.random()
        if roll < 0.06:
            body, why = body + MALFORMED, EXPECTED_REFUSALS[0]
        elif roll < 0.1 and acked:
            key, why = rng.choice(acked), f"{EXPECTED_REFUSALS[1]}, other rows"
        file = work / f"{key}.jsonl"
        file.write_bytes(body)
        for _attempt in range(1 + UNKNOWN_RETRIES):
            op = history.invoke(name, "write", ids=ids, key=key, detail=why)
            status, out, err = cli.run(name, ["write", table, str(file), "--key", key], procs)
            outcome, detail, again = cli_outcome(status, err, why)
            version = json.loads(out)["version"] if outcome == "ok" else None
            history.complete(op, outcome, detail=detail, version=version)
            if outcome == "ok" and not why:
                acked.append(key)
            if not again:
                break
        file.unlink()


def deleter(name: str, cli: Cli, table: str, bases: Sequence[int], history: History, stop: threading.Event,
            rng: random.Random, procs: Processes, every: tuple[float, float]) -> None:  # fmt: skip
    """Delete one group of ids in a range of one writer's every ``every`` seconds until ``stop``."""
    while not stop.wait(rng.uniform(*every)):
        lo = rng.choice(bases) + rng.randrange(0, 30) * CHUNK_ROWS
        where = (
            f"msg = 'g{rng.randrange(10)}' AND id BETWEEN {lo} AND {lo + rng.randrange(2, 40) * CHUNK_ROWS}"
        )
        op = history.invoke(name, "delete", where=where)
        status, out, err = cli.run(name, ["delete", table, "--where", where], procs)
        if status == 0:
            results = json.loads(out)["deletes"]  # two when it resumed a dead one first
            versions = [r["version"] for r in results if r["version"] is not None]
            said = "; ".join(f"rows {r['rows']} read_version {r['read_version']} resumed {r['resumed']}"
                             for r in results)  # fmt: skip
            history.complete(op, "ok", version=max(versions, default=None), detail=said)
        elif status > 0:  # a delete that failed may be resumed by the next one: the checker knows
            history.complete(op, "fail", detail=err.strip()[-600:])
        else:
            history.complete(op, "unknown", detail=f"killed by signal {-status} {err.strip()[-300:]}")


def cli_check(cli: Cli, history: History) -> None:
    """``streampart check --json`` once: ok, or fail with the problems it names."""
    op = history.invoke("check", "check")
    status, out, err = cli.run("check", ["check"], timeout=300)
    try:
        problems = json.loads(out)["problems"] if out.strip() else []
    except json.JSONDecodeError:
        problems = [{"severity": "error", "kind": "unreadable output", "message": out[-300:]}]
    errors = [f"{p['kind']}: {p['message']}" for p in problems if p["severity"] == "error"]
    if status == 0 and not errors:
        history.complete(op, "ok", detail=f"{len(problems)} warning(s)")
    else:
        history.complete(op, "fail", detail=" | ".join(errors) or err.strip()[-600:])
