"""The options of the Kafka source: Spark's string options parsed and checked, and built from Python.

:meth:`KafkaSourceOptions.parse` turns the options a query gives (names as in Spark's Kafka
source, case-insensitive) into one frozen object, or raises :class:`KafkaConfigError` naming
the faulty option; :func:`source_options` builds the string options of a ``subscribe`` source
and checks them in the driver, before any Spark query starts. The offsets options are checked
by :func:`check_offsets_spec`, which the ingest job's options use as well.

=================================  ==========  ==============================================
``kafka.bootstrap.servers``        required    ``host:port[,host:port…]``
``subscribe``                      one of      comma-separated topic list
``subscribePattern``               these       regular expression, full match on topic names
``streampart.controlFile``         three       a control file the subscription (and paused
                                               topics) is read from, again when it changes
                                               (:mod:`ingest.kafka.control`)
``startingOffsets``                latest*     ``earliest``, ``latest`` or JSON
                                               ``{"t":{"0":23,"1":-2}}`` (-2 earliest,
                                               -1 latest); JSON must name every partition
                                               of the subscribed topics. (*batch: earliest)
``endingOffsets`` (batch only)     latest      ``latest`` or JSON (-1 latest)
``maxOffsetsPerTrigger``           none        records per micro-batch, spread over the
                                               partitions in proportion to their backlog
``minPartitions``                  none        split ranges so a batch has at least about
                                               this many tasks
``maxRecordsPerPartition``         none        split ranges so no task reads more records
``failOnDataLoss``                 true        see :mod:`ingest.kafka.source`
``kafkaConsumer.pollTimeoutMs``    120000      executor: max time without progress on a range
``fetchOffset.numRetries``         8           attempts of each broker call (driver and
                                               executor connection set-up)
``fetchOffset.retryIntervalMs``    1000        first backoff; doubles, at most 30 s: the
                                               defaults ride out a broker outage of about
                                               90 s (1+2+4+8+16+30+30 s between attempts)
``streampart.emit``                records     ``records``: a row per record (the columns
                                               above); ``ranges``: a row per task's offset
                                               range (topic, partition, start, end), which
                                               the query's own tasks then read
                                               (``ingest.kafka.reader.read_ranges``)
``kafka.<consumer config>``        —           passed to kafka-python's KafkaConsumer, dots as
                                               underscores: ``kafka.request.timeout.ms``,
                                               ``kafka.bootstrap.timeout.ms`` (default 10000),
                                               ``kafka.security.protocol``,
                                               ``kafka.isolation.level`` (default
                                               ``read_committed``), …
=================================  ==========  ==============================================

``kafka.group.id``, ``kafka.enable.auto.commit``, ``kafka.auto.offset.reset`` and the
(de)serializers are rejected, as in Spark: offsets belong to the checkpoint.

Not supported: ``startingOffsetsByTimestamp``, ``assign`` and ``minOffsetsPerTrigger``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ingest.errors import KafkaConfigError
from ingest.kafka.control import read_control
from ingest.kafka.offsets import EARLIEST

_FORBIDDEN = {
    "group.id": "offsets are kept in Spark's checkpoint; the source uses no consumer group",
    "group.instance.id": "the source uses no consumer group",
    "enable.auto.commit": "offsets are kept in Spark's checkpoint; nothing is committed to Kafka",
    "auto.offset.reset": "use the source option startingOffsets",
    "key.deserializer": "keys are always returned as binary; cast or parse them in Spark",
    "value.deserializer": "values are always returned as binary; cast or parse them in Spark",
}


def _consumer_defaults() -> dict[str, Any]:
    from kafka import KafkaConsumer

    return dict(KafkaConsumer.DEFAULT_CONFIG)


@dataclass(frozen=True)
class KafkaSourceOptions:
    """The parsed, validated options of one source (see the module docstring)."""

    bootstrap_servers: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting_offsets: str = "latest"
    ending_offsets: str = "latest"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    num_retries: int = 8
    retry_interval_ms: int = 1_000
    consumer_config: Mapping[str, Any] = field(default_factory=dict)
    control_file: str | None = None
    emit_ranges: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str], *, batch: bool = False) -> KafkaSourceOptions:
        """Parse Spark's (string) options; raises :class:`KafkaConfigError` naming the option."""
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        servers = opts.get("kafka.bootstrap.servers", "").strip()
        if not servers:
            raise KafkaConfigError("option kafka.bootstrap.servers is required (host:port[,host:port…])")
        subscribe, pattern = opts.get("subscribe"), opts.get("subscribepattern")
        control = opts.get("streampart.controlfile")
        if "assign" in opts:
            raise KafkaConfigError("option assign is not supported; use subscribe or subscribePattern")
        if sum(x is not None for x in (subscribe, pattern, control)) != 1:
            raise KafkaConfigError(
                "give exactly one of the options subscribe (topic list), subscribePattern or "
                "streampart.controlFile"
            )
        topics: tuple[str, ...] = ()
        if subscribe is not None:
            topics = tuple(dict.fromkeys(t.strip() for t in subscribe.split(",") if t.strip()))
            if not topics:
                raise KafkaConfigError("option subscribe names no topic")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise KafkaConfigError(
                    f"option subscribePattern is not a valid regular expression: {exc}"
                ) from None
        starting = opts.get("startingoffsets", "earliest" if batch else "latest").strip()
        ending = opts.get("endingoffsets", "latest").strip()
        if not batch and "endingoffsets" in opts:
            raise KafkaConfigError("option endingOffsets is for batch reads only (spark.read)")
        for name, spec, allow_earliest in (
            ("startingOffsets", starting, True),
            ("endingOffsets", ending, False),
        ):
            try:
                check_offsets_spec(spec, allow_earliest=allow_earliest)
            except ValueError as exc:
                raise KafkaConfigError(f"option {name} {exc}") from None
        emit = opts.get("streampart.emit", "records").strip().lower()
        if emit not in ("records", "ranges"):
            raise KafkaConfigError(f"option streampart.emit must be records or ranges, got {emit!r}")
        return cls(
            bootstrap_servers=servers,
            topics=topics,
            pattern=pattern,
            starting_offsets=starting,
            ending_offsets=ending,
            max_offsets_per_trigger=_positive(opts, "maxOffsetsPerTrigger"),
            min_partitions=_positive(opts, "minPartitions"),
            max_records_per_partition=_positive(opts, "maxRecordsPerPartition"),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            poll_timeout_ms=_positive(opts, "kafkaConsumer.pollTimeoutMs") or 120_000,
            num_retries=_positive(opts, "fetchOffset.numRetries") or 8,
            retry_interval_ms=_default(
                _positive(opts, "fetchOffset.retryIntervalMs", allow_zero=True), 1_000
            ),
            consumer_config=_consumer_config(opts),
            control_file=control,
            emit_ranges=emit == "ranges",
        )

    def subscribed(self, topic: str) -> bool:
        if self.control_file is not None:
            return read_control(self.control_file).subscribed(topic)
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def kafka_config(self) -> dict[str, Any]:
        """Keyword arguments for ``kafka.KafkaConsumer``: no group, no commits, no auto reset."""
        config: dict[str, Any] = {
            "bootstrap_servers": [s.strip() for s in self.bootstrap_servers.split(",") if s.strip()],
            "client_id": "streampart-kafka-source",
            "bootstrap_timeout_ms": 10_000,
            "max_poll_records": 5_000,
            "allow_auto_create_topics": False,
            # records of aborted transactions are never read, and a batch ends at the last stable
            # offset (never past an open transaction); kafka.isolation.level=read_uncommitted reads
            # every record a producer sent, aborted ones included
            "isolation_level": "read_committed",
        }
        config.update(self.consumer_config)
        config.update(group_id=None, enable_auto_commit=False, auto_offset_reset="none")
        return config


