"""Spark DataFrames over a list of Parquet files, handed to the JVM in one call.

``spark.read.parquet(*paths)`` hands the paths to the JVM through py4j one by one (a Python list
becomes a Java list an element at a time): 10,000 files took about 0.5 s of a query's planning
for that alone. Here they travel as one string, split in the JVM into the ``String[]`` the
reader's varargs take. Shared by the roll's Spark compaction and the query path (which sits
above this layer), so it lives here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_SEPARATOR = "\n"


def parquet_files(spark: SparkSession, ddl: str, paths: Sequence[str]) -> DataFrame:
    """``spark.read.schema(ddl).parquet(*paths)``, the paths handed over in one py4j call."""
    from pyspark.sql import DataFrame

    reader = spark.read.schema(ddl)
    if len(paths) < 2 or any(_SEPARATOR in p for p in paths):
        return reader.parquet(*paths)
    jvm = spark._jvm
    assert jvm is not None
    pattern = jvm.java.util.regex.Pattern
    array = pattern.compile(_SEPARATOR, pattern.LITERAL).split(_SEPARATOR.join(paths))
    return DataFrame(reader._jreader.parquet(array), spark)
