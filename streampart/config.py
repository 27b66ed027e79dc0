"""Settings: one frozen pydantic model per component, composed here.

Sources, highest first: explicit overrides (CLI options), environment variables with the
prefix ``STREAMPART_`` (nested fields with ``__``, e.g. ``STREAMPART_ROLL__TARGET_FILE_SIZE``),
the TOML file named by ``--config`` or ``STREAMPART_CONFIG`` (``conf/streampart.toml`` documents
every field), then the defaults. Every source is validated alike: an override is input to the
model, never patched onto a built one.
"""

from __future__ import annotations

import difflib
import os
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from ingest.api.config import ServerConfig
from ingest.config import ChunkConfig, KafkaConfig
from metastore.clusters import Cluster, check_spark_master
from metastore.durations import Duration, format_duration
from metastore.errors import UserInputError
from metastore.federation import SECRET_ENV_PREFIX
from metastore.storage import configure as configure_storage
from metastore.storage.options import (
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_RETRIES,
    DEFAULT_RETRY_TIMEOUT,
    S3Options,
)
from scheduler.config import RollConfig, SchedulerConfig, check_heartbeat

# The TOML file of the settings being loaded: load_settings names it for its own call only (a
# context variable, not os.environ, so loading settings changes nothing around it).
_CONFIG_FILE: ContextVar[Path | None] = ContextVar("streampart_config_file", default=None)


class SparkConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    master: str = Field(
        "local[2]", description="Spark master URL (local[N], spark://host:7077, yarn, k8s://…)."
    )

    @field_validator("master")
    @classmethod
    def _known_master(cls, value: str) -> str:
        try:
            return check_spark_master(value)
        except UserInputError as exc:
            raise ValueError(str(exc)) from None

    shuffle_partitions: int = Field(4, ge=1, description="spark.sql.shuffle.partitions for queries.")
    driver_memory: str = Field("2g", description="spark.driver.memory.")
    conf: dict[str, str] = Field(default_factory=dict, description="Any further Spark settings.")
    class_archive: bool = Field(
        True,
        description="Start the driver JVM from the class archive `make setup` writes "
        "(python -m streampart.class_archive): about 40% less CPU to start Spark. Off: load every class.",
    )


class ClustersConfig(BaseModel):
    """This host's view of the clusters registered in the metastore."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spark_masters: dict[str, str] = Field(
        default_factory=dict,
        description="Per cluster name, the Spark master this host uses for it instead of the registered "
        'one (as HIVE\'s hive.cluster.properties), e.g. { C1 = "spark://gateway:7077" }.',
    )

    @field_validator("spark_masters")
    @classmethod
    def _masters(cls, value: dict[str, str]) -> dict[str, str]:
        for url in value.values():
            try:
                check_spark_master(url)
            except UserInputError as exc:
                raise ValueError(str(exc)) from None
        return value


class NamespacesConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    require_explicit: bool = Field(
        False,
        description="Refuse to make a namespace on first use: `table create` and `link create` in a "
        "namespace that does not exist fail until `streampart namespace create NS` made it.",
    )


class FederationConfig(BaseModel):
    """Federated metastores (``streampart federation …``), as this process reaches them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Values of the secrets federated metastores' URLs name as ${NAME} (e.g. a password), "
        'e.g. { PG_PASSWORD = "…" }; a secret missing here is read from STREAMPART_SECRET_<NAME>.',
    )
    # Why 5 s: a route or registry change must reach every running process (daemons, API servers,
    # ingest jobs) without a restart, and polling one version number in the primary costs one
    # indexed read; a few seconds of staleness is what an operator waits for anyway.
    refresh_interval: Duration = Field(
        timedelta(seconds=5),
        gt=timedelta(0),
        description="How often a process reads the route table's version again to notice changes.",
    )
    # Why 5 s: calls for a dead metastore's namespaces should fail fast within seconds of its
    # death, and resume within seconds of its return (Waggle Dance's 5 minutes is its users'
    # complaint); one probe per metastore every 5 s is negligible load.
    health_interval: Duration = Field(
        timedelta(seconds=5),
        gt=timedelta(0),
        description="How long calls for a federated metastore that failed fail fast before one tries it "
        "again (and how often its health is probed).",
    )

    def secret_values(self) -> dict[str, str]:
        """The secrets in clear, for :func:`metastore.federation.resolve_url` only."""
        return {name: value.get_secret_value() for name, value in self.secrets.items()}


