"""``streampart ingest …``: the streaming ingest jobs (Kafka → table)."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from metastore.errors import UserInputError
from streampart import driver_jvm
from streampart.cli.context import cli_context
from streampart.cli.params import JsonFlag

if TYPE_CHECKING:
    from rich.console import Console

ingest_app = typer.Typer(help="Run streaming ingest jobs into a table.", no_args_is_help=True)


def _options(**kwargs: Any) -> Any:
    from pydantic import ValidationError

    from ingest.kafka.job import KafkaIngestOptions

    try:
        return KafkaIngestOptions(**{k: v for k, v in kwargs.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        if not field:  # a rule across several flags: its message names them
            raise UserInputError(message) from None
        raise UserInputError(f"--{field.replace('_', '-')}: {message}") from None


def _source_options(pairs: list[str]) -> dict[str, str]:
    """``--option KEY=VALUE`` pairs as the source's options; a pair without ``=`` is a user error."""
    found: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserInputError(f"--option takes KEY=VALUE (e.g. kafka.security.protocol=SSL); got {pair!r}")
        found[key.strip()] = value
    return found


# ``ingest kafka``'s options whose help takes more than a line.
CheckpointOption = Annotated[
    Path | None,
    typer.Option(help="Checkpoint directory [default: <warehouse>/_checkpoints/NS.TABLE/<topic>]"),
]
MetricsPortOption = Annotated[
    int | None,
    typer.Option(help="Serve Prometheus metrics (records, batches, per-partition offsets, lag) on this port"),
]
ConsumerGroupOption = Annotated[
    str | None,
    typer.Option(
        help="Also commit the ingested offsets to this Kafka consumer group, for monitoring only "
        "(kafka-consumer-groups shows the lag) [default: streampart-NS.TABLE; '' for none]"
    ),
]
SourceOption = Annotated[
    list[str] | None,
    typer.Option(
        "--option",
        help="KEY=VALUE, repeatable: an option of the Kafka source by Spark's names "
        "(kafka.security.protocol=SSL, kafka.sasl.mechanism=PLAIN, fetchOffset.numRetries=3, …); "
        "wins over the flags above",
    ),
]


RouteOption = Annotated[
    list[str] | None,
    typer.Option("--route", help="TOPIC=NS.TABLE, repeatable: the topic's records go to the table"),
]
RoutesFileOption = Annotated[
    Path | None,
    typer.Option(
        "--routes",
        help="A TOML file of [[route]] tables (topic or topic-pattern, table, table-field); "
        "read again when it changes",
    ),
]
TableTemplateOption = Annotated[
    str | None,
    typer.Option(
        "--table",
        help="The table of --topic-pattern's or --table-field's records: a name or a template with "
        "{topic} and {field}, e.g. '{topic}', 'shop.{field}'",
    ),
]

DeadLetterTableOption = Annotated[
    str | None,
    typer.Option(help="NS.TABLE for records no route takes (routed jobs; made if absent)"),
]
FormatOption = Annotated[
    str,
    typer.Option(
        "--format",
        help="json, csv (one line, table column order), avro (--avro-schema or --schema-registry), "
        "protobuf or jsonschema (--schema-registry), debezium (change events, JSON or Avro, into a keyed "
        "table with an op column)",
    ),
]
AvroSchemaOption = Annotated[
    Path | None, typer.Option(help="The Avro records' writer schema (.avsc): each value one datum of it")
]
SchemaRegistryOption = Annotated[
    str | None,
    typer.Option(
        help="Records in the Confluent wire format: the Schema Registry's URL (credentials from "
        "settings [kafka] or STREAMPART_KAFKA__SCHEMA_REGISTRY_USER and _PASSWORD, never in the URL)"
    ),
]


