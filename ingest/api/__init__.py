"""The HTTP chunk API (``streampart serve``): the chunk protocol and Flume's events over HTTP.

Thin and lazy: the settings import :mod:`ingest.api.config` on every CLI start, which must not
pull in FastAPI; :func:`create_app` loads the app module on first use.
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
