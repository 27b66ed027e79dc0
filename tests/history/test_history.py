"""The history checker under a nemesis (issue 45, build item 4): a CI-sized run, a soak behind
``-m soak``, and the checker shown able to fail on a hand-made history."""

from __future__ import annotations

import random
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.api.fixtures import Server
from tests.fixtures import make_table
from tests.history import clients
from tests.history.checker import FinalRead, Report, check
from tests.history.history import History, Op
from tests.history.nemesis import Nemesis
from tests.history.services import Daemons, SqlServerProc
from tests.private_pg import PrivatePostgres
from tests.s3server import S3Server

TABLE = "ns.events"
# Why 0.5 s: a commit left COMMITTING by a killed server is taken over by a retry after twice the
# commit timeout; short, so the producers' retries resolve it well within their budget.
FAST = {"STREAMPART_CHUNK__COMMIT_TIMEOUT": "PT0.5S"}
PRODUCER_BASE, CLI_BASE = 1_000_000, 10_000_000  # producer k writes ids from (k + 1) * base, …


@dataclass(frozen=True)
class Run:
    producers: int
    readers: int
    faults: list[str]  # see tests/history/nemesis.py, in order
    gap: tuple[float, float]  # seconds between two faults
    roll_every: tuple[float, float] | None  # the in-process forced roller's pace (None: no roller)
    cli_writers: int = 0
    deleters: int = 0
    delete_every: tuple[float, float] = (2.0, 5.0)
    seed: int = 45
    daemons: int = 0  # `streampart scheduler run` processes (a leader and standbys)
    table_roll_every: str = "1h"  # the table's roll_every (the daemons roll it on their own)
    sql_readers: int = 0  # clients of one `streampart sql-server` (started when > 0)


def final_read(location: str) -> FinalRead:
    """The table's rows and their partitions, read by delta-rs after the run."""
    from deltalake import DeltaTable, QueryBuilder

    from metastore.storage import delta_options

    dt = DeltaTable(location, storage_options=delta_options(location))
    rows = QueryBuilder().register("t", dt).execute("SELECT id, ts_period FROM t").read_all()
    ids, parts = rows.column("id").to_pylist(), rows.column("ts_period").to_pylist()
    return FinalRead(dt.version(), tuple((i, str(p)) for i, p in zip(ids, parts, strict=True)))


def record_server_errors(log_dir: Path, history: History) -> None:
    """Every error a server or a roll daemon wrote in its logs (an answer 500, a traceback, an error
    line), as a ``log`` operation."""
    logs = sorted(log_dir.glob("server-*.log")) + sorted(log_dir.glob("daemon-*.log"))
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            lowered = line.lower()
            if (
                "Traceback" in line
                or "request failed" in line
                or any(f'"level": "{level}"' in lowered for level in ("error", "critical"))
            ):
                op = history.invoke(log.name, "log")
                history.complete(op, "fail", detail=line[:600])


def record_daemon_rolls(catalog: Any, table_id: int, history: History) -> None:
    """Every roll attempt of the daemons, as the metastore kept it, as a ``roll`` of ``daemon``: ok
    (done), fail (failed, its error) or unknown (abandoned: lost leadership, shut down)."""
    outcomes = {"done": "ok", "failed": "fail", "abandoned": "unknown"}
    for a in reversed(catalog.store.list_roll_attempts(table_id, limit=1_000_000)):
        value = None if a.partition_value is None else a.partition_value.isoformat()
        said = (f"owner {a.owner} epoch {a.epoch} resumed {a.resumed} rows {a.rows} "
                f"started {a.started_at.isoformat()} finished {a.finished_at.isoformat()}")  # fmt: skip
        op = history.invoke("daemon", "roll", key=value, detail=said)
        history.complete(op, outcomes[a.outcome.value], detail=a.error or "")  # type: ignore[arg-type]


