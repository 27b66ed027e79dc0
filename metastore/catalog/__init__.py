"""The catalog: the SQL metastore and the Delta warehouse seen as one (see :mod:`metastore.catalog.core`).

``core.py`` holds :class:`Catalog` (opening, tables, what names stand for), ``routing.py`` the
one routing step every verb goes through; each other concept is a service reached as an
attribute, with its verbs in a module of its own: ``catalog.clusters`` (``clusters.py``),
``catalog.namespaces`` (``namespaces.py``), ``catalog.links`` (``links.py``), ``catalog.replicas``
(``replicas.py``), and ``catalog.federation`` (:mod:`metastore.catalog.federation`).
"""

from metastore.catalog.core import DEAD_LETTER_COLUMNS, Catalog

__all__ = ["DEAD_LETTER_COLUMNS", "Catalog"]
