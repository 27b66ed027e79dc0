"""The operators' status page (``/ui``): every table's traffic and rolls, and the daemons, at a glance.

Why here, in ``scheduler``: the page shows the roll daemon's view (:func:`scheduler.status.scheduler_status`:
leaders, due and late rolls, failures) beside the tables' traffic, and the import layers let only
``scheduler`` and above read both it and the HTTP API's tokens (``ingest.api.auth``). The HTTP
API itself (``ingest``) may not import the scheduler, so the page is a router of its own that
``streampart serve`` adds to the API's app and ``streampart scheduler run --status-port`` serves
alone (read-only, like the whole page).

- ``routes``: the router: the page, its HTML fragment and JSON, the token form and cookie
- ``render``: the page's HTML, rendered on the server from the status (one renderer: the
  page's script only swaps in the fragment it fetches)
- ``static/``: the page's stylesheet and small hand-written script, served by the server itself
"""

from __future__ import annotations

from scheduler.status_page.routes import StatusPage, router, standalone_app

__all__ = ["StatusPage", "router", "standalone_app"]