def run(tmp_path: Path, spec: Run, pg: PrivatePostgres | None = None, s3: S3Server | None = None,
        bucket_root: str | None = None) -> Report:  # fmt: skip
    """Clients and the nemesis against one ``streampart serve`` (and CLI processes) on a SQLite
    metastore, or on a database of the private PostgreSQL ``pg`` (which the nemesis may then stop
    and freeze); the warehouse on the local disk, or at ``bucket_root`` in the S3 server ``s3``
    (whose fault proxy the nemesis may then arm, and which it may freeze); the checker's report."""
    if pg is None:
        metastore = f"sqlite:///{tmp_path / 'metastore.sqlite'}"
    else:
        metastore = pg.create_database(f"history_{uuid.uuid4().hex[:12]}")
    warehouse: Any = bucket_root or tmp_path / "wh"  # Server takes a Path; a bucket's URL works as a str
    srv = Server(warehouse, metastore, tmp_path, FAST)
    history = History(tmp_path / "history.jsonl")
    table = make_table(srv.catalog, TABLE, roll_every=spec.table_roll_every)
    token = srv.token("producers", "admin:*")
    sql = SqlServerProc(str(srv.warehouse), metastore, tmp_path) if spec.sql_readers else None
    if sql is not None:
        sql.start()  # a JVM: tens of seconds, while the rest starts and the clients work
        sql.record_start(history)
    daemons = Daemons(srv.catalog, tmp_path, spec.daemons) if spec.daemons else None
    cli = clients.Cli(str(srv.warehouse), metastore, FAST)
    procs = clients.Processes()
    (work := tmp_path / "cli").mkdir()
    rng = random.Random(spec.seed)
    stop = threading.Event()
    srv.start()
    if daemons is not None:
        daemons.start_all()
    producer_bases = [(k + 1) * PRODUCER_BASE for k in range(spec.producers)]
    cli_bases = [(k + 1) * CLI_BASE for k in range(spec.cli_writers)]
    try:
        workers = [
            threading.Thread(target=clients.producer, args=(f"producer-{k}", base, srv.url, token, TABLE,
                             history, stop, random.Random(rng.random())))
            for k, base in enumerate(producer_bases)
        ] + [
            threading.Thread(target=clients.cli_writer, args=(f"cli-writer-{k}", base, cli, TABLE, history,
                             stop, random.Random(rng.random()), procs, work))
            for k, base in enumerate(cli_bases)
        ] + [
            threading.Thread(target=clients.deleter, args=(f"deleter-{k}", cli, TABLE,
                             producer_bases + cli_bases, history, stop, random.Random(rng.random()), procs,
                             spec.delete_every))
            for k in range(spec.deleters)
        ] + [
            threading.Thread(target=clients.reader, args=(f"reader-{k}", table.location, history, stop,
                             random.Random(rng.random())))
            for k in range(spec.readers)
        ] + [
            threading.Thread(target=clients.roller, args=("roller", str(srv.warehouse), srv.metastore, TABLE,
                             history, stop, random.Random(rng.random()), spec.roll_every))
            for _ in range(1 if spec.roll_every is not None else 0)
        ]  # fmt: skip
        if sql is not None:
            reader_token = srv.token("reader", f"read:{TABLE.split('.')[0]}")
            workers += [
                threading.Thread(target=clients.sql_reader, args=(f"sql-reader-{k}", (sql.host, sql.port),
                                 "reader", reader_token, TABLE, table.location, history, stop,
                                 random.Random(rng.random())))
                for k in range(spec.sql_readers)
            ]  # fmt: skip
        for w in workers:
            w.start()
        nemesis = Nemesis(history, server=srv, procs=procs, pg=pg, s3=s3, daemons=daemons, sql=sql,
                          rng=random.Random(rng.random()))  # fmt: skip
        if sql is not None:
            print(f"\nthe SQL server listened after {sql.wait_ready():.0f}s more")
        nemesis.run(spec.faults, stop, spec.gap)
        if sql is not None and not sql.ready():  # killed late: its readers read it once more, restarted
            sql.wait_ready()
            stop.wait(5)
        stop.wait(3)  # a quiet end: the last unknown writes resolve against a live server
        stop.set()
        for w in workers:
            w.join(max(clients.RETRY_FOR, clients.CLI_TIMEOUT) * (1 + clients.UNKNOWN_RETRIES) + 30)
            assert not w.is_alive(), f"{w.name} did not stop"
        if daemons is not None:  # SIGTERM: a roll under way finishes within the shutdown grace
            for slot, code in daemons.stop_all().items():
                if code != 0:  # a daemon that does not leave cleanly on SIGTERM
                    history.complete(history.invoke(f"daemon-{slot}", "log"), "fail",
                                     detail=f"exited with status {code} on SIGTERM")  # fmt: skip
            record_daemon_rolls(srv.catalog, table.id, history)
        clients.cli_check(cli, history)
        record_server_errors(tmp_path, history)
        report = check(history.load(), final_read(table.location))
        for defect in report.known_defects[:10]:
            print(f"known defect: {defect}")
    finally:
        stop.set()
        if daemons is not None:
            daemons.stop_all()
        if sql is not None:
            sql.stop()
        srv.close()
    print(f"\nhistory: {history.path}\n{report.summary()}")
    return report


