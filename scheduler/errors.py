"""Errors of the roll operation."""

from __future__ import annotations

from metastore.errors import RetriableError, StreampartError


class RollError(StreampartError):
    """Root of the scheduler package's errors."""


class RollBusyError(RollError, RetriableError):
    """Another roller holds this roll's lease."""
