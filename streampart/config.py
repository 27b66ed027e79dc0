"""Settings: one frozen pydantic model per component, composed here.

Sources, highest first: explicit overrides (CLI options), environment variables with the
prefix ``STREAMPART_`` (nested fields with ``__``, e.g. ``STREAMPART_ROLL__TARGET_FILE_SIZE``),
the TOML file named by ``--config`` or ``STREAMPART_CONFIG`` (``conf/streampart.toml`` documents
every field), then the defaults.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from ingest.api.config import ServerConfig
from ingest.config import ChunkConfig
from metastore.errors import UserInputError
from scheduler.config import RollConfig, SchedulerConfig


class SparkConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    master: str = Field(
        "local[2]", description="Spark master URL (local[N], spark://host:7077, yarn, k8s://…)."
    )
    shuffle_partitions: int = Field(4, ge=1, description="spark.sql.shuffle.partitions for queries.")
    driver_memory: str = Field("2g", description="spark.driver.memory.")
    conf: dict[str, str] = Field(default_factory=dict, description="Any further Spark settings.")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="STREAMPART_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    warehouse: Path = Field(Path("./warehouse"), description="Root directory of the warehouse.")
    metastore: str | None = Field(
        None,
        description="Metastore URL (sqlite:///… or postgresql://…); default: a SQLite file in the warehouse.",
    )
    chunk: ChunkConfig = Field(default_factory=ChunkConfig, description="The chunk protocol.")
    roll: RollConfig = Field(default_factory=RollConfig, description="Rolls.")
    spark: SparkConfig = Field(default_factory=SparkConfig, description="Spark for queries.")
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig, description="The roll daemon.")
    server: ServerConfig = Field(default_factory=ServerConfig, description="The HTTP API (streampart serve).")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("STREAMPART_CONFIG")
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Load settings; a bad value raises :class:`UserInputError` naming the field."""
    if config_file is not None:
        if not config_file.is_file():
            raise UserInputError(f"config file {config_file} does not exist")
        os.environ["STREAMPART_CONFIG"] = str(config_file)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        raise UserInputError(f"invalid configuration: {problems}") from None
    except (OSError, ValueError) as exc:
        raise UserInputError(f"cannot read configuration: {exc}") from None
