"""FastAPI dependencies of the routes: the app's :class:`~ingest.api.state.ApiState` and the caller.

Routes declare ``st: State`` and ``who: Caller`` rather than closing over the app's objects,
so a route module needs no app to be defined in. ``State`` is ``request.app.state.api``;
``Caller`` is the :class:`~ingest.api.auth.Principal` of the request's bearer token (401
without a known one), or anyone when the app runs with ``auth=False``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ingest.api.auth import Principal
from ingest.api.errors import ApiError
from ingest.api.state import ApiState

bearer = HTTPBearer(auto_error=False, description="A token made by `streampart token create`.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


def api_state(request: Request) -> ApiState:
    """The state of the app serving ``request``."""
    state: ApiState = request.app.state.api
    return state


State = Annotated[ApiState, Depends(api_state)]


async def authenticate(
    st: ApiState,
    credentials: HTTPAuthorizationCredentials | None,
    client: str = "unknown",
    fresh: bool = False,
) -> Principal:
    """The caller with ``credentials``; 401 without a bearer token or with an unknown one.

    A live token is always accepted at once, whatever failed before from ``client`` (its address);
    an unknown, revoked or expired one is logged and its 401 delayed (:mod:`ingest.login_guard`).
    ``fresh``: the token is looked up in the metastore now, not in the server's cache.
    """
    if not st.auth:
        return Principal(None, insecure=True)
    challenge = {"WWW-Authenticate": "Bearer"}
    if credentials is None:
        raise ApiError(
            401, "unauthorized", "no bearer token: send 'Authorization: Bearer <token>'",
            "Authorization", challenge,
        )  # fmt: skip
    token = await st.authenticator.login(credentials.credentials, client, fresh)
    if token is None:
        raise ApiError(401, "unauthorized", "unknown, revoked or expired token", "Authorization", challenge)
    return Principal(token)


def client_address(request: Request) -> str:
    """The address a request came from: its peer's, or, when the peer is one of the settings'
    ``server.trusted_proxies``, the client that proxy forwarded (X-Forwarded-For, read by the app's
    outermost middleware, :func:`ingest.api.app.create_app`). Failed logins count against it."""
    return request.client.host if request.client is not None else "unknown"


async def principal(request: Request, st: State, credentials: Credentials) -> Principal:
    return await authenticate(st, credentials, client_address(request))


Caller = Annotated[Principal, Depends(principal)]


async def reader(request: Request, st: State, credentials: Credentials) -> Principal:
    """The caller of a catalog other engines read through: its token looked up afresh (a revoked
    token is refused from the moment it is revoked, on every server)."""
    return await authenticate(st, credentials, client_address(request), fresh=True)


Reader = Annotated[Principal, Depends(reader)]
