"""Checks of the Spark master a process is about to use, before Spark is asked to start.

Spark itself reports neither problem well: against an unreachable standalone master a driver
retries its registration for a minute and then fails with "All masters are unresponsive"; and
``SparkSession.builder.getOrCreate()`` silently returns the process's running session, whatever
master it was asked for, so a job meant for one cluster would run on another.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from metastore.errors import UserInputError
from streampart.errors import SparkUnavailableError

# Why 3 s: a master on the same network accepts a TCP connection in milliseconds; a master
# that does not answer within 3 s is down or unreachable, and the caller should hear so now.
CONNECT_TIMEOUT = 3.0


def check_reachable(master: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """For a standalone master (``spark://HOST:PORT[,HOST:PORT…]``), that at least one answers.

    Other masters (``local[N]``, ``yarn``, ``k8s://…``) are left to Spark.

    Raises:
        SparkUnavailableError: none of the master's addresses accepts a connection.
    """
    if not master.startswith("spark://"):
        return
    problems = []
    for address in master.removeprefix("spark://").split(","):
        parts = urlsplit(f"//{address}")
        try:
            host, port = parts.hostname or "", parts.port or 7077
        except ValueError:
            problems.append(f"{address}: not HOST:PORT")
            continue
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            problems.append(f"{address}: {exc.strerror or exc}")
    raise SparkUnavailableError(
        f"Spark master {master} is unreachable ({'; '.join(problems)}): start it, or point spark.master "
        "(--spark-master, STREAMPART_SPARK__MASTER) or [clusters] spark_masters at a running one"
    )


def check_same_master(running: str | None, wanted: str) -> None:
    """A process runs one SparkSession: a job for another master than the running one's is refused.

    Raises:
        UserInputError: ``running`` (the master of this process's session) is not ``wanted``.
    """
    if running is not None and running != wanted:
        raise UserInputError(
            f"this process already runs Spark on {running} and cannot also run on {wanted} (one Spark "
            "session per process): run the work for the other cluster in its own streampart process"
        )
