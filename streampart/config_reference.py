"""The configuration reference (docs/configuration.md), generated from the settings models.

Every section, key, type, default, description and environment variable comes from the frozen
pydantic models that load the settings (:class:`streampart.config.Settings` and the sections it
composes), so the reference cannot drift from the code: ``tests/test_docs.py`` fails when the
file differs from what this module prints. Regenerate it with::

    .venv/bin/python -m streampart.config_reference > docs/configuration.md
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, IPvAnyNetwork, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from metastore.durations import format_duration
from streampart.config import Settings

__all__ = ["ENV_PREFIX", "GENERATE_COMMAND", "reference"]

ENV_PREFIX = "STREAMPART_"
GENERATE_COMMAND = ".venv/bin/python -m streampart.config_reference > docs/configuration.md"

_INTRO = f"""\
# Configuration reference

<!-- Generated from the settings models by `{GENERATE_COMMAND}`.
     Do not edit by hand: tests/test_docs.py fails when this file differs from the models. -->

Every setting has a default; a process needs none of them set. Sources, highest first:

1. command-line options (`--warehouse`, `--metastore`, `--spark-master`, …);
2. environment variables: `{ENV_PREFIX}` + the key in capitals, sections joined with `__`
   (`chunk.ttl` → `{ENV_PREFIX}CHUNK__TTL`, `scheduler.housekeeping.retention` →
   `{ENV_PREFIX}SCHEDULER__HOUSEKEEPING__RETENTION`);
3. the TOML file named by `--config` or `{ENV_PREFIX}CONFIG` (`conf/streampart.toml` lists every
   key with its default);
4. the defaults below.

A bad value from any source is one error naming the key (`invalid configuration: chunk.ttl: …`).
So is an unknown key, in any section of the file or as a `{ENV_PREFIX}*` variable, with the nearest
valid one (`unknown key scheduler.workres in conf/streampart.toml (did you mean
scheduler.workers?)`, `unknown environment variable {ENV_PREFIX}CHUNK__TTLL (did you mean
{ENV_PREFIX}CHUNK__TTL?)`).
Every **duration** — here, in the environment and in table options (`--roll-every`) — takes the
same forms: `500ms`, `30s`, `15m`, `1.5h`, `1d`, `1h30m`, plain seconds (`3600`) or ISO-8601
(`PT1H`). A **mapping** is a TOML table (`conf = {{ "spark.executor.memory" = "4g" }}`), or in the
environment a JSON object (`{ENV_PREFIX}SPARK__CONF='{{"spark.executor.memory": "4g"}}'`). A
**secret** is never shown in messages, logs or `--json` output.
"""


_BOUNDS: tuple[tuple[type, str, str], ...] = (
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.Le, "le", "≤"),
)


def _constraints(info: FieldInfo) -> list[str]:
    """The bounds a field's value must keep (``≥ 1``, ``> 0s``), from its metadata."""
    out = []
    for item in info.metadata:
        for kind, attr, sign in _BOUNDS:
            if isinstance(item, kind):
                out.append(f"{sign} {_value(getattr(item, attr))}")
        if isinstance(item, annotated_types.MinLen):
            out.append(f"length ≥ {item.min_length}")
        if isinstance(item, annotated_types.MaxLen):
            out.append(f"length ≤ {item.max_length}")
    return out


def _type(annotation: Any) -> str:
    """A field's type in the reader's words: integer, duration, one of `a`, `b`, …"""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *extra = typing.get_args(annotation)
        bounds = [b for meta in extra if isinstance(meta, FieldInfo) for b in _constraints(meta)]
        return _type(base) + (f" ({', '.join(bounds)})" if bounds else "")
    if origin is Literal:
        return "one of " + ", ".join(f"`{_value(a)}`" for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        text = " or ".join(_type(a) for a in args)
        return text + (" (optional)" if len(args) < len(typing.get_args(annotation)) else "")
    if origin is dict:
        key, value = typing.get_args(annotation)
        return f"mapping of {_type(key)} to {_type(value)}"
    if origin in (list, tuple):
        return f"list of {_type(typing.get_args(annotation)[0])}"
    if annotation is IPvAnyNetwork:
        return "IP address or network"
    names = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "path"}
    if annotation in names:
        return names[annotation]
    if annotation is timedelta:
        return "duration"
    if annotation is SecretStr:
        return "secret string"
    return getattr(annotation, "__name__", str(annotation))


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, Path):
        return value.as_posix() if value.is_absolute() else f"./{value.as_posix()}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return str(value)


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        return "`{}`" if value == {} else f"`{_value(value)}`"
    if info.default is PydanticUndefined:
        return "required"
    if info.default is None:
        return "unset"
    if isinstance(info.default, int) and not isinstance(info.default, bool) and info.default >= 10_000:
        return f"`{info.default}` ({info.default:,})"
    return f"`{_value(info.default)}`"


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: no line breaks, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _section_model(info: FieldInfo) -> type[BaseModel] | None:
    annotation = info.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


Section = tuple[tuple[str, ...], type[BaseModel], str | None]


def _sections(model: type[BaseModel], path: tuple[str, ...], described: str | None) -> Iterator[Section]:
    """``model`` and every section below it, depth first, in the models' field order."""
    yield path, model, described
    for name, info in model.model_fields.items():
        section = _section_model(info)
        if section is not None:
            yield from _sections(section, (*path, name), info.description)


def _section(path: tuple[str, ...], model: type[BaseModel], described: str | None) -> str:
    title = f"`[{'.'.join(path)}]`" if path else "Top level"
    lines = [f"## {title}", ""]
    about = model.__doc__ or described  # the model's own docstring says more than the field's line
    if path and about:
        lines += [" ".join(about.replace("``", "`").split()), ""]
    lines += ["| key | type | default | environment | description |", "|---|---|---|---|---|"]
    env = ENV_PREFIX + "".join(f"{p.upper()}__" for p in path)
    for name, info in model.model_fields.items():
        if _section_model(info) is not None:
            continue  # a section of its own, below
        kind = _type(info.annotation)
        bounds = _constraints(info)
        if bounds:
            kind += f" ({', '.join(bounds)})"
        key = ".".join((*path, name))
        row = [f"`{key}`", kind, _default(info), f"`{env}{name.upper()}`", info.description or ""]
        lines.append("| " + " | ".join(_cell(cell) for cell in row) + " |")
    return "\n".join(lines) + "\n"


def reference() -> str:
    """The whole reference, as docs/configuration.md holds it."""
    return "\n".join([_INTRO, *(_section(*section) for section in _sections(Settings, (), None))])


if __name__ == "__main__":
    sys.stdout.write(reference())