def _positive(opts: Mapping[str, str], name: str, allow_zero: bool = False) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise KafkaConfigError(f"option {name} must be an integer, got {raw!r}") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise KafkaConfigError(f"option {name} must be {'≥ 0' if allow_zero else '> 0'}, got {value}")
    return value


def _default(value: int | None, default: int) -> int:
    return default if value is None else value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise KafkaConfigError(f"option {name} must be true or false, got {raw!r}")


def _consumer_config(opts: Mapping[str, str]) -> dict[str, Any]:
    defaults = _consumer_defaults()
    config: dict[str, Any] = {}
    for key, raw in opts.items():
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        name = key[len("kafka.") :]
        if name in _FORBIDDEN:
            raise KafkaConfigError(f"option kafka.{name} is not supported: {_FORBIDDEN[name]}")
        arg = name.replace(".", "_")
        if arg not in defaults:
            raise KafkaConfigError(f"option {key}: kafka-python's consumer has no setting {arg}")
        default = defaults[arg]
        try:
            if isinstance(default, bool):
                if raw.strip().lower() not in ("true", "false"):
                    raise ValueError(raw)
                config[arg] = raw.strip().lower() == "true"
            elif isinstance(default, int):
                config[arg] = int(raw)
            elif isinstance(default, float):
                config[arg] = float(raw)
            else:
                config[arg] = raw
        except ValueError:
            raise KafkaConfigError(f"option {key}: invalid value {raw!r}") from None
    return config


