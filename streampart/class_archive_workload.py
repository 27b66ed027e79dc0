"""What the JVM that writes the class archive runs (:func:`streampart.class_archive.build`'s child).

A session started as every streampart driver starts one, SQL, a Parquet write and read, a join:
the classes a typical driver loads. Prints the driver JVM's process id last (the archive is
written as that JVM exits). Its own module: it needs :mod:`streampart.query`, which needs
:mod:`streampart.class_archive`. Pause point ``class-archive-workload`` (``STREAMPART_PAUSEPOINT``,
:mod:`metastore.crashpoints`): once Spark runs, so a test can hold a build while its JVM lives.
"""

from __future__ import annotations

import tempfile

from metastore.crashpoints import pausepoint
from streampart.query import spark_session


def main() -> None:
    spark = spark_session()
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    pausepoint("class-archive-workload")
    spark.sql("SELECT 1 AS one").collect()
    with tempfile.TemporaryDirectory() as tmp:
        frame = spark.createDataFrame([(1, "a"), (2, "b")], "id BIGINT, msg STRING")
        frame.write.parquet(f"{tmp}/t")
        spark.read.parquet(f"{tmp}/t").groupBy("msg").count().collect()
        spark.read.schema("id BIGINT, msg STRING").parquet(f"{tmp}/t").join(frame, "id").collect()
    spark.stop()
    print(pid)


if __name__ == "__main__":
    main()
