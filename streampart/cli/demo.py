"""``streampart demo``: the whole product in one command."""

from __future__ import annotations

from typing import Annotated

import typer

from streampart.cli.context import cli_context
from streampart.cli.progress import progress_bars


def demo(
    ctx: typer.Context,
    keep: Annotated[
        bool, typer.Option(help="Keep an existing demo table instead of starting afresh")
    ] = False,
) -> None:
    """Create a demo table, write chunks, roll, query, and print what happened."""
    from streampart.demo import run_demo

    cli = cli_context(ctx)
    with progress_bars(cli.output, printing=True) as progress:
        catalog = cli.catalog(create=True)
        run_demo(cli.settings(), catalog, cli.output.console, fresh=not keep, progress=progress)