@ingest_app.command("kafka")
def ingest_kafka(
    ctx: typer.Context,
    table: Annotated[
        str | None, typer.Argument(help="NAMESPACE.TABLE to ingest into (the one-table form)")
    ] = None,
    bootstrap: Annotated[str, typer.Option(help="Kafka bootstrap servers, HOST:PORT[,HOST:PORT…]")] = "",
    topic: Annotated[str, typer.Option(help="Topic(s) to read, comma-separated")] = "",
    route: RouteOption = None,
    routes: RoutesFileOption = None,
    topic_pattern: Annotated[
        str | None, typer.Option(help="Read every topic this regular expression matches in full")
    ] = None,
    table_template: TableTemplateOption = None,
    table_field: Annotated[
        str | None, typer.Option(help="The JSON record field that names the record's table")
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="The job's name (routed jobs: checkpoint, consumer group, status)")
    ] = None,
    dead_letter_table: DeadLetterTableOption = None,
    format: FormatOption = "json",
    avro_schema: AvroSchemaOption = None,
    schema_registry: SchemaRegistryOption = None,
    trigger: Annotated[str, typer.Option(help="Micro-batch interval, e.g. 1s, 5s, 1m")] = "5s",
    available_now: Annotated[
        bool, typer.Option("--available-now", help="Process what is in the topic now, then exit 0")
    ] = False,
    checkpoint: CheckpointOption = None,
    max_offsets_per_trigger: Annotated[
        int | None, typer.Option(help="Rate limit: at most N records per micro-batch")
    ] = None,
    starting_offsets: Annotated[
        str, typer.Option(help='earliest, latest, or JSON {"topic": {"0": 42}} (new queries only)')
    ] = "earliest",
    fail_on_data_loss: Annotated[
        bool, typer.Option(help="Fail if offsets to read were deleted by retention")
    ] = True,
    metrics_port: MetricsPortOption = None,
    metrics_host: Annotated[
        str, typer.Option(help="Address the metrics port listens on (127.0.0.1: this host only)")
    ] = "0.0.0.0",
    consumer_group: ConsumerGroupOption = None,
    option: SourceOption = None,
) -> None:
    """Stream Kafka topics into tables, one chunk per table per micro-batch, exactly once.

    One table: TABLE --topic T1,T2. Many tables from one job: --route TOPIC=NS.TABLE (repeatable),
    --routes FILE, --topic-pattern REGEX --table '{topic}', or --topic T --table-field FIELD; such a
    job needs --name and --dead-letter-table. Spark runs on the (first) table's cluster: its
    [clusters] spark_masters entry here, its registered master, or spark.master (--spark-master).
    """
    flags = dict(locals())
    del flags["ctx"]
    if not bootstrap:
        raise UserInputError("--bootstrap is required: Kafka bootstrap servers, HOST:PORT[,HOST:PORT…]")
    flags.update(
        route=tuple(route or ()),
        routes_file=str(routes) if routes else None,
        avro_schema=str(avro_schema) if avro_schema else None,
        checkpoint=str(checkpoint) if checkpoint else None,
        source_options=_source_options(option or []),
        kafka=cli_context(ctx).settings().kafka,
    )
    del flags["routes"], flags["option"]
    _run(ctx, _options(**flags), trigger)


def _run(ctx: typer.Context, options: Any, trigger: str) -> None:
    """Run the ingest job until it ends (available-now), fails or gets SIGTERM; exit 0 when it stops."""
    from ingest.kafka.job import run_kafka_ingest
    from streampart.cluster_spark import ClusterSpark

    # one line per committed batch (ingest.*); libraries stay at warnings
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("ingest").setLevel(logging.INFO)
    cli = cli_context(ctx)
    settings = cli.settings()
    catalog = cli.catalog()
    err = cli.output.err
    should_stop = _stop_on_sigterm(err)
    with driver_jvm.in_own_session():  # a SIGTERM to the job's process group reaches the driver only
        spark = ClusterSpark(settings, catalog)(_spark_table(catalog, options))
    what = ", ".join(options.topics) if options.table else str(options.routes())
    err.print(
        f"ingesting {what} from {options.bootstrap}"
        + (f" into {options.table}" if options.table else f" (job {options.job})")
        + (" (available now)" if options.available_now else f" every {trigger}"),
        highlight=False,
    )
    batches = run_kafka_ingest(spark, catalog, options, settings.chunk, should_stop=should_stop)
    err.print(f"stopped after {batches} batch(es)", highlight=False)
    _stop_quietly(spark)
    sys.exit(0)


def _spark_table(catalog: Any, options: Any) -> Any:
    """The table whose cluster runs the job's Spark: the one table, the first route naming one, or
    the job's dead-letter table (made here if absent)."""
    from ingest.kafka.job import job_dead_letters
    from metastore.errors import NotFoundError

    if options.table:
        return catalog.table(options.table)
    for route in options.routes().routes:
        if route.fixed_table:
            with contextlib.suppress(NotFoundError):  # a missing table only refuses its records
                return catalog.table(route.fixed_table)
    return job_dead_letters(catalog, str(options.dead_letter_table))


