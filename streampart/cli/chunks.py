"""``streampart chunk list|show|abort``: a table's chunks, and giving an open one up by hand.

An abort goes through the chunk protocol (:meth:`ingest.chunks.ChunkWriter.abort`, as the HTTP
API's ``DELETE /v1/chunks/{id}``): RESERVED → ABORTED in one guarded update, then its staged
files go. A COMMITTING chunk is not aborted from outside: its commit may already be in the Delta
log, and only the attempt holding it may end it (``metastore/store/chunks.py``); its writer
finishes it, or housekeeping rolls it forward once it is stale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from metastore.errors import UserInputError
from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput
from streampart.cli.params import JsonFlag, choice

if TYPE_CHECKING:
    from metastore.catalog import Catalog
    from metastore.models import Chunk, Table

chunk_app = typer.Typer(help="List a table's chunks, show one, abort an open one.", no_args_is_help=True)

ChunkId = Annotated[
    str, typer.Argument(help="The chunk's id (a UUID), as `chunk list` or `write --json` print it")
]


def chunk_json(
    catalog: Catalog, table: Table, chunk: Chunk, times: dict[int, Any] | None = None
) -> dict[str, Any]:
    """One chunk as ``chunk list|show|abort --json`` print it.

    ``committed_at`` is the time of its Delta commit, from the commit file (None once the log's
    retention took it); ``times`` caches those per version.
    """
    from metastore.delta.history import commit_time
    from metastore.models import iso

    committed_at = None
    if chunk.version is not None:
        cache = times if times is not None else {}
        if chunk.version not in cache:
            cache[chunk.version] = commit_time(table, chunk.version)
        committed_at = cache[chunk.version]
    return {
        "id": chunk.id,
        "table": str(table.name),
        "state": chunk.state.value,
        "partitions": [iso(p) for p in chunk.partitions],
        "rows": chunk.rows,
        "bytes": chunk.bytes,
        "files": len(chunk.files),
        "idempotency_key": chunk.idempotency_key,
        "created_at": iso(chunk.created_at),
        "expires_at": iso(chunk.expires_at),
        "committing_since": iso(chunk.committing_since) if chunk.committing_since else None,
        "committed_at": iso(committed_at) if committed_at else None,
        "version": chunk.version,
        # The metastore records no writer identity: the commit attempt's id is what names who holds it.
        "attempt": chunk.attempt,
        "dead_letter_rows": chunk.dead_letter_rows,
        "late_rows": chunk.late_rows,
        "error": chunk.error,
    }


@chunk_app.command("list")
def chunk_list(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    state: Annotated[
        str | None,
        typer.Option(help="Only chunks in this state: reserved, committing, committed, aborted or expired"),
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many, the newest first", min=1)] = 50,
    _json: JsonFlag = False,
) -> None:
    """List a table's chunks, newest first: state, partitions, rows, bytes, idempotency key, times.

    Committed chunks stay listed until housekeeping prunes them into their partition's summary
    (scheduler.housekeeping.chunk_retention after their partition rolled).
    """
    from metastore.models import ChunkState

    states = [choice(ChunkState, state, "--state")] if state is not None else None
    cli = cli_context(ctx)
    catalog = cli.catalog()
    resolved = catalog.resolve(name)
    if resolved.link is not None:  # (its source may be another namespace's: not listed in its name)
        raise UserInputError(
            f"{resolved.name} is a link to {resolved.table.name}, and a link has no chunks of its own: "
            f"the chunks are {resolved.table.name}'s (streampart chunk list {resolved.table.name})"
        )
    table = resolved.table
    chunks = catalog.home(table).store.list_chunks(table.id, states, limit=limit, newest_first=True)
    times: dict[int, Any] = {}
    cli.output.result([chunk_json(catalog, table, c, times) for c in chunks], _print_list)


def _print_list(out: TextOutput, rows: list[dict[str, Any]]) -> None:
    # a line per chunk, not a grid: a chunk id is 36 characters, and a grid of eight columns
    # squeezed into a terminal's 80 cuts every other column to "…"
    if not rows:
        out.console.print("no chunks")
    for r in rows:
        parts = ", ".join(_short(p) for p in r["partitions"]) or "no partition yet"
        out.console.print(
            f"{r['id']}  {r['state']:<10}  {r['rows']} rows, {r['bytes']} bytes  partition {parts}"
            + (f"  key {r['idempotency_key']}" if r["idempotency_key"] else "")
            + f"  created {_short(r['created_at'])}"
            + (f"  version {r['version']}" if r["version"] is not None else "")
            + (f"  ({r['error']})" if r["error"] else ""),
            highlight=False,
            markup=False,
        )


def _short(instant: str) -> str:
    """An ISO-8601 UTC instant to the second, as a person reads it in a table."""
    return instant[:19].replace("T", " ")


@chunk_app.command("show")
def chunk_show(ctx: typer.Context, chunk_id: ChunkId, _json: JsonFlag = False) -> None:
    """Show one chunk: its table, state, times, files, Delta version, and why it ended, if it did."""
    cli = cli_context(ctx)
    catalog = cli.catalog()
    chunk, table = catalog.chunk(chunk_id)
    info = chunk_json(catalog, table, chunk) | {"file_paths": [f.path for f in chunk.files]}
    cli.output.result(info, _print_shown)


def _print_shown(out: TextOutput, info: dict[str, Any]) -> None:
    keys = ("table", "state", "partitions", "rows", "bytes", "files", "idempotency_key", "created_at",
            "expires_at", "committing_since", "committed_at", "version", "attempt", "dead_letter_rows",
            "late_rows", "error")  # fmt: skip
    out.console.print(f"chunk [bold]{info['id']}[/]")
    for key in keys:
        value = info[key]
        if isinstance(value, list):
            value = ", ".join(value)
        if value not in (None, "", 0) or key in ("rows", "bytes", "state"):
            out.console.print(f"  {key}: {value}", highlight=False, markup=False)
    for path in info["file_paths"]:
        out.console.print(f"  file: {path}", highlight=False, markup=False)


@chunk_app.command("abort")
def chunk_abort(ctx: typer.Context, chunk_id: ChunkId, _json: JsonFlag = False) -> None:
    """Abort an open (reserved) chunk: it never becomes visible and its staged files go.

    As the HTTP API's DELETE /v1/chunks/{id}. Aborting an aborted chunk again is harmless. A
    committed or expired chunk cannot be aborted; nor can a committing one, whose commit may
    have landed already: its writer finishes it, or `streampart housekeep` does once it is stale.
    """
    from ingest.chunks import ChunkWriter
    from metastore.models import ChunkState, iso

    cli = cli_context(ctx)
    settings = cli.settings()
    catalog = cli.catalog(settings)
    chunk, table = catalog.chunk(chunk_id)
    if chunk.state is ChunkState.COMMITTING:
        since = chunk.committing_since or chunk.created_at
        stale_at = since + 2 * settings.chunk.commit_timeout
        raise UserInputError(
            f"chunk {chunk.id} of {table.name} is committing (since {iso(since)}) and cannot be "
            "aborted: its commit may already be in the Delta log, and only the attempt committing "
            "it may end it. Its writer finishes it; if the writer died, `streampart housekeep` "
            f"finishes it from {iso(stale_at)} (committing it, or aborting it if it can never land)"
        )
    if chunk.state in (ChunkState.COMMITTED, ChunkState.EXPIRED):
        what = (
            f"committed at Delta version {chunk.version}: its rows are visible, and stay"
            if chunk.state is ChunkState.COMMITTED
            else "expired (its TTL passed before it was committed): it was given up already"
        )
        raise UserInputError(f"chunk {chunk.id} of {table.name} cannot be aborted: it is {what}")
    was_aborted = chunk.state is ChunkState.ABORTED
    aborted = ChunkWriter(catalog, table, settings.chunk).abort(
        chunk.id, reason="aborted by `streampart chunk abort`"
    )
    info = chunk_json(catalog, table, aborted) | {"already_aborted": was_aborted}
    cli.output.result(info, _print_aborted)


def _print_aborted(out: TextOutput, info: dict[str, Any]) -> None:
    if info["already_aborted"]:
        out.console.print(f"chunk {info['id']} of {info['table']} was aborted already ({info['error']})")
    else:
        out.console.print(
            f"aborted chunk {info['id']} of {info['table']}: {info['rows']} staged row(s) never become "
            f"visible; its {info['files']} staged file(s) were deleted",
            highlight=False,
        )
