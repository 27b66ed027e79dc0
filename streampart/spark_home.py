"""A Spark home for the installed pyspark in which Spark's Python processes import compiled pyspark.

Spark starts a Python process for each thing it asks of Python: the executors' workers (through a
daemon), a Python data source's lookup and planning, a streaming source's runner (one per query
start). Each starts with ``$SPARK_HOME/python/lib/pyspark.zip`` first on its path, so each imports
pyspark from that zip. Python keeps no compiled bytecode for modules in a zip: every such process
compiles pyspark's modules again, about 0.4 s of CPU each (measured on the 2-core build machine:
0.62 s to import the streaming runner from the zip, 0.22 s from the installed package). A streaming
query pays it at every start, a fresh command several times over.

:func:`use` points ``SPARK_HOME`` at a directory of links to the installed pyspark's own entries —
``bin``, ``jars`` and the rest, and ``python/lib`` without ``pyspark.zip``. Spark's path entry for
the zip then names no file, Python skips it, and finds pyspark installed beside the interpreter,
the same version, compiled when it was installed. A ``SPARK_HOME`` already set (a Spark
distribution, a test's) stands.

Built once per installation in the cache directory (``spark-home-<where>``, :func:`home_for`); the
links are made in a temporary directory renamed into place, so processes racing each other find a
whole one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path

from streampart.spark_hooks import cache_dir

ZIP = "pyspark.zip"
# What Spark itself writes into the Spark home it runs from (a standalone worker's ``work`` directory,
# the ``sbin`` scripts' ``logs``): not part of the installation, so neither named nor linked. Named,
# a user's worker started from the installed pyspark would give every later driver another home, and
# so another class archive name (``streampart/class_archive.py``): Spark would start without it.
WRITTEN_BY_SPARK = frozenset({"work", "logs"})


def installed() -> Path:
    """The installed pyspark package (a pip installation is a Spark home itself)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def home_for(package: Path) -> Path:
    """Where the Spark home of the pyspark installed at ``package`` lives (it may not exist): named
    after the package's place and the entries it links, so a pyspark upgraded in place (another
    ``py4j-*.zip``, new entries) gets a home of its own; what Spark writes there as it runs does not
    count (:data:`WRITTEN_BY_SPARK`)."""
    where = hashlib.sha256(str(package).encode())
    for directory in (package, package / "python", package / "python" / "lib"):
        if directory.is_dir():
            names = sorted(e.name for e in directory.iterdir() if e.name not in WRITTEN_BY_SPARK)
            where.update("\0".join(names).encode())
    return cache_dir() / f"spark-home-{where.hexdigest()[:12]}"


def build(package: Path) -> Path | None:
    """The Spark home of ``package``, made if missing; None if ``package`` is no Spark home (no jars)."""
    if not (package / "jars").is_dir() or not (package / "bin").is_dir():
        return None
    home = home_for(package)
    if (home / "jars").exists():
        return home
    tmp = home.with_name(f".{home.name}-{uuid.uuid4().hex}")
    try:
        (tmp / "python" / "lib").mkdir(parents=True)
        for entry in package.iterdir():
            if entry.name != "python" and entry.name not in WRITTEN_BY_SPARK:
                (tmp / entry.name).symlink_to(entry)
        for entry in (package / "python").iterdir():
            if entry.name != "lib":
                (tmp / "python" / entry.name).symlink_to(entry)
        for entry in (package / "python" / "lib").iterdir():
            if entry.name != ZIP:
                (tmp / "python" / "lib" / entry.name).symlink_to(entry)
        try:
            tmp.rename(home)
        except OSError:  # another process made it meanwhile
            if not (home / "jars").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return home


def current() -> Path:
    """The Spark home a driver started now uses: ``SPARK_HOME`` if set, else the installed pyspark's
    home without ``pyspark.zip`` (made if missing), else — where that cannot be made (a read-only
    cache directory) — the installed package itself, as pyspark itself would."""
    given = os.environ.get("SPARK_HOME")
    if given:
        return Path(given)
    package = installed()
    try:
        return build(package) or package
    except OSError:
        return package


def use() -> None:
    """Set ``SPARK_HOME`` to :func:`current` before the driver JVM starts: Spark's launcher and every
    Python process Spark starts read it."""
    os.environ["SPARK_HOME"] = str(current())
