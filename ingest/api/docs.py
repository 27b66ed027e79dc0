"""Interactive API docs at ``/docs``: Swagger UI served from the swagger-ui-py package's own files.

Loading them from a CDN (FastAPI's default) fails on a closed network and lets a third party
run script in the page that holds the user's token. Off with ``server.docs = false``; the
OpenAPI JSON at ``/openapi.json`` is always served.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI


def serve_docs(app: FastAPI) -> None:
    """Mount Swagger UI's files at /docs/static and its page at /docs."""
    import swagger_ui
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles

    app.mount("/docs/static", StaticFiles(directory=Path(swagger_ui.__file__).parent / "static"), name="docs")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="streampart API",
            swagger_js_url="/docs/static/swagger-ui-bundle.js",
            swagger_css_url="/docs/static/swagger-ui.css",
            swagger_favicon_url="/docs/static/favicon-32x32.png",
        )
