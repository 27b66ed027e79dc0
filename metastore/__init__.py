"""streampart's metastore: tables, partitions, chunks and rolls (SQL), and the Delta warehouse."""

from typing import TYPE_CHECKING, Any

from metastore.errors import (
    AlreadyExistsError,
    ConflictError,
    IllegalTransitionError,
    LeaseLostError,
    MetastoreUnavailableError,
    NotFoundError,
    RetriableError,
    StreampartError,
    UserInputError,
)

if TYPE_CHECKING:
    from metastore.models import (
        Chunk,
        ChunkState,
        Column,
        LateDataPolicy,
        Lease,
        Mode,
        Partition,
        PartitionState,
        Roll,
        RollState,
        StagedFile,
        Table,
        TableKind,
        TableName,
        TableSpec,
    )
    from metastore.store import Metastore, default_url

# Models and the store load on first use: Spark's Python workers import this package (for the
# errors) and must not pay for pydantic and SQLAlchemy (about a second) on every start.
_LAZY = {"Metastore": "metastore.store", "default_url": "metastore.store"}


def __getattr__(name: str) -> Any:
    import importlib

    if name in __all__ and name not in globals():
        module = importlib.import_module(_LAZY.get(name, "metastore.models"))
        return getattr(module, name)
    raise AttributeError(f"module 'metastore' has no attribute {name!r}")


__all__ = [
    "AlreadyExistsError",
    "Chunk",
    "ChunkState",
    "Column",
    "ConflictError",
    "IllegalTransitionError",
    "LateDataPolicy",
    "Lease",
    "LeaseLostError",
    "Metastore",
    "MetastoreUnavailableError",
    "Mode",
    "NotFoundError",
    "Partition",
    "PartitionState",
    "RetriableError",
    "Roll",
    "RollState",
    "StagedFile",
    "StreampartError",
    "Table",
    "TableKind",
    "TableName",
    "TableSpec",
    "UserInputError",
    "default_url",
]
