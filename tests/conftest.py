from tests.fixtures import catalog, metastore_url, spark, sqlite_catalog  # noqa: F401
