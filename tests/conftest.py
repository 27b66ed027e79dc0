from tests.fixtures import catalog, kafka_broker, metastore_url, spark, sqlite_catalog  # noqa: F401
