"""The Spark home streampart starts Spark from (``streampart/spark_home.py``): the installed pyspark's
own entries without ``pyspark.zip``, so Spark's Python processes import compiled pyspark; a
``SPARK_HOME`` already set stands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streampart import spark_home


@pytest.mark.spark
def test_spark_python_workers_import_the_installed_pyspark_not_the_zip(spark) -> None:
    def where(batches: Any) -> Any:
        import pyarrow as pa
        import pyspark

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"file": pyspark.__file__}])

    rows = spark.range(4, numPartitions=2).mapInArrow(where, "file STRING").collect()
    installed = spark_home.installed()
    # from the zip it would be …/python/lib/pyspark.zip/pyspark/__init__.py
    assert {Path(r.file).resolve() for r in rows} == {installed / "__init__.py"}, rows
    home = spark_home.home_for(installed)
    assert (home / "jars").resolve() == installed / "jars"
    assert not (home / "python" / "lib" / spark_home.ZIP).exists()
    assert (installed / "python" / "lib" / spark_home.ZIP).is_file()  # what Spark would put first


def test_a_spark_home_already_set_stands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    spark_home.use()
    assert spark_home.current() == tmp_path


def test_the_home_is_made_whole_once_and_refused_for_a_package_without_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    package = tmp_path / "pyspark"
    for d in ("bin", "jars", "python/lib"):
        (package / d).mkdir(parents=True)
    (package / "python" / "lib" / "py4j-src.zip").write_bytes(b"")
    (package / "python" / "lib" / spark_home.ZIP).write_bytes(b"")
    home = spark_home.build(package)
    assert home is not None and spark_home.build(package) == home
    assert sorted(p.name for p in home.iterdir()) == ["bin", "jars", "python"]
    assert [p.name for p in (home / "python" / "lib").iterdir()] == ["py4j-src.zip"]
    assert list(home.parent.glob(".spark-home-*")) == []  # no half-made one left behind
    for written in spark_home.WRITTEN_BY_SPARK:  # a worker run from the package, its scripts' logs
        (package / written).mkdir()
    assert spark_home.home_for(package) == home and spark_home.build(package) == home
    (package / "python" / "lib" / "py4j-src.zip").rename(package / "python" / "lib" / "py4j-newer-src.zip")
    upgraded = spark_home.build(package)  # pyspark upgraded in place: a home of its own
    assert upgraded is not None and upgraded != home
    assert [p.name for p in (upgraded / "python" / "lib").iterdir()] == ["py4j-newer-src.zip"]
    (tmp_path / "other" / "bin").mkdir(parents=True)
    assert spark_home.build(tmp_path / "other") is None