class SqlServerConfig(BaseModel):
    """``streampart sql-server``: HiveServer2 (JDBC/ODBC) over the warehouse's tables."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field("127.0.0.1", description="Address the SQL server listens on (localhost by default).")
    port: int = Field(10000, ge=1, le=65535, description="Port of the SQL server (HiveServer2's 10000).")
    # Why 5 s: an analyst's dashboard refreshes in tens of seconds, and pinning a snapshot reads
    # the Delta log and lists its files; re-pinning every 5 s keeps both cheap and a commit or
    # roll visible to the next statement within seconds.
    freshness: Duration = Field(
        timedelta(seconds=5),
        gt=timedelta(0),
        description="How long a snapshot pinned for one statement serves the next ones: a commit or roll "
        "is visible to statements that start at most this long after it.",
    )
    # Why 10 min: an analyst's statement over the warehouse's tables answers in seconds to minutes;
    # one that runs longer (a CROSS JOIN by mistake) holds executors every other session shares,
    # and with a client that has gone away nobody waits for its answer any more.
    statement_timeout: Duration = Field(
        timedelta(minutes=10),
        gt=timedelta(0),
        description="A statement that runs longer is cancelled, its tasks stopped, and its client told so.",
    )
    # Why 16: a BI tool keeps a few connections per user (a pool of 4-8 in DBeaver, Superset and
    # Tableau), and each open session holds one of the Thrift server's worker threads; without a
    # cap, one token's thousand idle sessions once took every thread and locked others out.
    sessions_per_token: int = Field(
        16,
        ge=1,
        le=10_000,
        description="The most sessions one token may have open at once; a login past it is refused.",
    )


class StorageConfig(BaseModel):
    """How this process reaches S3-compatible buckets (a warehouse or cluster storage at ``s3://…``).

    Unset keys fall back to the standard AWS variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``), then the AWS config files.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: str | None = Field(
        None,
        description="The store's URL, e.g. http://127.0.0.1:9000 for a local MinIO (plain http:// is "
        "allowed as given); default: AWS S3.",
    )
    region: str | None = Field(None, description="Region requests are signed for (default us-east-1).")
    access_key_id: SecretStr | None = Field(None, description="Access key id (a secret: never printed).")
    secret_access_key: SecretStr | None = Field(None, description="Secret access key (never printed).")
    session_token: SecretStr | None = Field(None, description="Session token of temporary credentials.")
    retries: int = Field(
        DEFAULT_RETRIES,
        ge=0,
        le=20,
        description="Retries of a request that failed (5xx, dropped, timed out).",
    )
    retry_timeout: Duration = Field(
        DEFAULT_RETRY_TIMEOUT, gt=timedelta(0), description="How long one request is retried at most."
    )
    request_timeout: Duration = Field(
        DEFAULT_REQUEST_TIMEOUT,
        gt=timedelta(0),
        description="How long one attempt of a request may take before it is given up as not answered "
        "(and retried): a store that froze is reported this long after, times the retries.",
    )

    def options(self) -> S3Options:
        def secret(value: SecretStr | None) -> str | None:
            return value.get_secret_value() if value is not None else None

        return S3Options(
            endpoint=self.endpoint,
            region=self.region,
            access_key_id=secret(self.access_key_id),
            secret_access_key=secret(self.secret_access_key),
            session_token=secret(self.session_token),
            retries=self.retries,
            retry_timeout=self.retry_timeout,
            request_timeout=self.request_timeout,
        )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="STREAMPART_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    warehouse: str = Field(
        "./warehouse",
        description="Root of the warehouse: a directory, or s3://bucket/prefix in an S3-compatible store "
        "(see [storage]; its metastore is then given with `metastore`).",
    )

    @field_validator("warehouse", mode="before")
    @classmethod
    def _warehouse_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, Path) else value

    # a secret: a PostgreSQL URL may hold a password, masked in reprs, dumps and logs
    metastore: SecretStr | None = Field(
        None,
        description="Metastore URL (sqlite:///… or postgresql://…); default: a SQLite file in the warehouse.",
    )
    chunk: ChunkConfig = Field(default_factory=ChunkConfig, description="The chunk protocol.")
    roll: RollConfig = Field(default_factory=RollConfig, description="Rolls.")
    spark: SparkConfig = Field(default_factory=SparkConfig, description="Spark for queries.")
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig, description="The roll daemon.")
    server: ServerConfig = Field(default_factory=ServerConfig, description="The HTTP API (streampart serve).")
    sqlserver: SqlServerConfig = Field(
        default_factory=SqlServerConfig, description="The SQL server (streampart sql-server)."
    )
    namespaces: NamespacesConfig = Field(default_factory=NamespacesConfig, description="Namespaces.")
    clusters: ClustersConfig = Field(
        default_factory=ClustersConfig, description="Clusters, as this host sees them."
    )
    federation: FederationConfig = Field(
        default_factory=FederationConfig, description="Federated metastores, as this process reaches them."
    )
    storage: StorageConfig = Field(
        default_factory=StorageConfig, description="S3-compatible stores, as this process reaches them."
    )
    kafka: KafkaConfig = Field(default_factory=KafkaConfig, description="Kafka ingest jobs.")

    @model_validator(mode="after")
    def _heartbeat_renews_rolls(self) -> Settings:
        check_heartbeat(self.scheduler, self.roll)  # two sections, one rule
        return self

    @model_validator(mode="after")
    def _files_outlive_statements(self) -> Settings:
        """Housekeeping deletes a file no current version lists once ``retention`` has passed: a
        statement of the SQL server may read an older snapshot for up to its timeout plus the
        freshness its pins are reused for, so the retention must outlast both (and a minute)."""
        least = self.sqlserver.statement_timeout + self.sqlserver.freshness + timedelta(minutes=1)
        retention = self.scheduler.housekeeping.retention
        if retention < least:
            raise ValueError(
                f"scheduler.housekeeping.retention ({format_duration(retention)}) must outlast "
                f"sqlserver.statement_timeout plus sqlserver.freshness and a minute "
                f"({format_duration(least)}): a statement may still read the files it would delete"
            )
        return self

    def spark_for(self, cluster: Cluster) -> SparkConfig:
        """The Spark settings of jobs that compute on ``cluster``, as this host reaches it.

        The master, highest first: this host's ``[clusters] spark_masters`` entry for it, the
        registered one, ``spark.master`` (the ``default`` cluster registers none). The
        cluster's registered ``--conf`` settings go over ``spark.conf``.
        """
        master = self.clusters.spark_masters.get(cluster.name) or cluster.spark_master or self.spark.master
        return self.spark.model_copy(update={"master": master, "conf": {**self.spark.conf, **cluster.conf}})

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
        config_file = _CONFIG_FILE.get() or os.environ.get("STREAMPART_CONFIG")
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)


