"""``streampart scheduler run|status``: the roll daemon and what it is doing.

Registered on the main app in :mod:`streampart.cli`; imports nothing heavy until a command runs.
"""

from __future__ import annotations

from typing import Annotated

import typer

scheduler_app = typer.Typer(
    help="The roll daemon: rolls every streaming table on time (one leader among many daemons).",
    no_args_is_help=True,
)


@scheduler_app.command("run")
def scheduler_run(
    metrics_port: Annotated[
        int | None,
        typer.Option(help="Port of the Prometheus /metrics endpoint (0: a free port) [default: from config]"),
    ] = None,
    no_metrics: Annotated[bool, typer.Option("--no-metrics", help="Do not serve metrics")] = False,
    log_format: Annotated[
        str | None, typer.Option(help="json (structured, default) or text [default: from config]")
    ] = None,
) -> None:
    """Run the roll daemon until SIGTERM/SIGINT (then it finishes or safely abandons its roll, exit 0).

    Start as many as you like against one metastore: one leads, the others take over if it dies.
    """
    from metastore.logs import configure_logging
    from scheduler.daemon import RollDaemon
    from streampart.cli import STATE

    settings = STATE.settings()
    updates: dict[str, object] = {}
    if metrics_port is not None:
        updates["metrics_port"] = metrics_port
    if no_metrics:
        updates["metrics"] = False
    if log_format is not None:
        from metastore.errors import UserInputError

        if log_format not in ("json", "text"):
            raise UserInputError(f"--log-format must be json or text; got {log_format!r}")
        updates["log_format"] = log_format
    config = settings.scheduler.model_copy(update=updates)
    configure_logging(config.log_format, config.log_level)
    daemon = RollDaemon(STATE.catalog(), config, settings.roll, settings.chunk)
    raise typer.Exit(daemon.run_forever())


@scheduler_app.command("status")
def scheduler_status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
    limit: Annotated[int, typer.Option(help="How many recent roll attempts to show")] = 20,
) -> None:
    """Show the leader, the next roll time per table, and the last rolls with durations and outcomes."""
    from rich.table import Table as RichTable

    from scheduler.status import scheduler_status as build
    from streampart.cli import STATE, emit_json, out

    settings = STATE.settings()
    info = build(STATE.catalog(), settings.scheduler, limit=limit)
    if as_json:
        emit_json(info)
        return
    leader = info["leader"]
    if leader is None:
        out.print("leader: none (no roll daemon has run against this metastore)")
    elif not leader["live"]:
        out.print(f"leader: none (the last lease, epoch {leader['epoch']}, lapsed at {leader['expires_at']})")
    else:
        out.print(
            f"leader: [bold]{leader['holder']}[/] (epoch {leader['epoch']}, since {leader['since']}, "
            f"lease until {leader['expires_at']})"
            + (f"\nmetrics: {leader['metrics']}" if leader["metrics"] else "")
        )
    grid = RichTable(
        "table", "mode", "every", "next roll", "open partition", "rolling", "failures", "last error"
    )
    for t in info["tables"]:
        grid.add_row(
            t["table"],
            t["mode"],
            t["roll_every"],
            t["next_roll"] or "-",
            t["next_partition"] or "-",
            ", ".join(f"{r['partition']} ({r['step']})" for r in t["rolling"]) or "-",
            str(t["failures"]),
            (t["last_error"] or "")[:80] + (f" (retry at {t['retry_at']})" if t["retry_at"] else ""),
        )
    out.print(grid if info["tables"] else "no tables")
    recent = RichTable("finished", "table", "partition", "outcome", "seconds", "rows", "resumed", "error")
    for r in info["recent_rolls"]:
        recent.add_row(
            r["finished_at"],
            r["table"],
            r["partition"] or "-",
            r["outcome"],
            f"{r['seconds']:.2f}",
            "-" if r["rows"] is None else str(r["rows"]),
            "yes" if r["resumed"] else "",
            (r["error"] or "")[:80],
        )
    if info["recent_rolls"]:
        out.print("recent rolls:")
        out.print(recent)
    else:
        out.print("no rolls by the daemon yet")
