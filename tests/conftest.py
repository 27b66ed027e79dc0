from tests.fixtures import (  # noqa: F401
    catalog,
    kafka_broker,
    metastore_url,
    spark,
    spark_standalone,
    sqlite_catalog,
)
