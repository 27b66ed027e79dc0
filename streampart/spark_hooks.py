"""streampart's Java hooks for Spark (``streampart/java/``), compiled on first use.

Every SparkSession streampart makes (:func:`streampart.query.spark_session`) runs with them as
``spark.sql.extensions``: Spark's own analyzer resolves a statement's table names to the pinned
snapshots the driver staged (``Statements``), and a check rule refuses what the analyzed plan
may not hold (``Policy``). The SQL server adds its authentication and parser hooks (``Auth``,
``Extensions.Parser``, ``Hooks``). The classes are compiled with ``javac`` against the pyspark
wheel's jars into a cache directory keyed by their sources and Spark's version.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from streampart.errors import SparkHooksError

JAVA_SOURCES = Path(__file__).with_name("java")
EXTENSIONS = "streampart.sqlserver.Extensions"


def compile_hooks(cache: Path | None = None) -> Path:
    """The directory of the compiled Java hooks, compiled on first use (keyed by their sources).

    Raises:
        SparkHooksError: there is no ``javac`` (a JDK 17 is needed), or it failed.
    """
    import pyspark

    sources = sorted(JAVA_SOURCES.glob("*.java"))
    digest = hashlib.sha256(pyspark.__version__.encode())
    for src in sources:
        digest.update(src.read_bytes())
    root = cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streampart"
    out = root / f"spark-hooks-{digest.hexdigest()[:16]}"
    if (out / "streampart" / "sqlserver" / "Hooks.class").is_file():
        return out
    javac = shutil.which("javac")
    if javac is None:
        raise SparkHooksError("streampart needs javac (a JDK 17) to compile its Spark hooks once")
    jars = Path(pyspark.__file__).parent / "jars"
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".hooks-", dir=root))
    done = subprocess.run(
        [javac, "-nowarn", "-d", str(tmp), "-cp", f"{jars}/*", *map(str, sources)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        first = (done.stderr or done.stdout).strip().splitlines()[:1]
        raise SparkHooksError(f"javac could not compile streampart's Spark hooks: {' '.join(first)}")
    try:
        tmp.rename(out)
    except OSError:  # another process compiled them meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return out
