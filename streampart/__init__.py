"""streampart's front: configuration, the command line, Spark queries and the demo.

A top-level package of its own because these parts span every component (metastore, ingest,
scheduler) and belong to none of them.
"""

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    # read when asked (streampart --version): importlib.metadata costs every command ~50 ms at start
    if name == "__version__":
        from importlib.metadata import version

        return version("streampart")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