def _request(ctx: typer.Context, job: str, topic: str, action: str, target: str | None = None) -> None:
    import getpass
    import socket

    from ingest.kafka.steering import request_change
    from metastore.models import IngestAction

    cli = cli_context(ctx)
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    try:
        request, known = request_change(cli.catalog().store, job, topic, IngestAction(action), who, target)
    except ValueError as exc:
        raise UserInputError(f"--to: {exc}") from None
    if not known:
        cli.output.warn(f"no ingest job {job} has run against this metastore yet: the request waits for it")
    cli.output.result(
        request.model_dump(mode="json"),
        lambda out, r: out.note(
            f"request {r['id']}: {action} topic {topic} of job {job}; "
            "the job applies it before its next batch"
        ),
    )


@ingest_app.command("pause")
def ingest_pause(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="The job's name (--name; a one-table job: its NS.TABLE)")],
    topic: Annotated[str, typer.Argument(help="The topic to stop reading (its offsets stand still)")],
    _json: JsonFlag = False,
) -> None:
    """Pause one topic of a running ingest job: nothing more of it is read until it is resumed.

    The request is recorded in the metastore; the job applies it between batches (about a second)
    and records when. The other topics go on; a pause survives a restart of the job.
    """
    _request(ctx, job, topic, "pause")


@ingest_app.command("resume")
def ingest_resume(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="The job's name")],
    topic: Annotated[str, typer.Argument(help="The paused topic to read again, from where it stood")],
    _json: JsonFlag = False,
) -> None:
    """Resume a paused topic of an ingest job."""
    _request(ctx, job, topic, "resume")


@ingest_app.command("reset")
def ingest_reset(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="The job's name")],
    topic: Annotated[str, typer.Argument(help="The topic whose offsets move")],
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="earliest, latest, an ISO-8601 time (each partition's first record at or after it), or "
            'JSON offsets {"0": 42, "1": 7} (partitions not named stay)',
        ),
    ],
    _json: JsonFlag = False,
) -> None:
    """Move a topic's read position in a running ingest job: an explicit skip or replay.

    The job applies it in its next batch, which reads the topic from the new position: records
    before it are skipped, records after it that were ingested already land again (as new rows).
    The request records who asked and, once applied, what moved and how many records that skipped
    or read again per partition.
    """
    _request(ctx, job, topic, "reset", to)


@ingest_app.command("status")
def ingest_status(
    ctx: typer.Context,
    job: Annotated[str | None, typer.Argument(help="One job (default: every job)")] = None,
    _json: JsonFlag = False,
) -> None:
    """What each ingest job last published: per topic reading or paused, lag in records and in
    seconds, last error, and the requests made to it."""
    from ingest.kafka.steering import job_reports

    cli = cli_context(ctx)
    cli.output.result(job_reports(cli.catalog().store, job), _print_status)


def _print_status(out: Any, jobs: list[dict[str, Any]]) -> None:
    from streampart.cli.output import listing

    table = listing(
        "job", "topic", "state", "table", "lag (records)", "lag (s)", "last error", whole=("job", "topic")
    )
    for j in jobs:
        status = j["status"]
        for topic, t in status.get("topics", {}).items():
            seconds = t.get("lag_seconds")  # None: unknown (the broker away, the record gone)
            table.add_row(
                j["job"], topic, t["state"], t["table"] or "", str(t["lag_records"]),
                "?" if seconds is None else f"{seconds:.0f}", t["last_error"] or "",
            )  # fmt: skip
        if status.get("failure"):
            table.add_row(j["job"], "", "failed", "", "", "", status["failure"])
    out.table(table)
    for j in jobs:
        for r in j["requests"]:
            done = f"done {r['done_at']}: {r['outcome']}" if r["done_at"] else "pending"
            what = f"{r['action']} {r['topic']}" + (f" to {r['target']}" if r.get("target") else "")
            out.note(f"{j['job']}: request {r['id']} {what} by {r['requested_by']} — {done}")


def _stop_on_sigterm(err: Console) -> Callable[[], bool]:
    """Catch SIGTERM: the job stops after the batch in flight; the answer says whether it came."""
    stop = {"requested": False}

    def _on_term(signum: int, frame: Any) -> None:
        if stop["requested"]:
            return
        stop["requested"] = True
        err.print("SIGTERM: stopping after the batch in flight", highlight=False)

    signal.signal(signal.SIGTERM, _on_term)
    return lambda: stop["requested"]


def _stop_quietly(spark: Any) -> None:
    with contextlib.suppress(Exception):
        spark.sparkContext.setLogLevel("OFF")  # nothing left to say: spare the shutdown's chatter
        spark.stop()