def assert_clean(report: Report, spec: Run) -> None:
    assert report.faults == len(spec.faults)
    assert report.outcomes["write"]["ok"] > 0 and report.outcomes["read"]["ok"] > 0
    assert not report.anomalies, report.summary()
    assert not report.unexplained_refusals, report.unexplained_refusals


@pytest.mark.process
@pytest.mark.timeout(300)
def test_history_under_kills_and_pauses_has_no_anomaly(tmp_path: Path) -> None:
    """CI size, SQLite: 3 producers, 2 CLI writers, a deleter, 2 readers, a roller; 3 SIGKILLs of
    serve with restarts and 1 SIGSTOP; 3 SIGKILLs and 2 SIGSTOPs of CLI writers and deletes."""
    faults = ["kill", "kill-cli", "pause", "pause-cli", "kill", "kill-cli", "pause-cli", "kill", "kill-cli"]
    spec = Run(producers=3, readers=2, cli_writers=2, deleters=1, faults=faults, gap=(2.0, 5.0),
               roll_every=(4.0, 8.0))  # fmt: skip
    report = run(tmp_path, spec)
    assert_clean(report, spec)
    assert report.outcomes["delete"]["ok"] > 0


@pytest.mark.process
@pytest.mark.timeout(300)
def test_history_on_postgresql_under_restarts_and_pauses_has_no_anomaly(tmp_path: Path, private_pg) -> None:
    """CI size, a private PostgreSQL metastore: 2 producers, 2 CLI writers, a deleter, 2 readers, a
    roller; the metastore stopped and started 3 times and frozen twice, serve SIGKILLed once."""
    faults = ["pg-restart", "pg-pause", "kill", "pg-restart", "pg-pause", "pg-restart", "kill-cli"]
    spec = Run(producers=2, readers=2, cli_writers=2, deleters=1, faults=faults, gap=(3.0, 6.0),
               roll_every=(4.0, 8.0))  # fmt: skip
    assert_clean(run(tmp_path, spec, private_pg), spec)


