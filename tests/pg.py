"""Scratch PostgreSQL metastores for tests and benchmarks: one schema per run, dropped afterwards.

No pytest here: ``bench/`` uses it too.
"""

from __future__ import annotations

import os
import uuid

import sqlalchemy as sa

PG_ADMIN_URL = os.environ.get("STREAMPART_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _run(admin_url: str, sql: str) -> None:
    engine = sa.create_engine(admin_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(sql))
    finally:
        engine.dispose()


def scratch_schema_url(prefix: str = "sp_test", admin_url: str = PG_ADMIN_URL) -> str:
    """The URL of a new, empty schema ``<prefix>_<random>`` (the metastore's tables go there)."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    _run(admin_url, f"CREATE SCHEMA {schema}")
    return f"{admin_url}?options=-csearch_path%3D{schema}"


def drop_scratch_schema(url: str | None, admin_url: str = PG_ADMIN_URL) -> None:
    """Drop the schema of a :func:`scratch_schema_url` URL; any other URL is left alone."""
    if not url or "search_path" not in url:
        return
    _run(admin_url, f"DROP SCHEMA IF EXISTS {url.rsplit('%3D', 1)[1]} CASCADE")
