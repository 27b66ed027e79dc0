"""Errors of the roll operation."""

from __future__ import annotations

from metastore.errors import RetriableError, StreampartError


class RollError(StreampartError):
    """Root of the scheduler package's errors."""


class RollBusyError(RollError, RetriableError):
    """Another roller holds this roll's lease."""


class RollFailedError(RollError):
    """A roll step failed for a reason of its own (the message names the roll and the cause).

    Nothing is lost: the roll stays at its last recorded step and resumes from there.
    """


class RollAbandonedError(RollError):
    """A roll stopped at a step boundary on request (shutdown, lost leadership).

    Nothing is lost: the roll is recorded in the metastore and resumes from that step.
    """


class ReplicationFailedError(RollError):
    """A copy of a standard partition to a secondary failed (the message names it and the cause).

    Nothing is lost and nothing partial is visible: the copy is retried with backoff and
    resumes with the files already copied and verified.
    """


class ReplicationAbandonedError(RollError):
    """A copy stopped on request (shutdown, lost leadership) or lost its claim; it resumes later."""
