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

A build that cannot finish says why (:class:`~streampart.errors.ClassArchiveError`: out of time, a
``java`` without dynamic archives, the workload's last words) and leaves nothing behind: each build
writes in a directory of its own, removed whatever happens, and every JVM it started is killed
before it returns (a JVM left running would write its ~170 MB archive as it exits, after the
build had cleaned up). Builds that were killed themselves leave their directory: the next build
removes it (:func:`remove_leftovers`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from metastore.processes import alive
from streampart import spark_home
from streampart.errors import ClassArchiveError, ClassArchiveTimeoutError, StreampartError
from streampart.spark_hooks import cache_dir, compile_hooks

# The JVM's CDS messages (an archive that does not fit, classes it skipped) go nowhere: unified
# logging writes warnings to stdout, which is a command's answer.
QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off", "-Xlog:class+path=off"]
# Set in the children :func:`build` starts: ``dump:PATH`` writes an archive, ``check:PATH`` must map
# it (``-Xshare:on``: a JVM that cannot, exits) before it takes the archive's place.
BUILDING = "_STREAMPART_CLASS_ARCHIVE"
# Why 300 s a step: the workload starts Spark without an archive and runs a few small jobs, about a
# minute on the 2-core build machine (its check, from the archive, half that); five times that is
# room for a machine busy with other work, and a build that takes longer is better left undone
# (Spark runs without an archive) than holding `make setup` any longer.
TIMEOUT_S = 300.0
# Each build's directory in the cache directory: ``.spark-classes-build-<builder's pid>-<random>``;
# before it, a build wrote ``.spark-classes-<where>-<what>-<pid>.jsa`` there (the same leftovers).
BUILD_PREFIX = ".spark-classes-build-"
_LEFTOVER = re.compile(r"\.spark-classes-(?:build-(\d+)-.*|[0-9a-f]{12}-[0-9a-f]{12}-(\d+)\.jsa)")
# Why a day: a build lasts two steps of at most its timeout each (minutes); anything older is a
# leftover even if its builder's process id is taken again by a process that lives on.
LEFTOVER_AFTER_S = 86_400.0
# How long the JVMs of a build that is over may take to be gone once killed (SIGKILL: moments).
GONE_S = 30.0


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


def build(force: bool = False, timeout: float = TIMEOUT_S) -> Path:
    """Write the archive if it is missing (``force``: again); its path.

    The archive is written in a directory of this build's own, then a second JVM must start Spark
    from it (``-Xshare:on``) before it takes its place: a truncated archive (a full disk) would
    crash every JVM that maps it. This installation's archives of other Spark, hooks or JDK builds
    are removed (each is ~170 MB), and so are earlier builds' leftovers.

    Args:
        timeout: Seconds each of the two JVMs (writing, checking) may take.

    Raises:
        ClassArchiveError: none could be written; the message says why (out of time:
            :class:`~streampart.errors.ClassArchiveTimeoutError`). Nothing is left behind.
    """
    target = archive_path()
    remove_leftovers(target.parent)
    if target.is_file() and not force:
        return target
    _check_java(_java())
    work = Path(tempfile.mkdtemp(prefix=f"{BUILD_PREFIX}{os.getpid()}-", dir=target.parent))
    tmp = work / target.name
    try:
        _run_workload(f"dump:{tmp}", timeout, "writing it")
        if not tmp.is_file():
            raise ClassArchiveError(
                f"the JVM running the workload exited without writing it (java {_java()})"
            )
        _run_workload(f"check:{tmp}", timeout, "checking the archive written")
        tmp.replace(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    remove_older(target)
    return target


def remove_leftovers(directory: Path) -> None:
    """Remove what builds that did not end (killed, or a machine that went down) left in
    ``directory``: those whose builder's process is gone, and any older than a day."""
    if not directory.is_dir():
        return
    for entry in directory.iterdir():
        found = _LEFTOVER.fullmatch(entry.name)
        if found is None:
            continue
        pid = int(found.group(1) or found.group(2))
        try:
            age = time.time() - entry.stat().st_mtime
        except FileNotFoundError:  # another build removed it meanwhile
            continue
        if not alive(pid) or age > LEFTOVER_AFTER_S:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


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


def verify(archive: Path, timeout: float = TIMEOUT_S) -> bool:
    """Whether a driver JVM starts Spark from ``archive`` (it must map it: ``-Xshare:on``)."""
    try:
        _run_workload(f"check:{archive}", timeout, "checking the archive")
    except ClassArchiveError:
        return False
    return True


def _run_workload(step: str, timeout: float, doing: str) -> None:
    """Run the workload (:mod:`streampart.class_archive_workload`) in a child whose driver JVM does
    ``step``, until that JVM has exited well (a dumping JVM writes the archive as it exits).

    The child and the JVM it starts run in a process group of their own, killed as this returns:
    a JVM that outlived a child killed for its time would go on to write the archive after the
    build had removed its directory (or, before builds had one, as a ~170 MB file nobody removes).

    Raises:
        ClassArchiveError: the child failed, or ran out of ``timeout`` seconds (``doing`` says
            what it was doing then).
    """
    # in a directory of its own: a JVM that crashes on a broken archive writes hs_err_PID.log there
    with tempfile.TemporaryDirectory(prefix="class-archive-") as cwd:
        child = subprocess.Popen(
            [sys.executable, "-m", "streampart.class_archive_workload"],
            env={**os.environ, BUILDING: step},
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its group: the JVM too, whatever becomes of the child
        )
        deadline = time.monotonic() + timeout
        try:
            try:
                out, err = child.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise ClassArchiveTimeoutError(
                    f"{doing} timed out after {timeout:g} s (a machine busy with other work?)"
                ) from None
            pid = (out.strip().splitlines() or [""])[-1]
            if child.returncode != 0 or not pid.isdigit():
                said = _last_line(err) or _last_line(out) or "it said nothing"
                raise ClassArchiveError(
                    f"{doing} failed (the workload exited with {child.returncode}): {said}"
                )
            if not _wait_gone(int(pid), deadline - time.monotonic()):
                raise ClassArchiveTimeoutError(
                    f"{doing} timed out after {timeout:g} s (its JVM did not exit)"
                )
        finally:
            _end_group(child)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _end_group(child: subprocess.Popen[str]) -> None:
    """Kill what is left of ``child``'s process group and wait (a while) until it is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.communicate(timeout=GONE_S)  # reaps the child; its pipes end once the group is gone
    deadline = time.monotonic() + GONE_S
    while time.monotonic() < deadline:
        try:
            os.killpg(child.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def _wait_gone(pid: int, timeout: float) -> bool:
    """Whether the process ``pid`` is gone within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _check_java(java: Path) -> None:
    """Raise :class:`ClassArchiveError` if ``java`` cannot write a dynamic archive
    (``-XX:ArchiveClassesAtExit``, JDK 13 and later): Spark's launcher tells the JVM to ignore an
    option it does not know, so such a JVM would run the whole workload and write nothing."""
    try:
        flags = subprocess.run(
            [str(java), "-XX:+PrintFlagsFinal", "-version"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClassArchiveError(f"java {java} cannot be run: {exc}") from None
    if "ArchiveClassesAtExit" not in flags.stdout:
        version = (flags.stderr.strip().splitlines() or ["its version unknown"])[0]
        raise ClassArchiveError(
            f"java {java} ({version}) cannot write one: it lacks -XX:ArchiveClassesAtExit (JDK 13 and later)"
        )


def _java() -> Path:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else Path(shutil.which("java") or "java")
    return found.resolve()


def main(argv: list[str]) -> int:
    """``python -m streampart.class_archive [--force] [--timeout S]`` (``make setup`` runs it): build
    the archive, saying what it does and, if none was written, why and how to build it again.
    Exits 0 either way: Spark runs without an archive, only slower to start."""
    parser = argparse.ArgumentParser(
        prog="python -m streampart.class_archive",
        description="Write the Spark driver's class archive (Spark starts in ~40% less CPU from it).",
    )
    parser.add_argument("--force", action="store_true", help="write it again even if it exists")
    parser.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT_S,
        metavar="S",
        help="seconds each of its two JVMs may take [%(default)g]",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        if args.force or not archive_path().is_file():
            print(
                "building Spark's class archive: Spark runs a small workload and keeps the classes it "
                "loaded, then starts once more from them (once per installation: about 1–2 min on 2 "
                f"cores, {args.timeout:g} s at most for each run) …",
                flush=True,
            )
        made = build(force=args.force, timeout=args.timeout)
    except StreampartError as exc:  # no JDK (the hooks cannot be compiled), out of time, …
        again = [_command(), "-m", "streampart.class_archive"]
        if isinstance(exc, ClassArchiveTimeoutError):
            again += ["--timeout", f"{2 * args.timeout:g}"]
        print(
            f"no class archive was written: {exc}. Spark starts without one (slower, nothing else "
            f"changes); to build it again: {' '.join(again)}",
            file=sys.stderr,
        )
        return 0
    print(f"class archive: {made} ({made.stat().st_size >> 20} MB, {time.monotonic() - started:.0f} s)")
    return 0


def _command() -> str:
    """This interpreter as a user types it here: ``.venv/bin/python`` in the project."""
    python = Path(sys.executable)
    with contextlib.suppress(ValueError):
        return str(python.relative_to(Path.cwd()))
    return str(python)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
