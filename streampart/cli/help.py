"""How ``--help`` shows parameters, the same for every command.

Typer 0.29 renders every parameter by its Python type in angle brackets: ``<bool>`` beside each
flag (``--json <bool>`` reads as if it took a value), ``<str>`` and ``<path>`` beside arguments,
and ``{name}`` for a required argument in the usage line. It also renders the help of a parameter
as Rich markup, so the ``[default: …]`` a help text ends with (a default taken from the config or
computed, which typer cannot show) is read as a style tag and vanishes.

The root command is a :class:`HelpGroup`; when typer builds the command tree it makes every
command below it one of these classes too, and each parameter one of :class:`HelpArgument` or
:class:`HelpOption` when the command lists its parameters (for help, for the usage line, for
parsing). So every command, today's and tomorrow's, is shown the same way, with nothing to
declare per command:

- a flag shows no metavar; an option shows its type as click does (``TEXT``, ``INTEGER``, ``PATH``,
  the choices) and its default (typer's own, or the ``[default: …]`` its help text states);
- an argument shows as its name in capitals (``NAME``, ``FILE``), in the usage line too.

``tests/test_cli_help.py`` renders the help of every command and fails on what this corrects.
"""

from __future__ import annotations

import inspect
from typing import Any

from rich.markup import escape
from typer import _click
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

__all__ = ["HelpArgument", "HelpCommand", "HelpGroup", "HelpOption"]

# typer's type labels (what goes between its angle brackets) as click names them
_TYPE_NAMES = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "bool": "BOOLEAN", "datetime": "DATETIME"}


class HelpArgument(TyperArgument):
    """An argument shown as its name in capitals, with no type beside it."""

    @property
    def display_name_raw(self) -> str:
        return self.metavar if self.metavar is not None else (self.name or "").upper()

    def display_type_rich(self, ctx: _click.Context) -> str | None:
        return None  # NAME or FILE says it; the help says the form

    def _usage_display_name(self) -> str:
        name = self.display_name_raw + ("..." if self.nargs != 1 else "")
        return name if self.required else f"[{name}]"


class HelpOption(TyperOption):
    """An option shown with click's name of its type, and a flag with none."""

    def display_type_rich(self, ctx: _click.Context) -> str | None:
        if self.is_flag or self.count:
            return None
        if self.metavar is not None:
            return self.metavar
        label = self.display_type(ctx).strip("<>")
        shown = label if "|" in label else _TYPE_NAMES.get(label, label.upper())
        return shown + ("..." if self.nargs != 1 else "")


class HelpCommand(TyperCommand):
    """A command whose parameters show as :mod:`streampart.cli.help` says."""

    def get_params(self, ctx: _click.Context) -> list[_click.Parameter]:
        return _tidied(super().get_params(ctx), markup=self.rich_markup_mode == "rich")


class HelpGroup(TyperGroup):
    """A command group; as the root (``typer.Typer(cls=HelpGroup)``), it makes every command below
    it a :class:`HelpCommand` or :class:`HelpGroup`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _adopt(self)

    def get_params(self, ctx: _click.Context) -> list[_click.Parameter]:
        return _tidied(super().get_params(ctx), markup=self.rich_markup_mode == "rich")


def _adopt(command: _click.Command) -> None:
    # typer builds each command with its own class (no hook reaches the groups added with add_typer);
    # these subclasses add no state (and no mixin: it would change the layout), so changing the
    # class of the built object is enough
    if isinstance(command, TyperGroup):
        if not isinstance(command, HelpGroup):
            command.__class__ = HelpGroup
        for sub in command.commands.values():
            _adopt(sub)
    elif isinstance(command, TyperCommand) and not isinstance(command, HelpCommand):
        command.__class__ = HelpCommand
    else:
        return
    if command.rich_markup_mode == "rich":
        command.help = _prose(command.help)
        command.short_help = _prose(command.short_help)


def _prose(text: str | None) -> str | None:
    """A docstring as help: its paragraphs' lines joined (the terminal wraps them, not the source's
    line breaks), as text rather than Rich markup ("[clusters]" is a TOML section, not a style)."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else escape(" ".join(p.split())) for p in paragraphs)


def _tidied(params: list[_click.Parameter], *, markup: bool) -> list[_click.Parameter]:
    """``params``, each a :class:`HelpArgument` or :class:`HelpOption` (``--help`` itself is made
    on the first listing, so this cannot be done once ahead)."""
    for param in params:
        if isinstance(param, HelpArgument | HelpOption):
            continue  # done already
        if isinstance(param, TyperArgument):
            param.__class__ = HelpArgument
        elif isinstance(param, TyperOption):
            param.__class__ = HelpOption
        else:
            continue
        if markup and param.help:
            param.help = escape(param.help)  # a help is text, not Rich markup
    return params