@pytest.mark.process
@pytest.mark.timeout(300)
def test_history_in_a_bucket_under_store_faults_has_no_anomaly(tmp_path: Path, s3_server: S3Server,
                                                               s3_root: str) -> None:  # fmt: skip
    """CI size, the warehouse in an S3 bucket (moto behind the fault proxy): 2 producers, a CLI
    writer, a deleter, 2 readers, a roller; the store answering 503 and dropping connections, serve
    SIGKILLed once. (A frozen store, s3-freeze, is in the soak: requests sent to it meanwhile may hang
    for the proxy's 60 s timeout, too long for CI.)"""
    faults = ["s3-503", "s3-drop", "kill", "s3-503", "s3-drop", "s3-503"]
    spec = Run(producers=2, readers=2, cli_writers=1, deleters=1, faults=faults, gap=(3.0, 6.0),
               roll_every=(4.0, 8.0))  # fmt: skip
    assert_clean(run(tmp_path, spec, s3=s3_server, bucket_root=s3_root), spec)


@pytest.mark.process
@pytest.mark.spark
@pytest.mark.timeout(400)
def test_history_with_roll_daemons_and_a_sql_server_under_their_faults_has_no_anomaly(tmp_path: Path) -> None:
    """CI size, SQLite: 2 producers, a CLI writer, a deleter, a delta-rs reader, 2 readers through
    `streampart sql-server`; no forced roller: 2 `streampart scheduler run` daemons roll the table
    (roll_every 3s) on their own. The leading daemon SIGKILLed twice and frozen twice, one daemon's
    clock moved, the SQL server SIGKILLed (with its JVM) and started again, serve SIGKILLed once."""
    faults = [
        "kill-daemon",
        "kill-sql",
        "pause-daemon",
        "clock-daemon",
        "kill",
        "pause-daemon",
        "kill-daemon",
    ]
    spec = Run(producers=2, readers=1, cli_writers=1, deleters=1, faults=faults, gap=(2.0, 4.0),
               roll_every=None, daemons=2, table_roll_every="3s", sql_readers=2)  # fmt: skip
    report = run(tmp_path, spec)
    assert_clean(report, spec)
    assert report.outcomes["sql_read"]["ok"] > 0 and report.outcomes["roll"]["ok"] > 0


@pytest.mark.soak
@pytest.mark.process
@pytest.mark.spark
@pytest.mark.timeout(3600)
def test_soak_history_with_roll_daemons_and_a_sql_server_has_no_anomaly(tmp_path: Path) -> None:
    """About 15 minutes, SQLite: the CI run's clients, more of them, and 80 faults: the daemons'
    (killed, frozen, clocks moved), the SQL server's, serve's and the CLI processes'."""
    cycle = ("kill-daemon", "pause-daemon", "kill-sql", "clock-daemon", "kill", "kill-cli", "pause-daemon",
             "clock-daemon", "pause", "kill-daemon", "pause-cli", "clock-daemon")  # fmt: skip
    faults = [cycle[k % len(cycle)] for k in range(80)]
    spec = Run(producers=3, readers=2, cli_writers=2, deleters=1, faults=faults, gap=(3.0, 10.0),
               roll_every=None, daemons=2, table_roll_every="3s", sql_readers=2, seed=46)  # fmt: skip
    report = run(tmp_path, spec)
    assert_clean(report, spec)
    assert report.outcomes["sql_read"]["ok"] > 0 and report.outcomes["roll"]["ok"] > 0


@pytest.mark.soak
@pytest.mark.process
@pytest.mark.timeout(3600)
def test_soak_history_under_many_faults_has_no_anomaly(tmp_path: Path) -> None:
    """Minutes, SQLite: 5 producers, 3 CLI writers, a deleter, 3 readers, a roller; 60 faults."""
    faults = [("kill", "pause", "kill-cli", "pause-cli", "kill", "kill-cli")[k % 6] for k in range(60)]
    spec = Run(producers=5, readers=3, cli_writers=3, deleters=1, faults=faults, gap=(3.0, 12.0),
               roll_every=(3.0, 15.0))  # fmt: skip
    assert_clean(run(tmp_path, spec), spec)


