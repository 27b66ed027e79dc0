"""streampart's Java hooks for Spark (``streampart/java/``), compiled on first use.

Every SparkSession streampart makes (:func:`streampart.query.spark_session`) runs with them as
``spark.sql.extensions``: Spark's own analyzer resolves a statement's table names to the pinned
snapshots the driver staged (``Statements``), and a check rule refuses what the analyzed plan
may not hold (``Policy``). The SQL server adds its authentication and parser hooks (``Auth``,
``Extensions.Parser``, ``Hooks``). The classes are compiled with ``javac`` against the pyspark
wheel's jars into one jar in a cache directory, keyed by their sources and Spark's version (a jar,
not a directory of classes: the JVM's class archive, :mod:`streampart.class_archive`, takes jars
only).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from streampart.errors import SparkHooksError

JAVA_SOURCES = Path(__file__).with_name("java")
EXTENSIONS = "streampart.sqlserver.Extensions"


def compile_hooks(cache: Path | None = None) -> Path:
    """The jar of the compiled Java hooks, compiled on first use (keyed by their sources).

    Raises:
        SparkHooksError: there is no ``javac`` (a JDK 17 is needed), or it failed.
    """
    import pyspark

    sources = sorted(JAVA_SOURCES.glob("*.java"))
    digest = hashlib.sha256(pyspark.__version__.encode())
    for src in sources:
        digest.update(src.read_bytes())
    root = cache or cache_dir()
    out = root / f"spark-hooks-{digest.hexdigest()[:16]}.jar"
    if out.is_file():
        return out
    javac = shutil.which("javac")
    if javac is None:
        raise SparkHooksError("streampart needs javac (a JDK 17) to compile its Spark hooks once")
    jars = Path(pyspark.__file__).parent / "jars"
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".hooks-", dir=root))
    try:
        done = subprocess.run(
            [javac, "-nowarn", "-d", str(tmp / "classes"), "-cp", f"{jars}/*", *map(str, sources)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            first = (done.stderr or done.stdout).strip().splitlines()[:1]
            raise SparkHooksError(f"javac could not compile streampart's Spark hooks: {' '.join(first)}")
        with zipfile.ZipFile(tmp / "hooks.jar", "w") as jar:
            for cls in sorted((tmp / "classes").rglob("*.class")):
                jar.write(cls, cls.relative_to(tmp / "classes").as_posix())
        (tmp / "hooks.jar").replace(out)  # atomic: a process racing this one gets the same jar
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def cache_dir() -> Path:
    """streampart's cache directory (``$XDG_CACHE_HOME/streampart``, else ``~/.cache/streampart``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streampart"
