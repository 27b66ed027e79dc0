"""Options and arguments shared by several commands."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, TypeVar

import typer

from metastore.errors import UserInputError
from streampart.cli.context import cli_context
from streampart.cli.output import JsonOutput

E = TypeVar("E", bound=Enum)

__all__ = ["JsonFlag", "choice", "json_flag"]


def _choose_output(ctx: typer.Context, param: typer.CallbackParam, as_json: bool) -> None:
    if as_json:
        cli_context(ctx).output = JsonOutput()


def json_flag(help: str = "Print JSON") -> Any:
    """``--json``: the call's output is JSON. The command does not see the flag, only its output.

    Its callback sets the :class:`~streampart.cli.output.Output` in the context before the command
    runs; a command declares it as ``_json: JsonFlag = False`` (the value is never passed).
    """
    return typer.Option("--json", help=help, callback=_choose_output, expose_value=False)


JsonFlag = Annotated[bool, json_flag()]


def choice(enum: type[E], value: str, option: str) -> E:
    """``value`` as a member of ``enum``, or a user error naming the option and the choices."""
    try:
        return enum(value)
    except ValueError:
        raise UserInputError(
            f"{option} must be one of {', '.join(str(e.value) for e in enum)}; got {value!r}"
        ) from None
