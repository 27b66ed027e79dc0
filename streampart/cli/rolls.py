"""``streampart roll`` and ``streampart housekeep``: by hand, what the roll daemon does on time."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput
from streampart.cli.params import JsonFlag
from streampart.cli.progress import progress_bars


def roll(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    now: Annotated[
        str | None, typer.Option(help="Roll what is due at this ISO-8601 time [default: now]")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Roll the open streaming partition(s) now")] = False,
    _json: JsonFlag = False,
) -> None:
    """Roll every partition of the table that is due (or, with --force, the open ones)."""
    from metastore.models import PartitionState, iso, parse_instant
    from scheduler.roll import Roller, due_time
    from streampart.cluster_spark import ClusterSpark

    cli = cli_context(ctx)
    settings = cli.settings()
    catalog = cli.catalog()
    table = catalog.table(name)
    catalog = catalog.home(table, write=True)  # the table's own metastore (rolling writes it)
    at = parse_instant(now, "--now") if now else None
    with progress_bars(cli.output) as progress:
        roller = Roller(catalog, settings.roll, spark=ClusterSpark(settings, catalog), progress=progress)
        results = roller.roll_table(table, now=at, force=force)
    # rolls another roller holds (or whose lease has not lapsed yet): say whose, and why it may be stuck
    held = [
        {"partition": iso(r.partition_value), "roll": r.id, "state": r.state.value, "owner": r.owner,
         "lease_until": iso(r.lease_until) if r.lease_until else None, "last_error": r.error}
        for r in catalog.store.list_rolls(table.id, unfinished=True)
    ]  # fmt: skip
    # nothing rolled: when each open partition is due, so "nothing to roll" says why
    waiting = [
        {"partition": iso(p.value), "due": iso(due_time(table, p))}
        for p in catalog.store.list_partitions(table.id, [PartitionState.STREAMING])
    ]
    cli.output.result(
        {"table": str(table.name), "rolled": [r.to_json() for r in results], "in_progress": held,
         "open": waiting},
        _print_rolled,
    )  # fmt: skip


def _print_rolled(out: TextOutput, info: dict[str, Any]) -> None:
    table = info["table"]
    if not info["rolled"] and not info["in_progress"]:
        due = "; ".join(f"{w['partition']} is due at {w['due']}" for w in info["open"])
        why = f" ({due}; --force rolls it now)" if due else " (no open partition)"
        out.console.print(f"{table}: nothing to roll{why}", highlight=False)
    for h in info["in_progress"]:
        out.console.print(
            f"{table} partition {h['partition']}: its roll ({h['state']}) is held by {h['owner']} until "
            f"{h['lease_until']}" + (f"; last error: {h['last_error']}" if h["last_error"] else ""),
            highlight=False,
            markup=False,
        )
    for r in info["rolled"]:
        out.console.print(
            f"rolled {r['table']} partition {r['partition']}: {r['chunks']} chunks, {r['rows']} rows, "
            f"{r['files_before']} → {r['files_after']} files in {r['seconds']:.2f}s"
            + (f"; next streaming partition {r['next_partition']}" if r["next_partition"] else "")
            + (" (resumed)" if r["resumed"] else "")
        )


def housekeep(ctx: typer.Context, _json: JsonFlag = False) -> None:
    """Expire reserved chunks past their TTL and finish commits whose writer died (in every metastore
    of the federation that takes writes; one that does not answer is named and skipped)."""
    from ingest.chunks import expire_chunks, recover_commits
    from metastore.errors import MetastoreUnavailableError
    from metastore.federation import AccessType

    cli = cli_context(ctx)
    settings = cli.settings()
    catalog = cli.catalog()
    expired, recovered = [], []
    with progress_bars(cli.output) as progress:
        for name in catalog.router.names():
            if catalog.router.entry(name).access is AccessType.READ_ONLY:
                continue
            try:
                home = catalog.on(name)
                expired += expire_chunks(home, progress=progress)
                recovered += recover_commits(home, settings.chunk, progress=progress)
            except MetastoreUnavailableError as exc:
                cli.output.warn(f"skipped metastore {name}: {exc}")
    cli.output.result(
        {"expired": [c.id for c in expired], "recovered": [r.to_json() for r in recovered]},
        _print_housekept,
    )


def _print_housekept(out: TextOutput, info: dict[str, Any]) -> None:
    expired, recovered = len(info["expired"]), len(info["recovered"])
    out.console.print(f"expired {expired} reserved chunks; finished {recovered} interrupted commits")