@pytest.mark.soak
@pytest.mark.process
@pytest.mark.timeout(3600)
def test_soak_history_on_postgresql_has_no_anomaly(tmp_path: Path, private_pg) -> None:
    """Minutes, a private PostgreSQL metastore: 40 faults, half of them on the metastore."""
    cycle = ("pg-restart", "kill", "pg-pause", "kill-cli", "pg-restart", "pause", "pg-pause", "pause-cli")
    faults = [cycle[k % len(cycle)] for k in range(40)]
    spec = Run(producers=3, readers=2, cli_writers=2, deleters=1, faults=faults, gap=(3.0, 12.0),
               roll_every=(3.0, 15.0))  # fmt: skip
    assert_clean(run(tmp_path, spec, private_pg), spec)


@pytest.mark.soak
@pytest.mark.process
@pytest.mark.timeout(3600)
def test_soak_history_in_a_bucket_has_no_anomaly(tmp_path: Path, s3_server: S3Server, s3_root: str) -> None:
    """Minutes, the warehouse in an S3 bucket: 20 faults, most of them on the store (frozen too)."""
    cycle = ("s3-503", "s3-freeze", "kill", "s3-drop", "kill-cli", "s3-503", "s3-freeze", "pause")
    faults = [cycle[k % len(cycle)] for k in range(20)]
    spec = Run(producers=2, readers=2, cli_writers=1, deleters=1, faults=faults, gap=(3.0, 12.0),
               roll_every=(3.0, 15.0))  # fmt: skip
    assert_clean(run(tmp_path, spec, s3=s3_server, bucket_root=s3_root), spec)


# -- the checker can fail -------------------------------------------------------------------


def _op(n: float, client: str, kind: str, outcome: str, ids: list[int], version: int | None = None,
        detail: str = "", where: str = "", key: str | None = None, count: int | None = None,
        took: float = 0.5) -> Op:  # fmt: skip
    if not detail and outcome == "fail" and kind == "write":
        detail = "malformed record HTTP 422 malformed_chunk: record 3: column 'id': expected an integer"
    return Op(id=str(n), client=client, kind=kind, invoked=float(n), completed=n + took,  # type: ignore[arg-type]
              outcome=outcome, ids=tuple(ids), version=version, key=key or f"k{n}", detail=detail,  # type: ignore[arg-type]
              where=where, count=count)  # fmt: skip


def test_the_checker_reports_a_doubled_row_a_lost_row_and_a_read_going_back() -> None:
    history = [
        _op(1, "p", "write", "ok", [1, 2]),
        _op(2, "p", "write", "ok", [3, 4]),  # acknowledged, then lost
        _op(3, "p", "write", "fail", [5, 6]),  # refused for sure
        _op(4, "r", "read", "ok", [1, 2], version=2),
        _op(5, "r", "read", "ok", [1, 2], version=1),  # back in version
        _op(6, "r", "read", "ok", [1], version=3),  # half of a chunk
    ]
    final = FinalRead(3, ((1, "p1"), (1, "p1"), (2, "p2"), (5, "p1"), (6, "p1"), (2, "p1")))
    report = check(history, final)
    assert {"duplicated", "lost", "not_monotonic", "failed_present", "two_partitions", "partial_chunk",
            "stale_read"} <= report.kinds(), report.summary()  # fmt: skip
    assert any("[3, 4]" in a.message for a in report.anomalies if a.kind == "lost")
    assert any("[1, 2]" in a.message for a in report.anomalies if a.kind == "duplicated")


def test_the_checker_passes_a_clean_history() -> None:
    history = [
        _op(1, "p", "write", "ok", [1, 2]),
        _op(2, "p", "write", "unknown", [3, 4], detail="HTTP 503 unavailable: metastore m is unavailable"),
        _op(3, "p", "write", "fail", [5, 6]),
        _op(4, "r", "read", "ok", [1, 2], version=1),
        _op(5, "r2", "read_at", "ok", [1, 2], version=1),
        _op(6, "r", "read", "ok", [1, 2, 3, 4], version=2),
    ]
    report = check(history, FinalRead(2, ((1, "a"), (2, "a"), (3, "b"), (4, "b"))))
    assert not report.anomalies, report.summary()
    assert (report.operations, report.faults) == (6, 0)


