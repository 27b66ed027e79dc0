"""The Spark driver's class archive (``streampart/class_archive.py``): Spark starts from it; an
archive that does not fit is ignored without a word; a broken one never takes the archive's place."""

from __future__ import annotations

import os
import subprocess
import sys
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