def check_offsets_spec(spec: str, *, allow_earliest: bool = True) -> None:
    """Check the form of an offsets option: ``startingOffsets``, or ``endingOffsets`` (no earliest).

    ``earliest`` (if allowed), ``latest``, or JSON ``{"topic": {"partition": offset}}`` with
    offsets ≥ 0, -2 (earliest, if allowed) or -1 (latest). Whether the topics and partitions
    exist is checked when the offsets are resolved (:func:`ingest.kafka.source.resolve_offsets`).

    Raises:
        ValueError: says what the value must be, and quotes it.
    """
    if spec in ("latest",) or (allow_earliest and spec == "earliest"):
        return
    try:
        parsed = json.loads(spec)
        if not isinstance(parsed, dict):
            raise ValueError
        for topic, parts in parsed.items():
            if not isinstance(parts, dict):
                raise ValueError
            for p, off in parts.items():
                int(p)
                if not isinstance(off, int) or off < EARLIEST or (off == EARLIEST and not allow_earliest):
                    raise ValueError(f"{topic}/{p}: {off}")
    except ValueError:
        words = "earliest, latest" if allow_earliest else "latest"
        special = "-2 (earliest) or -1 (latest)" if allow_earliest else "-1 (latest)"
        raise ValueError(
            f'must be {words} or JSON like {{"topic":{{"0":23}}}} with offsets ≥ 0, {special}; got {spec!r}'
        ) from None


def source_options(
    bootstrap_servers: str,
    topics: str | Sequence[str],
    *,
    starting_offsets: str = "latest",
    max_offsets_per_trigger: int | None = None,
    fail_on_data_loss: bool = True,
    **extra: Any,
) -> dict[str, str]:
    """The string options of a ``subscribe`` source, validated here, in the driver.

    ``extra`` holds any other option by its Spark name (``minPartitions=4``,
    ``**{"kafka.request.timeout.ms": 5000}``). Raises :class:`KafkaConfigError` (a
    ``UserInputError``) naming the faulty option before any Spark query starts.
    """
    options = subscribe_options(
        bootstrap_servers,
        topics,
        starting_offsets=starting_offsets,
        max_offsets_per_trigger=max_offsets_per_trigger,
        fail_on_data_loss=fail_on_data_loss,
        extra=extra,
    )
    KafkaSourceOptions.parse(options)
    return options


def subscribe_options(
    bootstrap_servers: str,
    topics: str | Sequence[str],
    *,
    starting_offsets: str = "latest",
    max_offsets_per_trigger: int | None = None,
    fail_on_data_loss: bool = True,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The string options of a ``subscribe`` source, built but not checked (:func:`source_options` checks).

    ``extra`` holds any other option by its Spark name and wins over the ones built here.
    """
    topic_list = topics if isinstance(topics, str) else ",".join(topics)
    options: dict[str, str] = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "subscribe": topic_list,
        "startingOffsets": starting_offsets,
        "failOnDataLoss": "true" if fail_on_data_loss else "false",
    }
    if max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    for key, value in (extra or {}).items():
        options[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return options