# rows 11 and 31 are in group 1 (msg = 'g1'); 12 is not
DELETE_G1 = "msg = 'g1' AND id BETWEEN 10 AND 40"
DELETE_G2 = "msg = 'g2' AND id BETWEEN 0 AND 99"
DAMAGED = "error: the commit file 00000000000000000042.json is damaged: restore it from a backup"


def test_the_checker_lets_a_delete_remove_the_rows_it_matches_and_nothing_else() -> None:
    history = [
        _op(1, "p", "write", "ok", [11, 12]),
        _op(2, "r", "read", "ok", [11, 12], version=1),
        _op(3, "d", "delete", "ok", [], version=2, detail="rows 1", where=DELETE_G1),
        _op(4, "r", "read", "ok", [12], version=2),  # 11 deleted: neither lost nor a partial chunk
        _op(5, "p", "write", "ok", [31, 32]),  # after the delete: stays
        _op(6, "d", "delete", "unknown", [], detail="killed by signal 9", where=DELETE_G2),
        _op(7, "r", "read", "ok", [12, 31, 32], version=3),
    ]  # fmt: skip
    final = FinalRead(4, ((31, "a"), (32, "a")))  # 12 gone: the killed delete may have been resumed
    report = check(history, final)
    assert not report.anomalies, report.summary()


def test_the_checker_reports_a_row_a_finished_delete_left_and_a_row_no_delete_matched_gone() -> None:
    history = [
        _op(1, "p", "write", "ok", [11, 12]),
        _op(2, "d", "delete", "ok", [], version=2, detail="rows 1", where=DELETE_G1),
        _op(3, "r", "read", "ok", [11, 12], version=2),  # 11 still there at the delete's version
        _op(4, "p", "write", "fail", [13, 14]),
        _op(5, "r", "read", "ok", [12, 13, 14], version=3),  # a write refused for sure, read
    ]
    report = check(history, FinalRead(3, ((11, "a"),)))  # 11 left, 12 gone though no delete matched it
    assert {"deleted_present", "lost", "failed_read"} <= report.kinds(), report.summary()
    assert any("[12]" in a.message for a in report.anomalies if a.kind == "lost")
    assert sum(a.kind == "deleted_present" for a in report.anomalies) == 2  # the read and the final read


@pytest.mark.parametrize(
    ("detail", "kind"),
    [
        ("HTTP 500 internal: internal server error (see the server's log)", "internal_error"),
        (DAMAGED, "claims_damage"),
        ("Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'chunk'", "traceback"),
        ("error: something odd happened", "unclassified_error"),
    ],
)  # fmt: skip
def test_the_checker_reports_an_error_of_the_wrong_class(detail: str, kind: str) -> None:
    history = [
        _op(1, "p", "write", "ok", [1, 2]),
        _op(2, "c", "write", "unknown", [3, 4], detail=detail),
        _op(
            3, "c", "write", "unknown", [5, 6], detail="error: metastore m is unavailable: connection refused"
        ),
    ]
    report = check(history, FinalRead(1, ((1, "a"), (2, "a"))))
    assert report.kinds() == {kind}, report.summary()


def test_the_checker_reports_what_streampart_check_found() -> None:
    history = [
        _op(1, "p", "write", "ok", [1]),
        _op(2, "check", "check", "fail", [], detail="missed_by_delete: row id=1 matches finished delete …"),
    ]
    report = check(history, FinalRead(1, ((1, "a"),)))
    assert report.kinds() == {"check_error"}, report.summary()


NOT_COMMITTED = (
    "error: chunk c did not commit in time; nothing was committed: retry with the same idempotency key"
)


