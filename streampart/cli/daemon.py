"""``streampart scheduler run|status``: the roll daemon and what it is doing.

Registered on the root app in :mod:`streampart.cli.root`; imports nothing heavy until a command runs.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput, listing
from streampart.cli.params import JsonFlag

scheduler_app = typer.Typer(
    help="The roll daemon: rolls every streaming table on time (one leader among many daemons).",
    no_args_is_help=True,
)


@scheduler_app.command("run")
def scheduler_run(
    ctx: typer.Context,
    metrics_port: Annotated[
        int | None,
        typer.Option(help="Port of the Prometheus /metrics endpoint (0: a free port) [default: from config]"),
    ] = None,
    no_metrics: Annotated[bool, typer.Option("--no-metrics", help="Do not serve metrics")] = False,
    status_port: Annotated[
        int | None,
        typer.Option(
            help="Serve the read-only status page (/ui, the API's tokens) on this port (0: a free port) "
            "[default: from config, not served]"
        ),
    ] = None,
    log_format: Annotated[
        str | None, typer.Option(help="json (structured, default) or text [default: from config]")
    ] = None,
) -> None:
    """Run the roll daemon until SIGTERM/SIGINT (then it finishes or safely abandons its roll, exit 0).

    It rolls in every metastore of the federation that takes writes (one leadership lease in each,
    so a dead metastore stops only its own rolls), and follows the registry without a restart.
    Start as many as you like: in each metastore one leads, the others take over if it dies.
    """
    import signal

    from metastore.crashpoints import pausepoint
    from metastore.logs import configure_logging
    from scheduler.federation_daemons import FederationDaemons

    # Stopped while it starts (settings, metastores, the status page): nothing is under way yet, so
    # it exits 0 at once, as a stop once running does. The daemon's own handler takes over as it runs.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stopped_while_starting)
    pausepoint("daemon-starting")
    cli = cli_context(ctx)
    settings = cli.settings(
        scheduler={
            "metrics_port": metrics_port,
            "metrics": False if no_metrics else None,
            "log_format": log_format,
            "status_port": status_port,
            "status": True if status_port is not None else None,
        }
    )
    configure_logging(settings.scheduler.log_format, settings.scheduler.log_level)
    from streampart.cluster_spark import ClusterSpark

    catalog = cli.catalog(settings)
    daemon = FederationDaemons(
        catalog, settings.scheduler, settings.roll, settings.chunk, spark=ClusterSpark(settings, catalog)
    )
    status = None
    if settings.scheduler.status:
        from ingest.api.auth import Authenticator
        from ingest.login_guard import LoginGuard
        from scheduler.status_page import StatusPage
        from scheduler.status_page.server import StatusServer

        page = StatusPage(
            catalog,
            settings.scheduler,
            Authenticator(
                catalog.primary,
                settings.server.auth_cache_ttl.total_seconds(),
                LoginGuard.of(settings.server, "status page"),
            ),
            read_only_note="served by the roll daemon",
        )
        status = StatusServer(page, settings.scheduler.status_host, settings.scheduler.status_port)
    serving = None
    try:
        if status is not None:
            status.start()
            serving = status
        code = daemon.run_forever()
    finally:
        if serving is not None:
            serving.stop()
    raise typer.Exit(code)


def _stopped_while_starting(signum: int, _frame: Any) -> None:
    raise typer.Exit(0)


@scheduler_app.command("status")
def scheduler_status(
    ctx: typer.Context,
    _json: JsonFlag = False,
    limit: Annotated[int, typer.Option(help="How many recent roll attempts to show")] = 20,
) -> None:
    """Show the leader, the next roll time per table, and the last rolls with durations and outcomes."""
    from scheduler.status import scheduler_status as build

    cli = cli_context(ctx)
    settings = cli.settings()
    cli.output.result(build(cli.catalog(settings), settings.scheduler, limit=limit), _print_status)


def _print_status(out: TextOutput, info: dict[str, Any]) -> None:
    federated = len(info.get("metastores", [])) > 1
    if not federated:
        out.console.print(_leader_line(info["leader"]))
    else:  # one lease per metastore: each one's leader
        for m in info["metastores"]:
            line = f"did not answer: {m['error']}" if m["error"] else _leader_line(m["leader"])
            out.console.print(f"[bold]{m['metastore']}[/] {line}")
    for m in info["metastores"]:
        if m["error"] is None and (m["daemons"] or m["housekeeping"]):
            out.console.print((f"[bold]{m['metastore']}[/] " if federated else "") + _daemons_line(m))
    grid = listing(
        *(["metastore"] if federated else []),
        "table",
        "mode",
        "every",
        "next roll",
        "open partition",
        "rolling",
        "failures",
        "last error",
        whole=("metastore", "table"),
    )
    for t in info["tables"]:
        grid.add_row(
            *([t["metastore"]] if federated else []),
            t["table"],
            t["mode"],
            t["roll_every"],
            t["next_roll"] or "-",
            t["next_partition"] or "-",
            ", ".join(f"{r['partition']} ({r['step']})" for r in t["rolling"]) or "-",
            str(t["failures"]),
            (t["last_error"] or "")[:80] + (f" (retry at {t['retry_at']})" if t["retry_at"] else ""),
        )
    if info["tables"]:
        out.table(grid)
    else:
        out.console.print("no tables")
    headers = ("finished", "table", "partition", "outcome", "seconds", "rows", "resumed", "error")
    recent = listing(*headers, whole=("table", "partition"))
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
        out.console.print("recent rolls:")
        out.table(recent)
    else:
        out.console.print("no rolls by the daemon yet")


def _daemons_line(m: dict[str, Any]) -> str:
    standbys = [d["holder"] for d in m["daemons"] if d["role"] == "standby"]
    hk = m["housekeeping"]
    housekeeping = "never" if hk is None else f"{hk['outcome']} at {hk['at']}"
    return f"standbys: {', '.join(standbys) or 'none'}; housekeeping: {housekeeping}"


def _leader_line(leader: dict[str, Any] | None) -> str:
    if leader is None:
        return "leader: none (no roll daemon has run against this metastore)"
    if not leader["live"]:
        return f"leader: none (the last lease, epoch {leader['epoch']}, lapsed at {leader['expires_at']})"
    return (
        f"leader: [bold]{leader['holder']}[/] (epoch {leader['epoch']}, since {leader['since']}, "
        f"lease until {leader['expires_at']})"
        + (f"\nmetrics: {leader['metrics']}" if leader["metrics"] else "")
    )
