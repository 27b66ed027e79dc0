"""streampart's front: configuration, the command line, Spark queries and the demo.

A top-level package of its own because these parts span every component (metastore, ingest,
scheduler) and belong to none of them.
"""

import importlib.metadata

__all__ = ["__version__"]

__version__ = importlib.metadata.version("streampart")