def test_the_checker_tells_a_truthful_retriable_failure_from_an_untruthful_one() -> None:
    truthful = [
        _op(1, "c", "write", "fail", [1, 2], detail=NOT_COMMITTED, key="c-1"),
        _op(2, "r", "read", "ok", [], version=1),
        _op(3, "c", "write", "ok", [1, 2], version=2, key="c-1"),  # the retry committed it, at a new version
        _op(4, "r", "read", "ok", [1, 2], version=2),
    ]
    report = check(truthful, FinalRead(2, ((1, "a"), (2, "a"))))
    assert not report.anomalies and not report.unexplained_refusals, report.summary()
    untruthful = [
        _op(1, "c", "write", "fail", [1, 2], detail=NOT_COMMITTED, key="c-1"),
        _op(2, "r", "read", "ok", [1, 2], version=1),  # it had landed: a reader saw it
        _op(3, "c", "write", "ok", [1, 2], version=1, key="c-1"),  # the retry answers that commit
    ]
    report = check(untruthful, FinalRead(1, ((1, "a"), (2, "a"))))
    assert report.kinds() == {"untruthful_failure"}, report.summary()


def test_a_message_ruling_damage_out_is_no_claim_of_damage() -> None:
    from tests.history.checker import classify

    said = "error: the store at http://x is unavailable: it answered 503; nothing was found damaged: retry"
    assert classify(said) == "unavailable"
    assert classify(DAMAGED) == "claims_damage"


CUT = "TTransportException: TSocket read 0 bytes"
DEPOSED = ("StorageError: storage failed while compacting partition 2026-11-29T13:34:12Z of table ns.events: "
           "[Errno 2] No such file or directory: '/wh/ns/e/ts_period=x/.part-0a-00000.snappy.parquet.9.tmp'"
           " -> '/wh/ns/e/ts_period=x/part-0a-00000.snappy.parquet'")  # fmt: skip
GAP = (
    "DeltaError: Kernel error: Generic delta kernel error: Expected contiguous commit files, but found gap: …"
)
LOST = (
    "SqlServerUnavailableError: the SQL server at 127.0.0.1:1 closed the connection during the statement "
    "(TSocket read 0 bytes): it stopped or restarted; connect again and send the statement again"
)
RACED = (
    "error: a listing of the table's Delta log raced a commit landing (it missed the file being added); "
    "nothing was found damaged: run the command again"
)
LOGIN = (
    "UserInputError: the SQL server at 127.0.0.1:1 refused the login of 'reader': log in with a token's name"
)
REFUSED = (
    "SqlServerUnavailableError: nothing listens at 127.0.0.1:1 (connection refused): start the SQL server"
)


def test_the_checker_passes_clean_sql_reads_and_daemon_rolls() -> None:
    history = [
        _op(1, "p", "write", "ok", [1, 2]),
        _op(2, "s", "sql_read", "ok", []),  # within the freshness of the write: may miss it
        _op(3, "s", "sql_read", "ok", [1, 2]),
        _op(4, "r", "read", "ok", [1, 2], version=1),
        _op(5, "s", "sql_read_at", "ok", [1, 2], version=1),
        _op(6, "s", "sql_count", "ok", [], version=1, count=2, detail="distinct 2"),
        _op(7, "nemesis", "fault", "ok", [], key="kill-sql", took=2.0),
        _op(7.5, "s", "sql_read", "fail", [], detail=LOST),  # cut by the kill: the server's unavailability
        _op(8, "s", "sql_read", "fail", [], detail=REFUSED),  # down: unavailable
        _op(8.5, "sql-server", "log", "ok", [], key="sql-starting", took=1.0),
        _op(10, "daemon", "roll", "ok", [], key="2026-01-01T00:00:00+00:00"),
        _op(11, "daemon", "roll", "unknown", [], key="2026-01-01T00:00:03+00:00"),
        _op(
            11.5,
            "daemon",
            "roll",
            "unknown",
            [],
            key="2026-01-01T00:00:03+00:00",
            detail="roll abandoned at step roll-after-compact; it resumes from there",
        ),
        _op(12, "daemon", "roll", "ok", [], key="2026-01-01T00:00:03+00:00"),  # resumed: rolled once
        _op(13, "nemesis", "fault", "ok", [], key="pause-daemon"),
        _op(15, "d", "delete", "fail", [], where=DELETE_G2, detail=RACED),  # a conflict: run again
    ]
    report = check(history, FinalRead(1, ((1, "a"), (2, "a"))), freshness=1.0)
    assert not report.anomalies, report.summary()
    assert not report.known_defects, report.summary()


