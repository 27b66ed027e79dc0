"""The Spark driver's class archive (``streampart/class_archive.py``): Spark starts from it; an
archive that does not fit is ignored without a word; a broken one never takes the archive's place;
a build that runs out of time says so, and how to build it again, and leaves nothing behind, and
what killed builds left is removed."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from streampart import class_archive

# A driver as streampart starts one, asked one question: its answer is all it prints.
DRIVER = "from streampart.query import spark_session; print(spark_session().sql('SELECT 41 + 1').first()[0])"
FROM_ARCHIVE = "org.apache.spark.SparkContext source: shared objects file"


@pytest.fixture(scope="module")
def archive() -> Path:
    made = class_archive.build()  # `make setup` wrote it; a machine set up otherwise writes it here
    assert made is not None and made == class_archive.archive_path()
    return made


def driver(tmp_path: Path, jvm: str = "") -> tuple[str, str, str]:
    """The driver's stdout and stderr, and the JVM's log of where each class it loaded came from."""
    log = tmp_path / f"classes-{len(list(tmp_path.iterdir()))}.log"
    opts = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {jvm} -Xlog:class+load=info:file={log}"
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER],
        env={**os.environ, "SPARK_SUBMIT_OPTS": opts},
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, proc.stderr, log.read_text(errors="replace")


@pytest.mark.spark
def test_spark_starts_from_the_archive_and_ignores_one_that_does_not_fit(
    archive: Path, tmp_path: Path
) -> None:
    out, _, classes = driver(tmp_path)
    assert out == "42\n"
    assert FROM_ARCHIVE in classes

    # a JVM the archive does not fit (another heap layout than the one it was written with; as for
    # another JDK build, or Spark's jars changed): it loads every class itself, and says nothing
    # about the archive on stdout (a command's answer) or stderr
    out, err, classes = driver(tmp_path, jvm="-XX:-UseCompressedOops")
    assert out == "42\n"
    assert "org.apache.spark.SparkContext source: file:" in classes
    assert FROM_ARCHIVE not in classes
    assert "cds" not in err.lower() and "shared" not in err.lower(), err


def test_the_setting_turns_it_off(archive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME")  # the test's refusing home (tests/markers.py): the archive is ours
    assert f"-XX:SharedArchiveFile={archive}" in class_archive.java_options()
    assert class_archive.java_options(use=False) == []


@pytest.mark.spark
def test_a_truncated_archive_is_refused_before_it_could_take_the_archives_place(
    archive: Path, tmp_path: Path
) -> None:
    truncated = tmp_path / "truncated.jsa"
    truncated.write_bytes(archive.read_bytes()[: 1 << 20])
    crash_logs = set(Path.cwd().glob("hs_err_pid*.log"))
    assert class_archive.verify(truncated, timeout=120) is False  # mapped, it crashes the JVM (SIGBUS)
    assert set(Path.cwd().glob("hs_err_pid*.log")) == crash_logs  # its crash report is not left here
    assert class_archive.verify(archive, timeout=120) is True


def test_an_installation_s_other_archives_go_and_others_stay(tmp_path: Path) -> None:
    import hashlib

    import pyspark

    package = Path(pyspark.__file__).resolve().parent
    before = hashlib.sha256(str(package).encode()).hexdigest()[:12]  # named after the package's place
    target = tmp_path / "spark-classes-aaaaaaaaaaaa-111111111111.jsa"
    gone = [
        tmp_path / "spark-classes-aaaaaaaaaaaa-222222222222.jsa",
        tmp_path / f"spark-classes-{before}-3.jsa",
    ]
    kept = tmp_path / "spark-classes-bbbbbbbbbbbb-111111111111.jsa"  # another virtualenv's
    for f in (target, *gone, kept):
        f.write_bytes(b"")
    class_archive.remove_older(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, kept.name])


def writers(marker: bytes) -> dict[int, bytes]:
    """The live processes whose environment sets the class archive's step to ``marker`` (a prefix),
    each with its command line."""
    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                environ = (proc / "environ").read_bytes()  # a zombie's is empty: it writes nothing
                if any(v.startswith(marker) for v in environ.split(b"\0")):
                    found[int(proc.name)] = (proc / "cmdline").read_bytes()
            except OSError:
                continue
    return found


@pytest.mark.spark
def test_a_build_out_of_time_says_why_and_how_again_and_leaves_nothing_behind(archive: Path) -> None:
    """The JVM writing the archive is held running (a pause point once Spark runs) past the build's
    limit. Before, the build gave up on the Python process only: the JVM lived on, wrote its ~170 MB
    archive as it exited, and nothing ever removed it."""
    before = archive.stat()
    env = {**os.environ, "STREAMPART_PAUSEPOINT": "class-archive-workload:600"}
    build = subprocess.Popen(
        [sys.executable, "-m", "streampart.class_archive", "--force", "--timeout", "30"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    # this build's JVM and Python processes: their step names its directory (the builder's pid)
    marker = f"_STREAMPART_CLASS_ARCHIVE=dump:{archive.parent}/.spark-classes-build-{build.pid}-".encode()
    seen: dict[int, bytes] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.update(writers(marker))
            time.sleep(0.5)

    watching = threading.Thread(target=watch, daemon=True)
    watching.start()
    try:
        out, err = build.communicate(timeout=300)
    finally:
        done.set()
        watching.join()
    assert build.returncode == 0, err  # `make setup` goes on: Spark runs without an archive
    assert "building Spark's class archive" in out and "1–2 min" in out, out
    # why, and the command that builds it again (with more time), in one line
    assert err.count("\n") == 1, err
    assert "no class archive was written: writing it timed out after 30 s" in err, err
    python, _, again = err.strip().rpartition("to build it again: ")[2].partition(" ")
    assert again == "-m streampart.class_archive --timeout 60", err
    assert Path(python).resolve() == Path(sys.executable).resolve(), err
    driver = b"org.apache.spark.deploy.SparkSubmit"
    assert any(driver in cmdline for cmdline in seen.values()), "its JVM never ran: nothing was tested"
    # every process the build started is gone (none can write an archive any more), and so is its
    # directory; the archive in place is the one that was there
    assert writers(marker) == {}, "a process of the build outlived it"
    assert not list(archive.parent.glob(f".spark-classes-build-{build.pid}-*"))
    after = archive.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (
        before.st_ino,
        before.st_mtime_ns,
        before.st_size,
    )


def test_what_killed_builds_left_is_removed_and_a_running_builds_stays(tmp_path: Path) -> None:
    gone = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # never a process's id
    archive = tmp_path / "spark-classes-aaaaaaaaaaaa-111111111111.jsa"
    left = [
        tmp_path / f".spark-classes-build-{gone}-k2j4x9",  # a build's directory, its builder killed
        tmp_path / f".spark-classes-aaaaaaaaaaaa-111111111111-{gone}.jsa",  # as builds once wrote
        tmp_path / f".spark-classes-build-{os.getpid()}-old111",  # a live id, but days old: taken again
    ]
    running = tmp_path / f".spark-classes-build-{os.getpid()}-now222"  # a build running now
    others = [archive, tmp_path / "spark-home-abc", tmp_path / ".spark-classes-notes.txt"]
    for directory in (left[0], left[2], running):
        directory.mkdir()
        (directory / archive.name).write_bytes(b"half an archive")
    for file in (left[1], *others):
        file.write_bytes(b"")
    days_ago = time.time() - 3 * 86_400
    os.utime(left[2], (days_ago, days_ago))

    class_archive.remove_leftovers(tmp_path)

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in [running, *others])
    assert (running / archive.name).read_bytes() == b"half an archive"
