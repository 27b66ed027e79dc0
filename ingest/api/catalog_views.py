"""What the catalogs other engines read through (Iceberg REST, Delta Sharing) show a caller.

Both protocols list namespaces and tables and load one table at one snapshot; both go through here,
so both see exactly what ``streampart query`` would let the same token read:

- a token lists only the namespaces it may read (``read:NS``, or ``admin``), and in them their
  tables and their links (a link is a table of the linking namespace; its rows are its source's
  files, the partitions it admits); a link whose source was dropped is left out;
- a table is loaded at one Delta version (:func:`metastore.snapshots.pin`): every chunk committed by
  then, none after, none uncommitted;
- a keyed table shows its *resolved* rows only: the files of its standard partitions, where a roll
  left one row per key. Versions still in its open partitions (upserts and deletes not yet rolled)
  are not in any file a plain reader could read correctly, so they appear when their partition rolls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from ingest.api.auth import Principal
from ingest.api.state import ApiState
from metastore.iceberg import View
from metastore.links import Resolved
from metastore.models import Permission
from metastore.snapshots import Snapshot, pin, view_of


def readable_namespaces(st: ApiState, who: Principal) -> list[str]:
    """The namespaces ``who`` may read, by name."""
    found = st.catalog.namespaces.list().merged()
    return sorted(n.name for n in found if who.allows(Permission.READ, n.name))


def readable_in(st: ApiState, who: Principal, namespace: str) -> Iterator[Resolved]:
    """The tables and links of ``namespace`` (one ``who`` may read: checked by the caller), by name."""
    found: list[Resolved] = []
    for t in st.catalog.list_tables().merged():
        if t.name.namespace == namespace and who.allows(Permission.READ, namespace):
            found.append(Resolved(t.name, t))
    for link in st.catalog.links.list(namespace):
        if who.allows(Permission.READ, namespace) and not st.catalog.links.is_dangling(link):
            found.append(st.catalog.resolve(link.name, namespace))
    yield from sorted(found, key=lambda r: r.name.table)


def pinned(st: ApiState, resolved: Resolved, version: int | None = None) -> Snapshot:
    """What ``resolved`` shows at ``version`` (default: the newest) to another engine."""
    snap = view_of(resolved, pin(st.catalog, resolved.table, version))
    if resolved.table.keys is not None:
        snap = dataclasses.replace(snap, files=tuple(f for f in snap.files if not f.staged))
    return snap


def iceberg_view(resolved: Resolved) -> View:
    """The Iceberg table of ``resolved``: its own, or its link's beside the source's."""
    table = resolved.table
    return View(str(resolved.name), table.location, table.uid, link=resolved.link is not None)
