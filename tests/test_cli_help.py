"""``--help`` of every command, ``--version`` and shell completion (in process: no warehouse, no Spark).

The help of each command in the tree is rendered as a user sees it; what typer 0.29 shows by
default and :mod:`streampart.cli.help` corrects must not come back, for today's commands or a new one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from streampart.cli import app

# wide enough that no help line wraps (a wrapped "[default: …]" would still count, but is harder to read)
RUNNER = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1", "TERM": "dumb"})


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not sub.hidden:
            yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def test_the_tree_is_walked() -> None:
    paths = {" ".join(p) for p, _ in COMMANDS}
    assert {"", "table", "table list", "table create", "write", "serve", "token create"} <= paths


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) or "(root)" for p, _ in COMMANDS])
def test_help_shows_names_types_and_defaults(path: tuple[str, ...], command: typer.core.TyperCommand) -> None:
    result = RUNNER.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    shown = result.output
    usage = next(line for line in shown.splitlines() if "Usage:" in line)
    # typer's own labels: a flag takes no value, and an argument is shown by its name alone
    for label in ("<bool>", "<str>", "<int>", "<float>", "<path>", "<file>", "<dir>"):
        assert label not in shown, f"streampart {' '.join(path)} --help shows {label}:\n{shown}"
    assert "{" not in usage, usage
    for param in command.params:
        if getattr(param, "hidden", False):  # typer's options and arguments have it, click's Parameter not
            continue
        if param.param_type_name == "argument":
            name = (param.name or "").upper()
            assert re.search(rf"\b\[?{name}\b", usage), f"{name} is not in the usage line: {usage}"
    # a default the help text states ("[default: from config, 8080]") is shown, not read as Rich markup
    stated = sum("[default:" in (getattr(p, "help", None) or "") for p in command.params)
    assert shown.count("[default:") >= stated, shown


def test_flags_options_and_arguments_read_as_they_are_used() -> None:
    shown = " ".join(RUNNER.invoke(app, ["serve", "--help"]).output.split())
    assert "--port INTEGER Port (0: a free one, logged at start) [default: from config, 8080]" in shown
    assert "--host TEXT Address to listen on [default: from config, 127.0.0.1]" in shown
    assert "--insecure-no-auth Accept requests" in shown  # a flag: nothing between its name and help
    write = RUNNER.invoke(app, ["write", "--help"], prog_name="streampart").output
    assert "Usage: streampart write [OPTIONS] NAME FILE" in write
    assert "[default: from the file name]" in write
    assert "Usage: streampart check [OPTIONS] [NAME]" in (
        RUNNER.invoke(app, ["check", "--help"], prog_name="streampart").output
    )


def test_command_help_is_prose_not_markup_nor_the_sources_line_breaks() -> None:
    kafka = RUNNER.invoke(app, ["ingest", "kafka", "--help"]).output
    assert "its [clusters] spark_masters entry" in " ".join(kafka.split())
    check = RUNNER.invoke(app, ["check", "--help"]).output
    assert "a log behind the metastore, missing, truncated or unreadable data files" in check  # one line


def test_version() -> None:
    from importlib.metadata import version

    result = RUNNER.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"streampart {version('streampart')}"


def test_completion() -> None:
    script = RUNNER.invoke(app, ["--show-completion", "bash"], prog_name="streampart")
    assert script.exit_code == 0, script.output
    assert "_STREAMPART_COMPLETE=complete_bash" in script.output
    completed = RUNNER.invoke(
        app,
        [],
        prog_name="streampart",
        env={"_STREAMPART_COMPLETE": "complete_bash", "COMP_WORDS": "streampart table l", "COMP_CWORD": "2"},
    )
    assert completed.output.split() == ["list"]
