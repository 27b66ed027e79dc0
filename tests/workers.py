"""Worker processes for concurrency and crash tests: ``python -m tests.workers KIND …``.

Each prints one JSON line per acknowledged operation (flushed), so a test knows exactly which
chunks were acknowledged before a process was killed.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

from ingest.chunks import ChunkWriter, CommitResult
from ingest.config import ChunkConfig
from ingest.errors import ChunkBusyError, CommitTimeoutError
from ingest.formats import Format
from metastore import clock
from metastore.catalog import Catalog
from metastore.errors import MetastoreDownError, NotFoundError, QuotaExceededError, RetriableError
from scheduler.config import RollConfig
from scheduler.errors import RollBusyError
from scheduler.roll import Roller
from tests.helpers import jsonl, records, run_script

_say_lock = threading.Lock()


def say(**kw: object) -> None:
    with _say_lock:  # one whole line per acknowledgement, whichever thread writes it
        sys.stdout.write(json.dumps(kw) + "\n")
        sys.stdout.flush()


def writer(cat: Catalog, args: argparse.Namespace) -> None:
    table = cat.table(args.table)
    w = ChunkWriter(cat, table, ChunkConfig(commit_timeout=timedelta(seconds=args.commit_timeout)))
    if args.until:
        steady_writer(w, args)
        return
    if args.threads == 1:
        write_chunks(w, args, range(args.start, args.start + args.count))
        return
    # several threads of one process: their commits of the table go in groups
    threads = [
        threading.Thread(
            target=write_chunks,
            args=(
                ChunkWriter(cat, table, w.config),
                args,
                range(args.start + t, args.start + args.count, args.threads),
            ),
        )
        for t in range(args.threads)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def write_chunks(w: ChunkWriter, args: argparse.Namespace, numbers: range) -> None:
    for i in numbers:
        ids = range(args.writer * 1_000_000 + i * args.rows, args.writer * 1_000_000 + (i + 1) * args.rows)
        token = f"w{args.writer}-{i}"
        content = records(ids, args.ts)
        if args.fields:  # fields the table may lack (schema evolution): the id, or "v<id>", as value
            extra = args.fields.split(",")
            content = jsonl(
                [
                    {
                        "id": n,
                        "ts": args.ts,
                        "msg": f"m{n}",
                        **dict.fromkeys(extra, f"v{n}" if args.text_fields else n),
                    }
                    for n in ids
                ]
            )
        try:
            r = write_retrying(w, content, token)
        except QuotaExceededError as exc:  # refused whole (a namespace at its quota): say so, go on
            say(token=token, refused=str(exc))
            continue
        say(token=token, chunk=r.chunk, first=ids[0], rows=r.rows, partitions=r.partitions, version=r.version)


def steady_writer(w: ChunkWriter, args: argparse.Namespace) -> None:
    """Write chunks until the file ``--until`` exists; each one is retried (same token) until it
    lands, and each failure because its metastore is down is reported (``down``: the error)."""
    from pathlib import Path

    until, i = Path(args.until), args.start
    while not until.exists():
        ids = range(args.writer * 1_000_000 + i * args.rows, args.writer * 1_000_000 + (i + 1) * args.rows)
        token = f"w{args.writer}-{i}"
        while True:
            try:
                r = w.write(records(ids, args.ts), Format.JSONL, key=token)
                break
            except MetastoreDownError as exc:
                say(token=token, down=str(exc), metastore=exc.metastore, retry_after=exc.retry_after)
                time.sleep(min(exc.retry_after, 0.5))
            except (ChunkBusyError, CommitTimeoutError, RetriableError):
                time.sleep(0.05)
        say(token=token, chunk=r.chunk, first=ids[0], rows=r.rows, partitions=r.partitions, version=r.version)
        i += 1
        time.sleep(args.interval)


def write_retrying(w: ChunkWriter, content: bytes, token: str) -> CommitResult:
    """Write one chunk, retrying what may be retried (a busy chunk, a lost race, a timeout)."""
    while True:
        try:
            return w.write(content, Format.JSONL, key=token)
        except (ChunkBusyError, CommitTimeoutError, RetriableError):
            time.sleep(0.05)


def roller(cat: Catalog, args: argparse.Namespace) -> None:
    table = cat.table(args.table)
    rollers: dict[str, Roller] = {}  # one per metastore, as the daemon has (a move changes which)
    for _ in range(args.count):
        if args.until and Path(args.until).exists():
            break
        time.sleep(args.interval)
        try:
            table = cat.rebound(table)  # wherever its namespace lives now
            r = rollers.get(table.metastore)
            if r is None:
                r = rollers[table.metastore] = Roller(
                    cat.home(table, write=True), RollConfig(lease=timedelta(seconds=args.lease))
                )
            for res in r.roll_table(table, force=args.force):
                say(**res.to_json())
        except (RollBusyError, RetriableError, NotFoundError):  # NotFoundError: its old rows went (a move)
            continue


def replicator(cat: Catalog, args: argparse.Namespace) -> None:
    from scheduler.errors import ReplicationAbandonedError, ReplicationFailedError
    from scheduler.replication import Replicator

    table = cat.table(args.table)
    r = Replicator(cat, lease=timedelta(seconds=args.lease), retry_base=timedelta(seconds=0.2))
    for _ in range(args.count):
        if args.until and Path(args.until).exists():
            break
        try:
            report = r.replicate(table, include_waiting=True)
        except (ReplicationAbandonedError, ReplicationFailedError, RetriableError) as exc:
            say(error=str(exc))
            continue
        for res in report.copied:
            say(**res.to_json())
        for failure in report.failed:
            say(error=str(failure))
        time.sleep(args.interval)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["writer", "roller", "replicator"])
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--metastore", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--writer", type=int, default=0)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--rows", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="a writer: threads sharing the chunks")
    ap.add_argument("--ts", default="2026-11-21T10:15:00Z")
    ap.add_argument("--fields", default="", help="a writer: extra fields of its records, comma-separated")
    ap.add_argument("--text-fields", action="store_true", help="a writer: the extra fields hold 'v<id>'")
    ap.add_argument("--commit-timeout", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--fail-fast", type=float, default=5.0, help="a dead metastore's fail-fast window (s)")
    ap.add_argument("--lease", type=float, default=600.0, help="roll (or copy) lease in seconds")
    ap.add_argument(
        "--until",
        help="stop once this file exists (a writer: write until then, --count ignored; a roller or "
        "a replicator: between passes)",
    )
    ap.add_argument("--clock-offset", type=float, default=0.0, help="seconds this process's clock is ahead")
    args = ap.parse_args()
    cat = Catalog.open(args.warehouse, args.metastore, fail_fast_s=args.fail_fast)
    with clock.use(clock.SystemClock(timedelta(seconds=args.clock_offset))):
        {"writer": writer, "roller": roller, "replicator": replicator}[args.kind](cat, args)


if __name__ == "__main__":
    run_script(main)
