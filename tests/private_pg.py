"""A private PostgreSQL instance: its own data directory, port and processes, never the shared server.

Tests that must kill a metastore's database (a dead backend of a federation, recovery after a
restart) cannot touch the machine's shared PostgreSQL at 127.0.0.1:5432; benchmarks that load
millions of rows should not bloat it either. :class:`PrivatePostgres` ``initdb``-s a cluster into
a scratch directory, starts it with ``pg_ctl`` on a free loopback port (trust auth, user
``postgres``, its Unix socket inside the directory, ``fsync=off``), and can stop it (``fast`` or
``immediate``, the latter a crash as far as clients can tell) and start it again on the SAME
port, so URLs handed out earlier work again after a restart.

Running as root: ``initdb`` and ``postgres`` refuse to run as root, so every PostgreSQL command
runs as the OS user ``postgres`` (``$STREAMPART_PRIVATE_PG_USER``) through ``runuser``, and the
cluster lives in a directory of its own under the system's temporary directory, owned by that
user (a pytest ``tmp_path`` is under a 0700 directory of root's that it cannot enter).

Clean-up: :meth:`PrivatePostgres.cleanup` (or leaving the ``with`` block) stops the server and
removes the directory; an ``atexit`` hook does the same if the owner forgets, and a small
watchdog process does it if the owner dies without running either (SIGKILL, SIGTERM).

No pytest here: ``bench/`` uses it too.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Literal

OS_USER = os.environ.get("STREAMPART_PRIVATE_PG_USER", "postgres")
DB_USER = "postgres"
HOST = "127.0.0.1"

# Why 60 s: pg_ctl -w waits for the server to accept connections; start-up after an immediate
# stop replays the WAL written since the last checkpoint, which after a bulk load of millions of
# rows (with fsync off, checkpoints are rare) can take a while on this 2-core machine. A start that
# fails outright (port taken, bad setting) returns at once with the server log's reason.
START_TIMEOUT_S = 60
# Why 60 s: a ``fast`` stop waits for a shutdown checkpoint, which writes every dirty buffer.
STOP_TIMEOUT_S = 60
# Tries at a free port: the port is free when chosen but another process may take it before the
# server binds it (only the first start picks a port; restarts keep theirs).
PORT_TRIES = 5

# Small and fast: no durability needed, little memory on a shared 2-core machine.
DEFAULT_SETTINGS: dict[str, str] = {
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "max_connections": "100",
    "log_min_messages": "warning",
}

StopMode = Literal["smart", "fast", "immediate"]

_WATCHDOG = """
import os, shutil, subprocess, sys, time
owner, doomed, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
while True:
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        break
    except PermissionError:
        pass
    time.sleep(1)
