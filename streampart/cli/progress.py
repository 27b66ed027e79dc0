"""The CLI's progress bars: one helper for every command whose work takes more than a few seconds.

Bars are for people watching a terminal: they go to stderr, only when it is a terminal, never
with ``--json`` (a program reading the output gets pure JSON on stdout and no escape codes on
stderr), and they vanish when the work is done. The work reports through
:class:`metastore.progress.Progress`; :func:`progress_bars` hands the command one that draws.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from metastore.progress import Progress
from streampart.cli.output import JsonOutput, Output

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID

__all__ = ["Bars", "progress_bars"]


class Bars(Progress):
    """A :class:`Progress` drawn as rich bars, one per piece of work begun."""

    def __init__(self, bar: RichProgress) -> None:
        self.bar = bar
        self.task: TaskID | None = None

    def start(self, description: str, total: int | None, unit: str = "") -> None:
        self.task = self.bar.add_task(description, total=total, unit=unit)

    def advance(self, amount: int = 1) -> None:
        if self.task is not None:
            self.bar.advance(self.task, amount)

    def step(self, text: str) -> None:
        """A line above the bars (it stays when they go)."""
        self.bar.console.print(text, highlight=False, markup=False)


def shows_bars(output: Output, printing: bool = False) -> bool:
    """Whether a command with ``output`` draws bars: on a terminal, and not with --json.

    ``printing``: the command prints to stdout while the bars run. Rich then moves those lines
    above the bars, through stderr, which is right only if stdout is that terminal too (not a
    pipe or a file); otherwise no bars.
    """
    if isinstance(output, JsonOutput) or not output.err.is_terminal:
        return False
    return output.console.is_terminal or not printing


@contextmanager
def progress_bars(output: Output, printing: bool = False) -> Iterator[Progress]:
    """Bars on ``output``'s stderr while the block runs, if :func:`shows_bars`; else a silent Progress.

    Example:
        >>> with progress_bars(cli.output) as progress:
        ...     Roller(catalog, config, progress=progress).roll_table(table, force=True)
    """
    if not shows_bars(output, printing):
        yield Progress()
        return
    from rich.filesize import decimal
    from rich.progress import BarColumn, ProgressColumn, TextColumn, TimeRemainingColumn
    from rich.progress import Progress as RichProgress
    from rich.text import Text

    class Amount(ProgressColumn):
        """``done/total unit``; bytes as kB, MB, …"""

        def render(self, task: Any) -> Text:
            unit, done, total = task.fields.get("unit", ""), int(task.completed), task.total
            if unit == "bytes":
                text = decimal(done) + (f"/{decimal(int(total))}" if total is not None else "")
            else:
                text = (
                    f"{done}" + (f"/{int(total)}" if total is not None else "") + (f" {unit}" if unit else "")
                )
            return Text(text, style="progress.download")

    with RichProgress(
        TextColumn("{task.description}"),
        BarColumn(bar_width=24),
        Amount(),
        TimeRemainingColumn(elapsed_when_finished=True),
        console=output.err,
        transient=True,
    ) as bar:
        yield Bars(bar)
