"""What a Kafka ingest job does: the CLI's ``streampart ingest kafka`` flags, checked, as one object.

Two forms. **One table**: ``table`` and its ``topic`` (s) — the job of old, its checkpoint, consumer
group and metrics named after the table. **Routed**: ``route`` s (``TOPIC=NS.TABLE``), a
``routes_file``, a ``topic_pattern`` with a ``table_template`` (``{topic}``), or ``topic`` s with a
``table_field`` — any mix; such a job has a ``name`` (its checkpoint, consumer group, status) and a
``dead_letter_table`` of its own for the records no table takes (:mod:`ingest.kafka.routes`).
"""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ingest.config import KafkaConfig
from ingest.kafka.avro import AvroSchemaError, load_schema_file
from ingest.kafka.control import CONTROL_FILE
from ingest.kafka.options import KafkaSourceOptions, check_offsets_spec, subscribe_options
from ingest.kafka.registry import RecordSchemas
from ingest.kafka.routes import Route, RouteError, Routes, parse_route_flag, read_routes_file
from metastore.delta.warehouse import Warehouse
from metastore.durations import Duration
from metastore.models import TableName

CHECKPOINTS_DIR = "_checkpoints"
JOBS_DIR = "_jobs"  # routed jobs' checkpoints: <warehouse's local dir>/_checkpoints/_jobs/<name>
_JOB_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