def test_the_checker_reports_what_sql_reads_and_daemon_rolls_get_wrong() -> None:
    history = [
        _op(1, "p", "write", "ok", [1, 2]),
        _op(2, "p", "write", "fail", [3, 4]),
        _op(3, "s", "sql_read", "ok", [1, 2]),
        _op(4, "s", "sql_read", "ok", [3, 4]),  # 1, 2 gone; a failed write read; 1, 2 stale (acked at 1.5)
        _op(5, "r", "read", "ok", [1, 2], version=1),
        _op(6, "s", "sql_count", "ok", [], version=1, count=3, detail="distinct 3"),  # not what v1 holds
        _op(7, "s", "sql_read_at", "ok", [1], version=1),  # half a chunk, and not v1's rows
        _op(8, "s", "sql_count", "ok", [], count=4, detail="distinct 3"),  # a row twice
        _op(9, "s", "sql_read", "fail", [], detail=CUT),  # no kill-sql then: an anomaly
        _op(9.5, "s", "sql_read", "fail", [], detail=LOGIN),  # not starting: an anomaly
        _op(10, "daemon", "roll", "ok", [], key="2026-01-01T00:00:00+00:00"),
        _op(11, "daemon", "roll", "ok", [], key="2026-01-01T00:00:00+00:00"),
        _op(12, "nemesis", "fault", "ok", [], key="pause-daemon"),
        _op(12.5, "sql-server", "log", "ok", [], key="sql-starting", took=2.0),
        # fixed defects: their messages are anomalies again, whatever the faults
        _op(13, "daemon", "roll", "fail", [], key="2026-01-01T00:00:03+00:00", detail=DEPOSED),
        _op(13.5, "s", "sql_read", "fail", [], detail=LOGIN),
        _op(14, "nemesis", "fault", "ok", [], key="kill-sql", took=2.0),
        _op(14.5, "s", "sql_read", "fail", [], detail=CUT),
        _op(15, "c", "write", "fail", [9], detail=GAP),
    ]
    report = check(history, FinalRead(1, ((1, "a"), (2, "a"))), freshness=1.0)
    assert sum(a.kind == "unclassified_error" for a in report.anomalies) == 6, report.summary()
    assert {"not_monotonic", "failed_read", "stale_sql_read", "not_repeatable", "partial_chunk", "duplicated",
            "unclassified_error", "rolled_twice"} <= report.kinds(), report.summary()  # fmt: skip
    assert not report.known_defects


def test_the_checker_wants_a_finished_delete_gone_from_sql_reads_after_the_freshness() -> None:
    history = [
        _op(1, "p", "write", "ok", [11, 12]),
        _op(2, "d", "delete", "ok", [], version=2, detail="rows 1", where=DELETE_G1),  # done at 2.5
        _op(3, "s", "sql_read", "ok", [11, 12]),  # within the freshness: may still hold 11
        _op(4, "s", "sql_read", "ok", [11, 12]),  # 1.5 s after: must not
    ]
    report = check(history, FinalRead(2, ((12, "a"),)), freshness=1.0)
    assert report.kinds() == {"deleted_present"}, report.summary()
    assert sum(a.kind == "deleted_present" for a in report.anomalies) == 1
