"""The HTTP chunk API (``streampart serve``): the chunk protocol and Flume's events over HTTP.

Thin and lazy: the settings import :mod:`ingest.api.config` on every CLI start, which must not
pull in FastAPI; :func:`create_app` loads the app module on first use.

The modules: ``app`` assembles the FastAPI app from ``routes`` (one router per resource:
chunks, events, tables, ops), ``state`` and ``deps`` (what routes share, and the caller),
``models`` (request and response bodies), ``bodies`` (streamed request bodies within limits),
``uploads`` (staging an upload or events batch), ``errors`` and ``handlers`` (errors and their
answers), ``auth`` (tokens), ``metrics``, ``docs`` (Swagger UI), ``media`` (content types,
shared with :mod:`ingest.client`), ``config`` and ``protocol`` (``streampart serve``'s settings
and connections).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from ingest.api.app import create_app

        return create_app
    if name == "ServerConfig":
        from ingest.api.config import ServerConfig

        return ServerConfig
    raise AttributeError(name)