# STREAMPART_* variables that are not settings: the config file's name, other options' variables,
# test and bench hooks. Any other STREAMPART_* variable must name a setting.
_NOT_SETTINGS = frozenset(
    {
        "STREAMPART_CONFIG",
        "STREAMPART_API_TOKEN",  # `streampart write --url`'s bearer token
        "STREAMPART_TANSU_BIN",  # the development Kafka broker (ingest/kafka/devbroker.py)
        # the SQL server `streampart query` and `streampart sql` send statements to, and its login
        "STREAMPART_SQL_SERVER",
        "STREAMPART_SQL_USER",
        "STREAMPART_SQL_TOKEN",
        # tests and benchmarks (they start streampart processes with their environment)
        "STREAMPART_CRASHPOINT",
        "STREAMPART_PAUSEPOINT",
        "STREAMPART_TEST_PG",
        "STREAMPART_PRIVATE_PG_USER",
        "STREAMPART_CHROMIUM",
        "STREAMPART_SCREENSHOT",
        "STREAMPART_BENCH_PG",
        "STREAMPART_BENCH_TMP",
    }
)
_ENV_PREFIX = "STREAMPART_"
_ENV_DELIMITER = "__"


def _takes_keys(info: FieldInfo) -> bool:
    """Whether a field has keys below it (a section, a mapping), as ``STREAMPART_<FIELD>__<KEY>``."""
    annotation = info.annotation
    return typing.get_origin(annotation) is dict or (
        isinstance(annotation, type) and issubclass(annotation, BaseModel)
    )


def _unknown_environment() -> list[str]:
    """``STREAMPART_*`` variables whose first part names no top-level setting.

    The keys below a section (``STREAMPART_SCHEDULER__WORKRES``) reach the section's model, which
    forbids unknown keys as it does those of the TOML file; these never reach a model at all.
    """
    unknown = []
    for name in os.environ:
        if not name.startswith(_ENV_PREFIX) or name in _NOT_SETTINGS or name.startswith(SECRET_ENV_PREFIX):
            continue
        head, *below = name[len(_ENV_PREFIX) :].lower().split(_ENV_DELIMITER, 1)
        info = Settings.model_fields.get(head)
        if info is None or (below and not _takes_keys(info)):
            unknown.append(name)
    return sorted(unknown)


