"""Scrubbing replicas (the roll daemon's housekeeping, each present copy about once a day): a copy's
files read back and hashed, compared with the SHA-256s verified when it was copied. A copy that
differs is no longer present: queries there fall back to the primary, and the next copy pass
copies it again (:mod:`scheduler.replication`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from metastore import clock, storage
from metastore.catalog import Catalog
from metastore.delta.files import live_files
from metastore.logs import event
from metastore.models import Table, iso
from scheduler.file_copies import sha256_of

log = logging.getLogger("streampart.scheduler")


@dataclass(frozen=True)
class ScrubFinding:
    """A present copy whose files differ from what was verified when it was copied."""

    table: str
    cluster: str
    partition: str
    path: str
    error: str


def scrub(
    catalog: Catalog,
    table: Table,
    verified_before: datetime | None = None,
    limit: int = 4,
) -> tuple[int, list[ScrubFinding]]:
    """Verify present copies of ``table`` on its secondaries against their recorded SHA-256s.

    Up to ``limit`` copies not verified since ``verified_before`` (default: a day ago), least
    recently verified first; each file of the copy is read and hashed. A copy whose file is missing
    or differs (a flipped byte: same size, other digest) is *invalidated* — no longer present,
    so queries on that secondary stop reading the partition (they fall back to the primary) and
    the next copy pass copies it again, replacing the damaged file (``copy_verified``). A copy
    made before digests were recorded is compared with the primary's files, and its digests
    recorded. Returns how many copies were verified, and what was found.
    """
    store = catalog.home(table).store
    verified_before = verified_before or clock.now() - timedelta(days=1)
    replicas = {r.cluster: r for r in catalog.replicas.list(table)}
    checked, found = 0, []
    for copy in store.copies_to_verify(table.id, verified_before, limit):
        replica = replicas.get(copy.cluster)
        if replica is None:
            continue
        expected = copy.file_digests
        if expected is None:  # copied before digests were recorded: the primary's files say
            primary = [f for f in live_files(catalog.load(table)) if f.partition == copy.partition_value]
            expected = {f.path: sha256_of(storage.join(table.location, f.path))[1] for f in primary}
        problem = None
        for path, digest in sorted(expected.items()):
            where = storage.join(replica.location, path)
            try:
                actual = sha256_of(where)[1]
            except FileNotFoundError:
                problem = (path, f"file {where} is missing")
                break
            if actual != digest:
                problem = (
                    path,
                    f"file {where} has SHA-256 {actual}, but {digest} was verified when it was copied",
                )
                break
        checked += 1
        if problem is None:
            store.copy_verified(copy, expected)
            continue
        error = (
            f"replica on {copy.cluster}: partition {iso(copy.partition_value)} of {table.name}: "
            f"{problem[1]}; no longer read there, and copied again by the next copy pass"
        )
        if store.invalidate_copy(copy, error):
            found.append(
                ScrubFinding(str(table.name), copy.cluster, iso(copy.partition_value), problem[0], error)
            )
            event(log, logging.WARNING, "replica.damaged", "a replica file differs from its verified digest",
                  table=str(table.name), cluster=copy.cluster, partition=iso(copy.partition_value),
                  path=problem[0], error=error)  # fmt: skip
    return checked, found