subprocess.run(stop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
shutil.rmtree(doomed, ignore_errors=True)
"""


class PrivatePostgresError(RuntimeError):
    """The private PostgreSQL instance could not be set up, started or stopped (with the reason)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _binary(name: str) -> str:
    """A PostgreSQL server program: on PATH, or in Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))[::-1]), None
    )
    if not found:
        raise PrivatePostgresError(f"{name} not found on PATH nor in /usr/lib/postgresql/*/bin")
    return found


class PrivatePostgres:
    """One PostgreSQL cluster of the caller's own, on a free port of 127.0.0.1.

    Example::

        with PrivatePostgres(tmp_path) as pg:         # initdb + start
            url = pg.create_database("meta1")          # postgresql+psycopg://postgres@127.0.0.1:PORT/meta1
            pg.stop("immediate")                       # clients now get "connection refused"
            pg.start()                                 # same port, same data

    Args:
        work: a directory for the cluster (created if missing). Ignored when running as root:
            the cluster then goes to a new directory that the ``postgres`` user owns.
        settings: server settings on top of :data:`DEFAULT_SETTINGS` (e.g. ``shared_buffers``).
    """

    def __init__(self, work: Path | None = None, settings: Mapping[str, str] | None = None) -> None:
        self.as_root = os.geteuid() == 0
        self._made_home = work is None or self.as_root
        if self._made_home:
            self.home = Path(tempfile.mkdtemp(prefix="streampart-pg-"))
        else:
            assert work is not None
            self.home = Path(work)
            self.home.mkdir(parents=True, exist_ok=True)
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self.port: int | None = None
        self._initialized = False
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._cleaned = False
        if self.as_root:
            self._own_home()
        atexit.register(self.cleanup)

    # -- paths and commands ------------------------------------------------------------------------
    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def socket_dir(self) -> Path:
        return self.home / "socket"

    @property
    def log(self) -> Path:
        return self.home / "server.log"

    @property
    def _doomed(self) -> Path:
        """What clean-up removes: the whole directory if this made it, else the cluster's data."""
        return self.home if self._made_home else self.data

    def _own_home(self) -> None:
        try:
            import pwd

            entry = pwd.getpwnam(OS_USER)
        except KeyError as exc:
            raise PrivatePostgresError(
                f"running as root, and initdb refuses root: PostgreSQL would run as the OS user "
                f"{OS_USER!r} (STREAMPART_PRIVATE_PG_USER), which does not exist"
            ) from exc
        os.chown(self.home, entry.pw_uid, entry.pw_gid)

    def _command(self, *args: str) -> list[str]:
        """A PostgreSQL command line, run as the cluster's OS user when we are root."""
        if self.as_root:
            return ["runuser", "-u", OS_USER, "--", *args]
        return list(args)

    def _run(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        # cwd: the OS user ``postgres`` may not be allowed into the caller's working directory
        return subprocess.run(
            self._command(*args), cwd=self.home, capture_output=True, text=True, timeout=timeout
        )

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    # -- life cycle --------------------------------------------------------------------------------
    def _initdb(self) -> None:
        done = self._run(
            _binary("initdb"),
            "-D", str(self.data),
            "-U", DB_USER,
            "--auth=trust",
            "--no-sync",
            "--no-locale",
            "-E", "UTF8",
            timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            raise PrivatePostgresError(f"initdb failed ({done.returncode}): {done.stderr.strip()}")
        self._initialized = True

    def _write_settings(self, port: int) -> None:
        """The port and settings, in postgresql.auto.conf (read at every start; last one wins)."""
        self.socket_dir.mkdir(exist_ok=True)
        if self.as_root:
            shutil.chown(self.socket_dir, OS_USER)
        values = {
            **self.settings,
            "port": str(port),
            "listen_addresses": f"'{HOST}'",
            "unix_socket_directories": f"'{self.socket_dir}'",
        }
        text = "".join(f"{k} = {v}\n" for k, v in values.items())
        auto = self.data / "postgresql.auto.conf"
        auto.write_text(text)
        if self.as_root:
            shutil.chown(auto, OS_USER)

    def _pg_ctl_start(self) -> subprocess.CompletedProcess[str]:
        return self._run(
            _binary("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", str(START_TIMEOUT_S),
            "start",
            timeout=START_TIMEOUT_S + 30,
        )  # fmt: skip

    def start(self) -> PrivatePostgres:
        """Start the server (``initdb`` first, the first time); a no-op if it is running.

        The first start picks a free port; later ones reuse it.
        """
        if self._cleaned:
            raise PrivatePostgresError("this instance was cleaned up")
        if self.running:
            return self
        if not self._initialized:
            self._initdb()
        fixed = self.port is not None
        for _ in range(1 if fixed else PORT_TRIES):
            port = self.port if self.port is not None else free_port()
            self._write_settings(port)
            done = self._pg_ctl_start()
            if done.returncode == 0:
                self.port = port
                self._start_watchdog()
                return self
            if fixed or "could not bind" not in self._log_tail(40).lower():
                break
        raise PrivatePostgresError(
            f"pg_ctl start failed ({done.returncode}): {done.stderr.strip()}\n{self._log_tail()}"
        )

    def stop(self, mode: StopMode = "fast") -> None:
        """Stop the server: ``fast`` (clean shutdown) or ``immediate`` (no checkpoint: a crash to
        clients, recovered at the next start); a no-op if it is not running."""
        if not self.running:
            return
        done = self._run(
            _binary("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", str(STOP_TIMEOUT_S), "stop",
            timeout=STOP_TIMEOUT_S + 30,
        )  # fmt: skip
        if done.returncode != 0 and self.running:
            raise PrivatePostgresError(f"pg_ctl stop failed ({done.returncode}): {done.stderr.strip()}")

    def restart(self, mode: StopMode = "fast") -> PrivatePostgres:
        """Stop (``mode``) and start again, on the same port."""
        self.stop(mode)
        return self.start()

    @property
    def running(self) -> bool:
        """Whether the server's postmaster is alive (``pg_ctl status``)."""
        if not self._initialized or not (self.data / "postmaster.pid").exists():
            return False
        return self._run(_binary("pg_ctl"), "-D", str(self.data), "status", timeout=30).returncode == 0

    def _start_watchdog(self) -> None:
        """A process that stops the server and removes its directory once this process is gone."""
        if self._watchdog is not None:
            return
        stop = self._command(_binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(self._doomed), *stop],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the owner's process group must not stop it first
        )

    def cleanup(self) -> None:
        """Stop the server at once (``immediate``) and remove its directory (if this made it)."""
        if self._cleaned:
            return
        self._cleaned = True
        atexit.unregister(self.cleanup)
        try:
            self.stop("immediate")
        finally:
            if self._watchdog is not None:
                self._watchdog.kill()
                self._watchdog.wait()
            shutil.rmtree(self._doomed, ignore_errors=True)
            shutil.rmtree(self.socket_dir, ignore_errors=True)

    def __enter__(self) -> PrivatePostgres:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()

    # -- databases ---------------------------------------------------------------------------------
    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL of ``database`` (``postgresql+psycopg://postgres@127.0.0.1:PORT/DB``)."""
        if self.port is None:
            raise PrivatePostgresError("not started yet: no port")
        return f"postgresql+psycopg://{DB_USER}@{HOST}:{self.port}/{database}"

    def _admin(self, sql: str) -> None:
        import sqlalchemy as sa

        engine = sa.create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(sa.text(sql))
        finally:
            engine.dispose()

    def create_database(self, name: str) -> str:
        """Create the database ``name`` (a plain identifier); its URL."""
        if not name.isidentifier():
            raise ValueError(f"not a plain database name: {name!r}")
        self._admin(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop the database ``name`` if it exists, disconnecting its clients."""
        if not name.isidentifier():
            raise ValueError(f"not a plain database name: {name!r}")
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def __repr__(self) -> str:
        return f"PrivatePostgres(home={self.home}, port={self.port})"
