from tests.fixtures import (  # noqa: F401
    catalog,
    kafka_broker,
    metastore_url,
    private_pg,
    private_pg_server,
    spark,
    spark_standalone,
    sqlite_catalog,
)

pytest_plugins = ["tests.markers"]