class KafkaIngestOptions(BaseModel):
    """One Kafka ingest job: what the CLI's flags and a spark-submit script set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap: str = Field(description="Kafka bootstrap servers, HOST:PORT[,HOST:PORT…].")
    table: str | None = Field(None, description="The one table of a one-table job, NS.TABLE.")
    topic: str = Field("", description="Topic(s) to read, comma-separated.")
    route: tuple[str, ...] = Field((), description="Routes TOPIC=NS.TABLE.")
    routes_file: str | None = Field(None, description="A TOML file of routes, read again when it changes.")
    topic_pattern: str | None = Field(None, description="Read every topic this regex matches in full.")
    table_template: str | None = Field(
        None, description="The table of --topic-pattern's and --table-field's records: {topic}, {field}."
    )
    table_field: str | None = Field(
        None, description="The JSON field of a --topic record that names its table."
    )
    name: str | None = Field(None, description="The job's name (routed jobs); default: the one table's name.")
    dead_letter_table: str | None = Field(
        None, description="NS.TABLE for records no table takes (routed jobs); made if absent."
    )
    format: Literal["json", "csv", "avro", "protobuf", "jsonschema", "debezium"] = Field(
        "json",
        description="Record format: a JSON object, one CSV line in the table's column order, an Avro "
        "datum (of the avro_schema, or in the Confluent wire format with schema_registry), Protobuf "
        "or JSON Schema in the Confluent wire format (schema_registry), or a Debezium change event "
        "(JSON, or Avro with avro_schema or schema_registry) into a keyed table with an op column.",
    )
    avro_schema: str | None = Field(None, description="The writer schema of Avro records: an .avsc file.")
    schema_registry: str | None = Field(
        None,
        description="The Schema Registry of records in the Confluent wire format (its URL, without "
        "credentials: settings [kafka] schema_registry_user and _password give them).",
    )
    kafka: KafkaConfig = Field(
        default_factory=KafkaConfig,
        repr=False,
        description="The host's settings [kafka]: the registry's credentials (never a command line's).",
    )
    trigger: Duration = Field(
        timedelta(seconds=5), description="Micro-batch interval (ignored with available_now)."
    )
    available_now: bool = Field(
        False, description="Process what is in the topic at start, in rate-limited batches, then stop."
    )
    checkpoint: str | None = Field(
        None,
        description="Spark checkpoint directory; default <warehouse>/_checkpoints/NS.TABLE/<topic> "
        "(one table) or <warehouse>/_checkpoints/_jobs/<name>.",
    )
    max_offsets_per_trigger: int | None = Field(
        None, gt=0, description="Rate limit: at most this many records per micro-batch."
    )
    starting_offsets: str = Field(
        "earliest",
        description="Where a new query starts: earliest, latest, or JSON {topic: {partition: offset}}.",
    )
    fail_on_data_loss: bool = Field(
        True, description="Fail when offsets to read were deleted by retention (false: skip them)."
    )
    source_options: dict[str, str] = Field(
        default_factory=dict, description="More options for the Kafka source (its own names)."
    )
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="Serve Prometheus metrics on this port (0: a free one); none: off."
    )
    metrics_host: str = Field(
        "0.0.0.0", description="The address the metrics port listens on (127.0.0.1: this host only)."
    )
    consumer_group: str | None = Field(
        None,
        description="Kafka consumer group the committed offsets are also written to, for monitoring "
        "(default streampart-<job name>; empty: none).",
    )

    @property
    def job(self) -> str:
        """The job's name: ``name``, or the one table's."""
        return self.name or str(self.table)

    @property
    def routed(self) -> bool:
        """Whether this is a routed job (not the one-table form)."""
        return self.table is None

    @property
    def group(self) -> str | None:
        """The consumer group offsets are committed to for monitoring, or None."""
        if self.consumer_group is None:
            return f"streampart-{self.job}"
        return self.consumer_group.strip() or None

    @field_validator("table", "dead_letter_table")
    @classmethod
    def _table_name(cls, v: str | None) -> str | None:
        if v is not None:
            TableName.parse(v)
        return v

    @field_validator("name")
    @classmethod
    def _job_name(cls, v: str | None) -> str | None:
        if v is not None and not _JOB_NAME.fullmatch(v):
            raise ValueError(f"{v!r} is not a job name: letters, digits, '_', '.' and '-', at most 100")
        return v

    @field_validator("starting_offsets")
    @classmethod
    def _offsets(cls, v: str) -> str:
        check_offsets_spec(v)  # the source's own rule for startingOffsets, checked before any query
        return v

    @model_validator(mode="after")
    def _shape(self) -> KafkaIngestOptions:
        try:
            self.routes()
        except RouteError as exc:
            raise ValueError(str(exc)) from None
        if self.table is not None:
            extra = [f for f in ("route", "routes_file", "topic_pattern", "table_field") if getattr(self, f)]
            if extra or self.table_template:
                flag = (extra or ["table_template"])[0].replace("_", "-")
                raise ValueError(
                    f"a one-table job (TABLE) takes --topic only, not --{flag}; route with --route"
                )
            if not self.topics:
                raise ValueError("--topic: name at least one topic")
            return self
        if self.name is None:
            raise ValueError("a routed job needs --name (its checkpoint and status go by it)")
        if self.dead_letter_table is None:
            raise ValueError("a routed job needs --dead-letter-table NS.TABLE (records no table takes)")
        return self

    @model_validator(mode="after")
    def _avro(self) -> KafkaIngestOptions:
        given = [f for f in ("avro_schema", "schema_registry") if getattr(self, f) is not None]
        if self.format == "debezium":  # JSON events, or Avro ones: of one schema, or the registry's
            if len(given) > 1:
                raise ValueError("--format debezium takes at most one of --avro-schema, --schema-registry")
        elif (self.format == "avro") != (len(given) == 1) or len(given) > 1:
            if self.format in ("protobuf", "jsonschema"):
                if given != ["schema_registry"]:
                    raise ValueError(
                        f"--format {self.format} takes --schema-registry URL (and no --avro-schema)"
                    )
            else:
                raise ValueError(
                    "--format avro takes one of --avro-schema FILE (the records' writer schema) or "
                    "--schema-registry URL, and those only go with it (or with protobuf, jsonschema)"
                )
        if self.avro_schema is not None:
            try:
                load_schema_file(self.avro_schema)
            except AvroSchemaError as exc:
                raise ValueError(str(exc)) from None
        if self.schema_registry is not None:
            url = urlsplit(self.schema_registry)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError(f"--schema-registry takes an http(s) URL, got {self.schema_registry!r}")
            if url.username or url.password:
                raise ValueError(
                    "--schema-registry: no credentials in the URL (a command line shows them); set "
                    "STREAMPART_KAFKA__SCHEMA_REGISTRY_USER and _PASSWORD (settings [kafka])"
                )
        return self

    def record_schemas(self) -> RecordSchemas | None:
        """Where the records' writer schemas come from (None: JSON or CSV), with the registry's
        credentials (settings ``[kafka]``)."""
        if self.avro_schema is not None:
            return RecordSchemas(schema=load_schema_file(self.avro_schema))
        if self.schema_registry is not None:
            auth = self.kafka.registry_auth()
            fmt = "avro" if self.format == "debezium" else self.format  # Debezium's Avro events
            return RecordSchemas(fmt=fmt, registry=self.schema_registry, auth=auth)
        return None

    @model_validator(mode="after")
    def _source_options_valid(self) -> KafkaIngestOptions:
        # in the driver, before Spark starts: the source would find a bad option only inside its
        # Python worker, where PySpark 4.2 loses the error (an UnboundLocalError of its own)
        KafkaSourceOptions.parse(self.source_reader_options("control.json"))
        return self

    @property
    def topics(self) -> list[str]:
        return [t.strip() for t in self.topic.split(",") if t.strip()]

    def routes(self) -> Routes:
        """The routes in force now (a routes file is read again each time)."""
        found: list[Route] = [parse_route_flag(r) for r in self.route]
        if self.table is not None:
            found += [Route(table=self.table, topic=t) for t in self.topics]
        elif self.topics:
            if self.table_field is None and self.table_template is None:
                raise RouteError("--topic without a table: give TABLE, --table TEMPLATE or --table-field")
            template = self.table_template or "{field}"
            found += [Route(table=template, topic=t, table_field=self.table_field) for t in self.topics]
        if self.topic_pattern is not None:
            if self.table_template is None and self.table_field is None:
                raise RouteError("--topic-pattern needs --table TEMPLATE (e.g. '{topic}') or --table-field")
            found.append(
                Route(
                    table=self.table_template or "{field}",
                    pattern=self.topic_pattern,
                    table_field=self.table_field,
                )
            )
        if self.routes_file is not None:
            found += read_routes_file(self.routes_file)
        return Routes(tuple(found))

    def checkpoint_dir(self, warehouse: Warehouse) -> str:
        if self.checkpoint:
            return str(Path(self.checkpoint).resolve())
        if self.routed:
            return str(warehouse.local_dir / CHECKPOINTS_DIR / JOBS_DIR / self.job)
        name = ",".join(sorted(self.topics))
        if len(name) > 100 or "/" in name:
            name = hashlib.sha256(name.encode()).hexdigest()[:16]
        return str(warehouse.local_dir / CHECKPOINTS_DIR / str(self.table) / name)

    def control_file(self, checkpoint: str) -> str:
        return str(Path(checkpoint) / CONTROL_FILE)

    def source_reader_options(self, control_file: str) -> dict[str, str]:
        """The Kafka source's options (``source_options`` win); the source checks them as the query starts."""
        options = subscribe_options(
            self.bootstrap,
            "-",
            starting_offsets=self.starting_offsets,
            max_offsets_per_trigger=self.max_offsets_per_trigger,
            fail_on_data_loss=self.fail_on_data_loss,
            extra=self.source_options,
        )
        del options["subscribe"]  # the control file says what is subscribed
        options["streampart.controlFile"] = control_file
        options["streampart.emit"] = "ranges"  # the batch's own tasks read them (ingest.kafka.batch_sink)
        return options
