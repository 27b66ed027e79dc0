"""A class-data-sharing archive of the Spark driver's classes: Spark processes start in less CPU.

Every streampart command that runs Spark (``query``, ``ingest kafka``, Spark rolls, the SQL server,
the demo) starts a JVM that loads and verifies some ten thousand classes from Spark's jars before it
answers anything: on the 2-core build machine about 30 CPU-seconds and 16 s for ``select 1``. The
JDK's application class-data sharing (AppCDS, JDK 13+) keeps those classes parsed and verified in
an archive the JVM maps at start-up. :func:`build` writes one, once per machine (``make setup``
runs ``python -m streampart.class_archive``): a JVM started exactly as :func:`streampart.query.
spark_session` starts one runs a small query, a Parquet write and a read, and dumps the classes it
loaded when it exits (``-XX:ArchiveClassesAtExit``). Every later driver maps it
(``-XX:SharedArchiveFile``, :func:`java_options`).

The JVM checks an archive against its own build, its class path and the jars' sizes and times, and
ignores one that does not fit: a stale archive (Spark upgraded, another JDK, extra driver jars)
costs only the speed, never a wrong class. Its messages are off (``-Xlog:cds=off``) so they never
reach a command's output. Without an archive (not built, or ``[spark] class_archive = false``)
nothing changes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streampart import spark_home
from streampart.errors import StreampartError
from streampart.spark_hooks import cache_dir, compile_hooks

# The JVM's CDS messages (an archive that does not fit, classes it skipped) go nowhere: unified
# logging writes warnings to stdout, which is a command's answer.
QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off", "-Xlog:class+path=off"]
# Set in the children :func:`build` starts: ``dump:PATH`` writes an archive, ``check:PATH`` must map
# it (``-Xshare:on``: a JVM that cannot, exits) before it takes the archive's place.
BUILDING = "_STREAMPART_CLASS_ARCHIVE"


def archive_path() -> Path:
    """Where the archive for this pyspark installation, these hooks and this ``java`` lives (it may
    not exist). Named ``spark-classes-<where>-<what>.jsa``: ``where`` is the Spark home the driver
    starts from (:func:`streampart.spark_home.current`: the JVM's class path names the jars there, so
    each virtualenv has its own archive), ``what`` pyspark's version, the hooks and the JDK."""
    import pyspark

    java = _java()
    where = _where(spark_home.current())  # the class path names the jars under it
    what = hashlib.sha256(pyspark.__version__.encode())
    what.update(compile_hooks().name.encode())
    what.update(f"{java}:{java.stat().st_mtime_ns if java.exists() else 0}".encode())
    return cache_dir() / f"spark-classes-{where}-{what.hexdigest()[:12]}.jsa"


def java_options(use: bool = True) -> list[str]:
    """The driver JVM's options for the archive: map it if built (and ``use``), write it in
    :func:`build`'s child."""
    step, _, path = os.environ.get(BUILDING, "").partition(":")
    if step == "dump":
        return [f"-XX:ArchiveClassesAtExit={path}", *QUIET]
    if step == "check":
        return [f"-XX:SharedArchiveFile={path}", "-Xshare:on", *QUIET]
    if not use:
        return []
    archive = archive_path()
    if not archive.is_file():
        return []
    return [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", *QUIET]


def build(force: bool = False, timeout: float = 300) -> Path | None:
    """Write the archive if it is missing (``force``: again); its path, or None if none could be made.

    The archive is written under a temporary name, then a second JVM must start Spark from it
    (``-Xshare:on``) before it takes its place: a truncated archive (a full disk) would crash every
    JVM that maps it. This installation's archives of other Spark, hooks or JDK builds are removed
    (each is ~170 MB).
    """
    target = archive_path()
    if target.is_file() and not force:
        return target
    tmp = target.with_name(f".{target.stem}-{os.getpid()}.jsa")
    tmp.unlink(missing_ok=True)
    try:
        if not (
            _run_workload(f"dump:{tmp}", timeout) and tmp.is_file() and _run_workload(f"check:{tmp}", timeout)
        ):
            return None
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    remove_older(target)
    return target


def remove_older(target: Path) -> None:
    """Remove this installation's archives other than ``target``: those of other Spark, hooks or JDK
    builds (the same ``where``), and the one named after the pyspark package's place, as archives
    were named before the Spark home (:mod:`streampart.spark_home`) named them."""
    for where in {target.name.split("-")[2], _where(spark_home.installed())}:
        for old in target.parent.glob(f"spark-classes-{where}-*.jsa"):
            if old != target:
                old.unlink(missing_ok=True)


def _where(place: Path) -> str:
    """The ``where`` of an archive's name: which Spark home (or, before them, pyspark package) it is for."""
    return hashlib.sha256(str(place).encode()).hexdigest()[:12]


def verify(archive: Path, timeout: float = 300) -> bool:
    """Whether a driver JVM starts Spark from ``archive`` (it must map it: ``-Xshare:on``)."""
    return _run_workload(f"check:{archive}", timeout)


def _run_workload(step: str, timeout: float) -> bool:
    """Run the workload (:mod:`streampart.class_archive_workload`) in a child whose driver JVM does
    ``step``; True once that JVM exited well."""
    # in a directory of its own: a JVM that crashes on a broken archive writes hs_err_PID.log there
    with tempfile.TemporaryDirectory(prefix="class-archive-") as cwd:
        try:
            child = subprocess.run(
                [sys.executable, "-m", "streampart.class_archive_workload"],
                env={**os.environ, BUILDING: step},
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:  # a machine too busy to start Spark in time: no archive
            return False
    pid = (child.stdout.strip().splitlines() or [""])[-1]
    if child.returncode != 0 or not pid.isdigit():
        return False
    _wait_gone(int(pid), timeout)  # a dumping JVM writes the archive as it exits
    return True


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)


def _java() -> Path:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else Path(shutil.which("java") or "java")
    return found.resolve()


def main(argv: list[str]) -> int:
    started = time.monotonic()
    try:
        made = build(force="--force" in argv)
    except StreampartError as exc:  # no JDK: Spark cannot start at all, and says so when asked to
        print(f"no class archive: {exc}", file=sys.stderr)
        return 0
    if made is None:
        print("no class archive was written: Spark processes start without one", file=sys.stderr)
        return 0
    print(f"class archive: {made} ({made.stat().st_size >> 20} MB, {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
