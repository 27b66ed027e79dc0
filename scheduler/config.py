"""Configuration of the roll operation."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field


class RollConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    target_file_size: int = Field(
        128 * 1024 * 1024, ge=1024, description="Size the sweep compacts a standard partition's files toward."
    )
    # Why 10 min: a roll holds its lease while it seals, compacts and commits one partition;
    # compaction of a large partition on a busy machine can take minutes. Another roller takes
    # an interrupted roll over only after the lease ends, and its first step (a fresh seal)
    # fences the previous holder's sweep commit in any case.
    lease: timedelta = Field(
        timedelta(minutes=10), description="How long a roller owns a roll before others may resume it."
    )
