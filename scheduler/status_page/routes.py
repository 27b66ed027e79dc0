"""The status page's routes, under ``/ui``, and the token that opens it.

A browser cannot send a bearer header on its own, so the page asks for the token once (a form)
and keeps it in a cookie: ``HttpOnly`` (the page's script never sees it), ``SameSite=Strict``
(another site cannot make the browser send it), scoped to ``/ui``. Every answer checks the token
as the API does (:class:`~ingest.api.auth.Authenticator`, with its short cache) and shows only the
namespaces it may read; without a known token the page shows the form and no data, and
``/ui/status.json`` answers 401. ``status.json`` also takes ``Authorization: Bearer``.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from ingest.api.auth import Authenticator, Principal
from ingest.api.ttl_cache import TtlCache
from metastore.catalog import Catalog
from metastore.models import Permission
from scheduler.config import SchedulerConfig
from scheduler.status import scheduler_status
from scheduler.status_page import render

COOKIE = "streampart_ui_token"
# Why a week: an operator opens the page during an incident; asking for the token again every
# day would be in the way, and revoking the token (streampart token revoke) ends it at once anyway.
COOKIE_MAX_AGE_S = 7 * 24 * 3600
# How many of each table's newest partitions the timeline shows: half a day of hourly rolls, a
# screenful on a phone; and the query stays one index range per table.
TIMELINE_PARTITIONS = 12
# Why 1 s: several operators' pages refreshing every few seconds share one round of metastore
# queries per second for each set of scopes, and what they see is at most a second old.
STATUS_CACHE_S = 1.0
# The recent roll attempts listed under the timelines: the last few minutes of a failing table.
RECENT_ROLLS = 10
_STATIC = {"ui.css": "text/css; charset=utf-8", "ui.js": "text/javascript; charset=utf-8"}


@dataclass
class StatusPage:
    """What the page's routes work with (``app.state.status_page``)."""

    catalog: Catalog
    config: SchedulerConfig
    authenticator: Authenticator
    auth: bool = True  # False only for ``streampart serve --insecure-no-auth``
    read_only_note: str = ""  # shown under the title, e.g. which daemon serves the page
    _answers: TtlCache[tuple[str, ...], dict[str, Any]] = field(
        default_factory=lambda: TtlCache(STATUS_CACHE_S), repr=False
    )

    def principal(self, request: Request) -> Principal | None:
        """Who asks: the token of the cookie or the bearer header; None without a known one."""
        if not self.auth:
            return Principal(None, insecure=True)
        credential = request.cookies.get(COOKIE)
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            credential = header[7:].strip()
        if not credential:
            return None
        token = self.authenticator.authenticate(credential)
        return None if token is None else Principal(token)

    def status(self, who: Principal) -> dict[str, Any]:
        """The scheduler's status as ``who`` may see it (only the namespaces it may read)."""
        scopes = ("*auth off*",) if who.token is None else tuple(sorted(str(s) for s in who.token.scopes))
        info = self._answers.get(
            scopes,
            lambda: scheduler_status(
                self.catalog,
                self.config,
                may_read=lambda namespace: who.allows(Permission.READ, namespace),
                timeline=TIMELINE_PARTITIONS,
                limit=RECENT_ROLLS,
            ),
        )
        return {**info, "viewer": who.name, "refresh_seconds": self.config.status_refresh.total_seconds()}


def _page(request: Request) -> StatusPage:
    page: StatusPage = request.app.state.status_page
    return page


router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("", response_class=HTMLResponse)
@router.get("/", response_class=HTMLResponse)
async def page(request: Request) -> Response:
    """The page: the status rendered on the server, or the token form."""
    sp = _page(request)
    who = await run_in_threadpool(sp.principal, request)
    if who is None:
        error = "unknown or revoked token" if request.cookies.get(COOKIE) else None
        return HTMLResponse(render.login(error), status_code=401)
    info = await run_in_threadpool(sp.status, who)
    return HTMLResponse(render.page(info, sp.read_only_note, can_log_out=sp.auth))


@router.get("/fragment", response_class=HTMLResponse)
async def fragment(request: Request) -> Response:
    """The page's body alone: what its script swaps in at every refresh (401: ask for a token)."""
    sp = _page(request)
    who = await run_in_threadpool(sp.principal, request)
    if who is None:
        return HTMLResponse("", status_code=401)
    return HTMLResponse(render.body(await run_in_threadpool(sp.status, who)))


@router.get("/status.json")
async def status_json(request: Request) -> Response:
    """The status the page shows, as JSON (``scheduler status --json`` plus traffic and timelines)."""
    sp = _page(request)
    who = await run_in_threadpool(sp.principal, request)
    if who is None:
        return JSONResponse(
            {"error": "unauthorized", "message": "no known token: send 'Authorization: Bearer <token>'"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    return JSONResponse(await run_in_threadpool(sp.status, who))


@router.post("/login")
async def login(request: Request) -> Response:
    """The token form: a known token goes into the cookie; an unknown one gets the form again."""
    sp = _page(request)
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    client = request.client.host if request.client is not None else "unknown"
    known = not sp.auth
    if sp.auth and token:  # a login attempt: logged and slowed when it fails, as the API's
        known = await sp.authenticator.login(token, client) is not None
    if not known:
        return HTMLResponse(render.login("unknown or revoked token" if token else "enter a token"), 401)
    answer = RedirectResponse("/ui/", status_code=303)
    answer.set_cookie(
        COOKIE, token, max_age=COOKIE_MAX_AGE_S, path="/ui", httponly=True, samesite="strict",
        secure=request.url.scheme == "https",
    )  # fmt: skip
    return answer


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Forget the token (the cookie); the page asks for one again."""
    answer = RedirectResponse("/ui/", status_code=303)
    answer.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict")
    return answer


@router.get("/static/{name}")
async def static(name: str) -> Response:
    """The page's stylesheet and script, from the package (never a CDN)."""
    if name not in _STATIC:
        return Response("not found", status_code=404, media_type="text/plain")
    data = importlib.resources.files("scheduler.status_page").joinpath("static", name).read_bytes()
    return Response(data, media_type=_STATIC[name], headers={"Cache-Control": "max-age=300"})


def standalone_app(page: StatusPage) -> FastAPI:
    """The page alone (``scheduler run --status-port``): ``/ui`` and its parts, ``/`` leads there."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.state.status_page = page
    app.include_router(router)

    @app.get("/", include_in_schema=False)
    async def root() -> Response:
        return RedirectResponse("/ui/", status_code=307)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        return JSONResponse({"ok": True})

    return app
