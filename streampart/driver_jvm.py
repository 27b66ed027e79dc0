"""The Spark driver's JVM, started with its stderr read through streampart: the JDK's start-up notice
about incubator modules is left out, everything else is passed on as it comes.

Spark 4's launcher starts every JVM with ``--add-modules=jdk.incubator.vector``
(``org.apache.spark.launcher.JavaModuleOptions``, whatever the configuration says), and the JDK's
module system answers by printing ``WARNING: Using incubator modules: jdk.incubator.vector`` on the
JVM's stderr as it boots: before any Java code runs, so no logging setting and no JVM flag keeps it
unsaid, and every cold Spark command printed it. So :func:`launch` starts the driver JVM itself,
through pyspark's own ``launch_gateway`` (its ``popen_kwargs`` are there for this: "capturing
stdout/stderr"), with its stderr a pipe. A daemon thread (:func:`relay`) copies each line from that
pipe to this process's stderr (file descriptor 2, where the JVM wrote before) unless it is the
notice. Everything else passes unchanged: log4j's warnings and errors, the JVM's own messages, the
Python workers' output the JVM relays, and a JVM that cannot start says why before the error that
follows.

Spark's other start-up lines (``Setting default log level to "WARN".`` and its hint on
``sc.setLogLevel``) come from Spark's logging set-up; ``log4j2.properties`` keeps them unsaid.

:func:`in_own_session` starts the JVM in a session of its own (``streampart ingest kafka``): a
SIGTERM to the job's process group (``kill -- -PGID``, a service manager, ``timeout``) then reaches
the driver only, which stops the query between batches, instead of the JVM dying mid-batch under
it. PySpark shields the JVM from SIGINT the same way; the JVM still exits with the driver (it
watches its stdin pipe).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections.abc import Iterator, Mapping

# Lines of the driver JVM's stderr that are never passed on (without their line end).
NOTICES = frozenset({b"WARNING: Using incubator modules: jdk.incubator.vector"})
# How long a JVM that failed to start may take to finish saying why (its pipe then ends): its
# message is written before the error that follows it, not after the process has gone.
LAST_WORDS_S = 5.0
_OWN_SESSION = contextvars.ContextVar("own_session", default=False)


@contextlib.contextmanager
def in_own_session() -> Iterator[None]:
    """A driver JVM launched inside this starts in a session (and process group) of its own."""
    token = _OWN_SESSION.set(True)
    try:
        yield
    finally:
        _OWN_SESSION.reset(token)


def launch(options: Mapping[str, str]) -> None:
    """Start this process's driver JVM with ``options`` (what the session builder would pass on),
    its stderr relayed without :data:`NOTICES`, unless the process has its JVM already (a session
    started and stopped keeps it; ``PYSPARK_GATEWAY_PORT``: one given by a parent, as under
    ``spark-submit``). The session builder then finds and uses it.

    Raises:
        PySparkRuntimeError: the JVM exited before it answered (``JAVA_GATEWAY_EXITED``), after
            what it printed on its stderr.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
            return
        source, sink = os.pipe()
        relaying = threading.Thread(target=relay, args=(source,), name="spark-driver-stderr", daemon=True)
        relaying.start()  # before the JVM starts: a JVM that cannot start must not block on a full pipe
        try:
            try:
                gateway = launch_gateway(
                    SparkConf().setAll(list(options.items())),
                    popen_kwargs={"stderr": sink, "start_new_session": _OWN_SESSION.get()},
                )
            finally:
                os.close(sink)  # the JVM holds its own end: the pipe ends when the JVM does
        except Exception:
            relaying.join(LAST_WORDS_S)  # a JVM that exited: all it said is passed on first
            raise
        SparkContext._ensure_initialized(gateway=gateway)


def relay(source: int, sink: int = 2) -> None:
    """Copy lines from the file descriptor ``source`` to ``sink`` until ``source`` ends, leaving
    out :data:`NOTICES`; closes ``source``. A ``sink`` that cannot be written to (a reader gone)
    does not stop the reading: the JVM must never block on a full pipe."""
    with open(source, "rb") as lines:
        for line in lines:
            if line.rstrip(b"\r\n") in NOTICES:
                continue
            with contextlib.suppress(OSError):
                _write_all(sink, line)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
