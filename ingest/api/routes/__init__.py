"""The routes of the HTTP API, one router per resource; :func:`ingest.api.app.create_app` includes them.

- :mod:`~ingest.api.routes.chunks`: open a chunk, upload its data, commit or abort it, read its state.
- :mod:`~ingest.api.routes.events`: commit a batch of events as one chunk.
- :mod:`~ingest.api.routes.tables`: the tables a token may read.
- :mod:`~ingest.api.routes.deletes`: delete a table's rows by predicate (admin).
- :mod:`~ingest.api.routes.namespaces`: namespaces, their usage and their links.
- :mod:`~ingest.api.routes.federation`: the federation's metastores and routes, for operators (``admin:*``).
- :mod:`~ingest.api.routes.ops`: health and Prometheus metrics, for operators.
- :mod:`~ingest.api.routes.iceberg`: the Iceberg REST catalog engines find the tables by (``/iceberg``).
- :mod:`~ingest.api.routes.sharing`: the Delta Sharing server recipients read shares from.
"""
