"""The suite's markers kept honest (a pytest plugin, loaded by ``tests/conftest.py``).

- ``spark``: the test starts Spark: it uses the shared SparkSession or the standalone cluster
  (given by fixture, below), or Spark starts in a process it runs (marked by hand).
- ``process``: the test starts real processes: servers, CLI commands, workers it SIGKILLs.

A test that uses a fixture starting Spark or a process gets its marker here, at collection. A
test that starts a process itself (``subprocess``, ``multiprocessing``) without the ``process``
marker fails, naming it; one whose child processes start Spark without the ``spark`` marker
fails too (they see a ``SPARK_HOME`` whose ``spark-submit`` refuses). So
``pytest -m "not process and not spark"`` is the in-process part of the suite, and stays so.
"""

from __future__ import annotations

import multiprocessing.process
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Fixtures that start Spark or a process, and the markers a test using them gets.
FIXTURE_MARKERS = {
    "spark": ("spark", "process"),
    "spark_standalone": ("spark", "process"),
    "kafka_broker": ("process",),
    "private_pg_server": ("process",),
    "private_pg": ("process",),
    "server": ("process",),
    "pg_server": ("process",),
    "s3_server": ("process",),  # moto's S3 server and its fault proxy (tests/s3server.py)
    "s3_root": ("process",),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, markers in FIXTURE_MARKERS.items():
            if fixture in names:
                for marker in markers:
                    item.add_marker(marker)
        if item.get_closest_marker("spark") is not None:
            item.add_marker("process")


@pytest.fixture(scope="session")
def _refusing_spark_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``SPARK_HOME`` whose ``spark-submit`` says the test lacks the ``spark`` marker, and fails."""
    home = tmp_path_factory.mktemp("no-spark-home")
    submit = home / "bin" / "spark-submit"
    submit.parent.mkdir()
    submit.write_text(
        "#!/bin/sh\necho 'this test starts Spark but is not marked: add @pytest.mark.spark' >&2\nexit 1\n"
    )
    submit.chmod(0o755)
    return home


@pytest.fixture(autouse=True)
def _processes_need_the_marker(request: pytest.FixtureRequest, _refusing_spark_home: Path) -> Iterator[None]:
    """Fail a test that starts a process but is not marked ``process``, or Spark but not ``spark``."""
    if request.node.get_closest_marker("spark") is not None:
        yield
        return
    mp = pytest.MonkeyPatch()
    mp.setenv("SPARK_HOME", str(_refusing_spark_home))
    if request.node.get_closest_marker("process") is not None:
        try:
            yield
        finally:
            mp.undo()
        return
    popen_init = subprocess.Popen.__init__
    start = multiprocessing.process.BaseProcess.start

    def refuse(what: str) -> None:
        pytest.fail(
            f"{request.node.nodeid} starts a process ({what}) but is not marked: add @pytest.mark.process"
        )

    def guarded_popen(self: Any, args: Any, *a: Any, **kw: Any) -> None:
        refuse(f"subprocess {args!r}"[:200])
        popen_init(self, args, *a, **kw)

    def guarded_start(self: Any) -> None:
        refuse(f"multiprocessing {self!r}")
        start(self)

    mp.setattr(subprocess.Popen, "__init__", guarded_popen)
    mp.setattr(multiprocessing.process.BaseProcess, "start", guarded_start)
    try:
        yield
    finally:
        mp.undo()
