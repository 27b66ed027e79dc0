"""Configuration of the chunk protocol, and of the Kafka ingest jobs."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from metastore.durations import Duration


class ChunkConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    ttl: Duration = Field(
        timedelta(hours=1),
        gt=timedelta(0),
        description="How long a reserved chunk may wait for its commit before it expires and its files go.",
    )
    # Why 60 s: a commit attempt is one metastore check plus one Delta commit (milliseconds on
    # a local disk, seconds on object storage). A writer never starts a Delta commit after its
    # deadline. Another process takes a COMMITTING chunk over once the holder's commit lease
    # lapsed (ingest/commit_holders.py: seconds after the holder died), or after twice the
    # deadline if the holder's lease lives on, so a slow but living writer and its successor
    # never both commit the same chunk.
    commit_timeout: Duration = Field(
        timedelta(seconds=60),
        gt=timedelta(0),
        description="Deadline of one commit attempt. Another process takes a stuck attempt over once its "
        "holder's commit lease lapsed (about 10 s after the holder died), or after twice this.",
    )
    # Why 0: a group is whatever queued while the previous group committed, which under load is
    # everything that arrived meanwhile; waiting longer helps only writers that stage slowly.
    group_wait: Duration = Field(
        timedelta(0),
        ge=timedelta(0),
        le=timedelta(seconds=1),
        description=(
            "After a group commit of several chunks of a table, how long the next group waits for "
            "more chunks before it commits (a table committed one chunk at a time never waits)."
        ),
    )
    max_value_bytes: int = Field(
        1 << 20, ge=1, description="A string/binary value longer than this is a bad record."
    )
    # Why 5 million: a chunk is parsed and staged in one process, and a tiny Parquet file can
    # encode millions of rows; 5 million rows of a dozen columns stay within a few hundred MB
    # as Arrow, while producers of more should split their data anyway (one chunk, one commit).
    max_rows: int = Field(
        5_000_000, ge=1, description="A chunk with more records than this is refused (split the data)."
    )


class KafkaConfig(BaseModel):
    """What every Kafka ingest job of this host shares: the Schema Registry's credentials (a secret never
    given on a command line, which ``ps`` shows to every user)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_registry_user: str | None = Field(
        None, description="User of HTTP basic authentication with the Schema Registry (--schema-registry)."
    )
    schema_registry_password: SecretStr | None = Field(
        None, description="Its password (a secret: never printed)."
    )

    def registry_auth(self) -> tuple[str, str] | None:
        """(user, password) for the registry, or None without a user."""
        if self.schema_registry_user is None:
            return None
        password = self.schema_registry_password
        return self.schema_registry_user, password.get_secret_value() if password is not None else ""