def _keys_at(path: tuple[str | int, ...]) -> list[str]:
    """The valid keys of the section at ``path`` (``()``: the top level)."""
    model: type[BaseModel] = Settings
    for part in path:
        annotation = model.model_fields[str(part)].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def _nearest(word: str, candidates: list[str]) -> str | None:
    close = difflib.get_close_matches(word.lower(), candidates, n=1)
    return close[0] if close else None


def _variable(path: tuple[str | int, ...]) -> str:
    return _ENV_PREFIX + _ENV_DELIMITER.join(str(p) for p in path).upper()


def _unknown_variable(name: str) -> str:
    """``name`` (an unknown ``STREAMPART_*`` variable) and the setting variable nearest to it."""
    head, *below = name[len(_ENV_PREFIX) :].lower().split(_ENV_DELIMITER, 1)
    if head in Settings.model_fields:  # keys below a plain setting (STREAMPART_WAREHOUSE__X)
        return f"unknown environment variable {name} ({_variable((head,))} takes no keys below it)"
    nearest = _nearest(head, list(Settings.model_fields))
    hint = f" (did you mean {_variable((nearest, *below))}?)" if nearest else ""
    return f"unknown environment variable {name}{hint}"


def _unknown_key(path: tuple[str | int, ...], value: Any, config_file: str | None) -> str:
    """An unknown key's problem: its path, where it was given, and the nearest valid key."""
    *section, key = (str(p) for p in path)
    nearest = _nearest(key, _keys_at(tuple(section)))
    variable = next((n for n in os.environ if n.upper() == _variable(path)), None)
    if variable is not None:
        hint = f" (did you mean {_variable((*section, nearest))}?)" if nearest else ""
        return f"unknown environment variable {variable}{hint}"
    dotted = ".".join((*section, key))
    what = f"section [{dotted}]" if isinstance(value, dict) else f"key {dotted}"
    where = f" in {config_file}" if config_file else ""
    if nearest is None:
        keys = ", ".join(_keys_at(tuple(section)))
        return f"unknown {what}{where} (valid keys there: {keys})"
    near = ".".join((*section, nearest))
    return f"unknown {what}{where} (did you mean {f'[{near}]' if isinstance(value, dict) else near}?)"


@contextmanager
def _reading(config_file: Path | None) -> Iterator[None]:
    token = _CONFIG_FILE.set(config_file)
    try:
        yield
    finally:
        _CONFIG_FILE.reset(token)


def _given(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` without the ones not given (None), at any depth; sections left empty go too."""
    given = {}
    for key, value in values.items():
        if isinstance(value, dict):
            value = _given(value) or None
        if value is not None:
            given[key] = value
    return given


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Load settings; a bad value, from any source, raises :class:`UserInputError` naming the field.

    Args:
        config_file: The TOML file to read [default: the one ``STREAMPART_CONFIG`` names, if any].
        **overrides: Values above every other source, validated as they are: top-level fields
            (``warehouse=…``) and sections as dicts (``scheduler={"metrics_port": 9000}``, merged
            into the section's other sources). None, at any depth, means not given.

    An unknown key, in any section of the TOML file or as a ``STREAMPART_*`` variable, is an
    error naming it and the nearest valid key: every settings model forbids extra keys.
    """
    unknown = _unknown_environment()
    if unknown:
        problems = "; ".join(_unknown_variable(name) for name in unknown)
        raise UserInputError(f"invalid configuration: {problems}")
    if config_file is not None and not config_file.is_file():
        raise UserInputError(f"config file {config_file} does not exist")
    try:
        with _reading(config_file):
            settings = Settings(**_given(overrides))
        configure_storage(settings.storage.options())  # every store this process opens from now on
        return settings
    except ValidationError as exc:
        source = str(config_file or os.environ.get("STREAMPART_CONFIG") or "") or None
        raise UserInputError(f"invalid configuration: {_problems(exc, source)}") from None
    except (OSError, ValueError) as exc:
        raise UserInputError(f"cannot read configuration: {exc}") from None


def _problems(exc: ValidationError, config_file: str | None) -> str:
    """Pydantic's errors as one line: each names its key (``scheduler.workers: …``)."""
    problems = []
    for error in exc.errors():
        if error["type"] == "extra_forbidden":
            problems.append(_unknown_key(error["loc"], error["input"], config_file))
        else:
            problems.append(f"{'.'.join(str(p) for p in error['loc']) or 'settings'}: {error['msg']}")
    return "; ".join(problems)
