"""The suite's shared fixtures and plugins, and the JVM flags of every Spark it starts.

Every Spark driver the suite starts (the session's own and those of the commands it runs) and the
standalone cluster's daemons (``tests/standalone.py``) compile with C1 only: tests run Spark for
seconds on a few rows, where C2's optimising compiler is CPU the other test workers need (a
driver's start and first query: about 21 CPU-seconds with C2, 13 with C1 only, on the 2-core build
machine). Benchmarks (``bench/``) and the product keep the JVM's default.
"""

import os

from tests.fixtures import (  # noqa: F401
    catalog,
    kafka_broker,
    metastore_url,
    private_pg,
    private_pg_server,
    s3_root,
    s3_server,
    spark,
    spark_standalone,
    sqlite_catalog,
    storage_catalog,
)

TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
for _variable in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
    if TEST_JVM_OPTIONS not in os.environ.get(_variable, ""):
        os.environ[_variable] = f"{os.environ.get(_variable, '')} {TEST_JVM_OPTIONS}".strip()

pytest_plugins = ["tests.markers", "tests.scheduling", "tests.registry"]
