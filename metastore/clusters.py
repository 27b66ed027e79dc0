"""Clusters: named storage roots with the Spark master that computes next to each (HIVE's multi-cluster seed).

A table has one **primary** cluster, which holds all its data and takes every write; later,
secondaries hold whole copies of its rolled (immutable) standard partitions. The registry lives
in the metastore, so every host, daemon and API server agrees on it; a host may override a
cluster's Spark master in its own config (as HIVE's ``hive.cluster.properties``).

The cluster ``default`` is the warehouse a process is started with (``--warehouse`` and
``spark.master``): it needs no row, so warehouses made before clusters existed are unchanged.
"""

from __future__ import annotations

import re
import tempfile
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from metastore import storage
from metastore.errors import UserInputError
from metastore.models import check_identifier

DEFAULT_CLUSTER = "default"


class Cluster(BaseModel):
    """A cluster as recorded in the metastore (or ``default``, from the process's own settings)."""

    model_config = ConfigDict(frozen=True)

    name: str
    storage: str = Field(
        description="Root directory of the cluster's tables (a local or mounted shared path)."
    )
    spark_master: str | None = Field(description="The Spark master next to the storage (None: spark.master).")
    conf: dict[str, str] = Field(default_factory=dict, description="Spark settings for jobs on this cluster.")
    created_at: datetime | None = None


def check_cluster_name(name: str) -> str:
    """A cluster's name: a plain identifier, and not ``default`` (the process's own warehouse)."""
    check_identifier(name, "cluster name")
    if name == DEFAULT_CLUSTER:
        raise UserInputError(
            "cluster 'default' is the warehouse a process starts with (--warehouse, spark.master); "
            "it needs no registration: choose another name"
        )
    return name


def check_storage(path: str) -> str:
    """A cluster's storage root: an existing, writable directory, named by its absolute path; or a
    bucket's ``s3://bucket/prefix`` whose bucket answers (nothing is made there).

    Raises:
        UserInputError: naming the path and what is wrong with it.
    """
    if storage.is_remote(path):
        storage.check_root(path, "--storage")
        return storage.normalize(path)
    root = Path(path).expanduser()
    if not root.exists():
        raise UserInputError(f"storage {path!r} does not exist: create the directory (or mount it) first")
    if not root.is_dir():
        raise UserInputError(f"storage {path!r} is not a directory")
    try:  # a real write: permission bits say nothing of a read-only mount, or to root
        tempfile.NamedTemporaryFile(dir=root, prefix=".streampart-probe-").close()
    except OSError as exc:
        raise UserInputError(
            f"storage {path!r} is not writable by this process: {exc.strerror or exc}"
        ) from None
    return str(root.resolve())


# Spark's own rule for master URLs, checked here: in the JVM a bad one fails with a stack trace.
_MASTER = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[[\d, ]+\]|yarn|(spark|k8s|mesos)://.+")


def check_spark_master(url: str) -> str:
    """A Spark master URL: ``local[N]``, ``spark://HOST:PORT``, ``yarn`` or ``k8s://…``."""
    if not _MASTER.fullmatch(url):
        raise UserInputError(
            f"{url!r} is not a Spark master: use local[N], spark://HOST:PORT, yarn or k8s://…"
        )
    return url


def parse_conf(items: list[str]) -> dict[str, str]:
    """``--conf k=v`` options as a mapping (a key given twice: the last wins)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserInputError(
                f"--conf {item!r} must have the form KEY=VALUE (e.g. spark.executor.memory=4g)"
            )
        out[key.strip()] = value.strip()
    return out
