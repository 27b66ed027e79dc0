"""``streampart write``: one file as one chunk, into the warehouse or through the HTTP API (--url)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from streampart.cli.context import CliContext, Terminated, cli_context
from streampart.cli.inputs import check_input, input_file
from streampart.cli.output import TextOutput
from streampart.cli.params import JsonFlag, choice

# ingest.client.DEFAULT_RETRY_FOR (a test keeps them equal): that module costs httpx at start-up
RETRY_FOR = "150s"


def write(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    file: Annotated[Path, typer.Argument(help="File to commit as one chunk ('-' for standard input)")],
    format: Annotated[
        str | None, typer.Option("--format", help="jsonl, csv or parquet [default: from the file name]")
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            "--key",
            "--token",  # its first name, kept for scripts that use it
            help="Idempotency key: the chunk's name for good; a retry with the same key and data lands once",
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(help="The cluster meant to take the write: only the table's primary does [default: it]"),
    ] = None,
    _json: JsonFlag = False,
    url: Annotated[
        str | None, typer.Option(help="Send through the HTTP API at URL (streampart serve)")
    ] = None,
    api_token: Annotated[
        str | None, typer.Option(envvar="STREAMPART_API_TOKEN", help="Bearer token for --url")
    ] = None,
    retry_for: Annotated[
        str,
        typer.Option(
            help="--url: how long each call retries a server that does not answer or is busy (0: once)"
        ),
    ] = RETRY_FOR,
) -> None:
    """Commit FILE as one chunk into the table's streaming partition(s)."""
    check_input(file)  # before the imports below (seconds on a loaded machine): a typo is told at once
    from ingest.formats import Format

    cli = cli_context(ctx)
    fmt = choice(Format, format, "--format") if format else Format.guess(file)
    if url is not None:
        from metastore.durations import parse_duration

        budget = parse_duration(retry_for, "--retry-for").total_seconds()
        _write_over_http(cli, url, api_token, name, file, fmt, key, cluster, budget)
    else:
        _write_here(cli, name, file, fmt, key, cluster)


def _terminated(*_: Any) -> None:
    raise Terminated()


def _write_here(
    cli: CliContext, name: str, file: Path, fmt: Any, key: str | None, cluster: str | None
) -> None:
    from ingest.chunks import ChunkWriter

    with input_file(file) as read:
        content = read.read()
    settings = cli.settings()
    catalog = cli.catalog()
    writer = ChunkWriter(catalog, catalog.table(name, cluster), settings.chunk)
    signal.signal(signal.SIGTERM, _terminated)  # as Ctrl-C: the chunk is let go, then exit 143
    try:
        result = writer.write(content, fmt, key=key, source=str(file))
    except KeyboardInterrupt as exc:  # the writer let its chunk go and says what became of it
        _interrupted(cli, exc)
    if result.repeated:  # the same answer either way; said on stderr, so --json's output is unchanged
        cli.output.warn(f"already committed under key {key!r} with the same content: nothing added")
    cli.output.result(result.to_json(), _print_written_here)


def _write_over_http(
    cli: CliContext,
    url: str,
    api_token: str | None,
    name: str,
    file: Path,
    fmt: Any,
    key: str | None,
    cluster: str | None,
    retry_for: float,
) -> None:
    """``streampart write --url``: the same chunk, sent through the HTTP API by :mod:`ingest.client`."""
    from ingest.client import Client, Retrying

    def retrying(r: Retrying) -> None:  # at once, not after the whole budget: the user may give up
        cli.output.warn(
            f"no answer from {r.method} {r.url}: {r.problem}; retrying for up to {r.retry_for:g} s "
            f"(--retry-for; waits of {r.backoff:g} s doubling to {r.max_backoff:g} s)"
        )

    check_input(file)  # (again: it may have gone since) a path is streamed by the client
    data: Any = sys.stdin.buffer.read() if str(file) == "-" else file
    signal.signal(signal.SIGTERM, _terminated)  # as Ctrl-C: the chunk is let go, then exit 143
    try:
        with Client(url, api_token, retry_for=retry_for, on_retry=retrying) as api:
            result = api.write(name, data, str(fmt), idempotency_key=key, cluster=cluster)
    except KeyboardInterrupt as exc:  # the client let its chunk go and says what became of it
        _interrupted(cli, exc)
    cli.output.result(result, _print_written)


def _interrupted(cli: CliContext, exc: KeyboardInterrupt) -> NoReturn:
    cli.output.warn(f"interrupted: {exc}" if str(exc) else "interrupted")
    raise typer.Exit(143 if isinstance(exc, Terminated) else 130) from None


def _print_written_here(out: TextOutput, result: dict[str, Any]) -> None:
    if result["ignored_fields"]:
        why = result.get("refused_fields") or {}
        fields = ", ".join(
            f"{k} ({n} records{': ' + why[k] if k in why else ''})"
            for k, n in sorted(result["ignored_fields"].items())
        )
        out.warn(f"warning: fields not in the table were not written: {fields}")
    if result.get("new_columns"):
        columns = ", ".join(f"{k} {t}" for k, t in result["new_columns"].items())
        out.warn(f"new columns (the table's schema evolution): {columns}")
    if result.get("rounded_values"):
        columns = ", ".join(f"{k} ({n} values)" for k, n in sorted(result["rounded_values"].items()))
        out.warn(f"warning: values with more decimals than their DECIMAL column were rounded: {columns}")
    _print_written(out, result)


def _print_written(out: TextOutput, result: dict[str, Any]) -> None:
    """A write's result, as the chunk writer or the HTTP API reports it."""
    extra = ""
    if result.get("dead_letter_rows"):
        extra += f", {result['dead_letter_rows']} bad records to the dead-letter table"
    if result.get("late_rows"):
        extra += f", {result['late_rows']} late rows diverted"
    out.console.print(
        f"committed chunk {result['chunk']}: {result['rows']} rows into "
        f"{', '.join(result['partitions']) or '(none)'} at version {result['version']}{extra}"
    )
