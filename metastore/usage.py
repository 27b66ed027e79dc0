"""A namespace's capacity, read from the Delta logs: what it owns, and what it reads through links.

*Owned* is every live file of the namespace's tables (dead-letter and late-data tables
included), standard and streaming apart; this is what its quota caps. *Linked* is what its
links show now, each at one version of its source: shown, never charged, for a partition shared
through links is charged once, to the namespace that owns its table. Figures are those of the
newest Delta version of each table, so they agree with any Delta reader of the directories. A
table or link that cannot be read (a damaged log, a dropped source) is named in ``errors``
instead of stopping the whole report.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from metastore import clock
from metastore.catalog import Catalog
from metastore.delta.files import LiveFile, live_files
from metastore.errors import StreampartError
from metastore.namespaces import Holding, Usage


def holding(name: str, kind: str, version: int, files: Iterable[LiveFile]) -> Holding:
    """What ``files`` of one snapshot add up to, standard and streaming (staged) apart."""
    h = Holding(name=name, kind=kind, version=version)
    for f in files:
        if f.staged:
            h.streaming_bytes += f.size
            h.streaming_files += 1
            h.streaming_rows += f.rows
        else:
            h.standard_bytes += f.size
            h.standard_files += 1
            h.standard_rows += f.rows
    return h


def namespace_usage(catalog: Catalog, namespace: str, now: datetime | None = None) -> Usage:
    """The usage of ``namespace`` (NotFoundError if it does not exist)."""
    home = catalog.home(namespace).store
    ns = home.get_namespace(namespace)
    now = now or clock.now()
    usage = Usage(namespace=ns.name, quota_bytes=ns.quota_bytes)
    for table in home.list_tables():
        if table.name.namespace != ns.name:
            continue
        try:
            dt = catalog.load(table)
        except StreampartError as exc:  # a damaged table stops only its own figure
            usage.errors[str(table.name)] = str(exc)
            continue
        usage.owned.append(holding(str(table.name), table.kind.value, int(dt.version()), live_files(dt)))
    for link in home.list_links(ns.name):
        try:
            source = catalog.links.source(link)
            dt = catalog.load(source)
            files = link.filter(live_files(dt), source, now)
        except StreampartError as exc:  # a dangling or damaged source stops only its own figure
            usage.errors[str(link.name)] = str(exc)
            continue
        usage.linked.append(holding(str(link.name), "link", int(dt.version()), files))
    return usage
