"""Space given back on a table's secondaries (issue 30): the files an expiry or a delete made
unreachable there.

A secondary's log records its own removes (an expiry's one commit there, a copy of a partition a
delete rewrote swapping the files that changed), and no metastore row lists those files. So
housekeeping keeps a secondary's log as it keeps the primary's (checkpoints; commit files past the
secondary's ``delta.logRetentionDuration`` deleted), and then deletes a data file in a partition's
directory there once

- no version the secondary's log still holds lists it (time travel there promises every such
  version: the primary's version rule), and
- the oldest version the log holds was committed longer ago than ``[scheduler.housekeeping]
  retention`` (the removal came before it: a query pinned before the removal is over), and the
  file is that old too, and
- the partition's copy there is PRESENT or EXPIRED, read before the listing: a copy in flight
  (COPYING, STALE, ABSENT) writes files its commit has not listed yet. A delete that makes a copy
  STALE after that read makes the next copy write the delete's new files, which are younger than
  the retention.

An expired copy's directory goes whole once no data file is left in it.
"""

from __future__ import annotations

from datetime import datetime

from metastore import storage
from metastore.catalog import Catalog
from metastore.delta.files import disk_path, live_files
from metastore.delta.history import commit_time, oldest_readable_version
from metastore.delta.layout import partition_dir
from metastore.delta.log import commit_actions, newest_version
from metastore.models import Table
from metastore.replicas import CopyState, Replica, replica_table

_SETTLED = (CopyState.PRESENT, CopyState.EXPIRED)


def listed_by_readable_versions(catalog: Catalog, target: Table, oldest: int) -> set[str]:
    """Every data file some version of ``target``'s log still holds lists: the oldest readable
    version's files and every file a later commit added."""
    newest = newest_version(target, oldest)  # a few file checks, not a load of the whole table
    if newest is None:  # the log's tail is damaged: the load names it
        newest = int(catalog.warehouse.load(target).version())
    listed = {f.path for f in live_files(catalog.warehouse.load(target, oldest))}
    for version in range(oldest + 1, newest + 1):
        for action in commit_actions(target, version) or []:
            path = (action.get("add") or {}).get("path")
            if path:
                listed.add(disk_path(path))
    return listed


def reclaim_secondary(catalog: Catalog, table: Table, replica: Replica, cutoff: datetime) -> int:
    """Delete the files on ``replica``'s cluster that no readable version there lists, of partitions
    whose copy is settled, older than ``cutoff`` (see the module's docstring); how many went. The
    caller has checked that the secondary has a Delta log (something was copied there)."""
    target = replica_table(table, replica)
    states = {
        c.partition_value: c.state
        for c in catalog.store.list_copies(table.id, replica.cluster)
        if c.state in _SETTLED
    }
    oldest = oldest_readable_version(target)
    since = commit_time(target, oldest)
    if since is None or since >= cutoff:
        return 0  # a removal the log forgot may be younger than the retention
    listed = listed_by_readable_versions(catalog, target, oldest)
    before_ms, gone = int(cutoff.timestamp() * 1000), 0
    for value, state in states.items():
        rel = partition_dir(table, value)
        directory = storage.join(target.location, rel)
        data = [e for e in storage.list_dir(directory) if not e.is_dir and not e.name.startswith(("_", "."))]
        unlisted = [e for e in data if f"{rel}/{e.name}" not in listed]
        stale = [e for e in unlisted if e.mtime_ms < before_ms]
        if stale:
            storage.delete([storage.join(directory, e.name) for e in stale])
            gone += len(stale)
        if state is CopyState.EXPIRED and data and len(stale) == len(data):
            storage.delete_tree(directory)  # its marker too: the partition is gone from there
    return gone
