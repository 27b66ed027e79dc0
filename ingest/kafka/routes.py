"""Routes: which table each Kafka record of a many-table ingest job goes to.

A job holds an ordered list of :class:`Route` s. Each route matches topics — one topic by name, or
every topic a regular expression matches in full — and names its table by a template: a plain
``NS.TABLE``, or one with ``{topic}`` (the record's topic) and ``{field}`` (the value of the record
field ``table_field``, a JSON record's top-level field) in it. The first route whose topic matches
wins, routes by topic name before routes by pattern::

    --route orders=shop.orders                         # Route(topic="orders", table="shop.orders")
    --topic-pattern 'shop\\..*' --table '{topic}'      # topic shop.refunds → table shop.refunds
    --topic events --table-field kind --table 'ev.{field}'  # {"kind": "click"} → table ev.click

and a routes file (TOML, ``--routes FILE``), read again when it changes (new routes are picked up
without a restart)::

    [[route]]
    topic = "orders"
    table = "shop.orders"

    [[route]]
    topic-pattern = 'shop\\..*'
    table = "{topic}"

    [[route]]
    topic = "events"
    table-field = "kind"
    table = "ev.{field}"

A record no route takes, whose template gives no valid table name, or whose field is missing, is
*unrouted*: it goes to the job's dead-letter table with the reason (:meth:`Routes.resolve`).
Nothing here imports more than the standard library: Spark's Python workers route every record.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_PLACEHOLDERS = {"topic", "field"}


class RouteError(ValueError):
    """A route that cannot work; the message names it and what is wrong."""


@dataclass(frozen=True)
class Route:
    """Topics (``topic``, or the full matches of ``pattern``) → the table ``table`` names."""

    table: str
    topic: str | None = None
    pattern: str | None = None
    table_field: str | None = None

    def __post_init__(self) -> None:
        where = self.describe()
        if (self.topic is None) == (self.pattern is None):
            raise RouteError(f"route {where}: give exactly one of topic and topic-pattern")
        if self.topic is not None and not self.topic.strip():
            raise RouteError("a route names an empty topic")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise RouteError(f"route {where}: topic-pattern is not a regular expression: {exc}") from None
        try:
            names = {f for _, f, _, _ in string.Formatter().parse(self.table) if f is not None}
        except ValueError as exc:
            raise RouteError(f"route {where}: table {self.table!r}: {exc}") from None
        unknown = names - _PLACEHOLDERS
        if unknown:
            raise RouteError(
                f"route {where}: table {self.table!r} uses {{{sorted(unknown)[0]}}}; "
                "a table template knows {topic} and {field}"
            )
        if "field" in names and not self.table_field:
            raise RouteError(f"route {where}: table {self.table!r} uses {{field}} without a table-field")
        if not names:
            _check_name(self.table, f"route {where}")

    def describe(self) -> str:
        """How messages name the route: ``orders→shop.orders``, ``/shop\\..*/→{topic}``."""
        left = self.topic if self.topic is not None else f"/{self.pattern}/"
        via = f"[{self.table_field}]" if self.table_field else ""
        return f"{left}{via}→{self.table}"

    def matches(self, topic: str) -> bool:
        if self.topic is not None:
            return topic == self.topic
        return re.fullmatch(self.pattern or "", topic) is not None

    def namespaces(self, topic: str | None, dead_letter: str | None) -> frozenset[str] | None:
        """The namespaces the route's records of ``topic`` (None: of any topic it matches) can reach:
        its table's, and ``dead_letter``'s (the job's dead-letter table, NS.TABLE) when some of them may
        be unrouted. None when that cannot be decided: the namespace depends on what a record or an
        unnamed topic holds (``{field}`` or ``{topic}`` before the first dot), or an unrouted record
        has no dead-letter table named to go to.

        The table is the template formatted as :meth:`Routes.resolve` formats it; the part of it known
        before the first undecided placeholder decides the namespace if it holds a dot (a table name
        is NAMESPACE.TABLE, split at its only dot)."""
        formatter = string.Formatter()
        known, complete, unrouted = "", True, self.table_field is not None  # a record without the field
        try:
            for literal, name, spec, conversion in formatter.parse(self.table):
                known += literal
                if name is None:
                    continue
                if name != "topic" or topic is None or "{" in (spec or ""):
                    complete = False
                    break
                known += formatter.format_field(formatter.convert_field(topic, conversion), spec or "")
        except (ValueError, TypeError):  # a template str.format refuses too: no record is routed by it
            return None
        reached: set[str] = set()
        if complete:
            if table_name_problem(known) is None:
                reached.add(known.split(".", 1)[0])
            else:
                unrouted = True
        else:
            if "." not in known:
                return None
            namespace = known.split(".", 1)[0]
            if _IDENT.fullmatch(namespace):
                reached.add(namespace)
            unrouted = True  # what follows may not make a table name
        if unrouted:
            if dead_letter is None or table_name_problem(dead_letter) is not None:
                return None
            reached.add(dead_letter.split(".", 1)[0])
        return frozenset(reached)

    @property
    def fixed_table(self) -> str | None:
        """The table every record of the route goes to, if the template has no placeholder."""
        return self.table if "{" not in self.table else None


def _check_name(name: str, what: str) -> None:
    parts = name.split(".")
    if len(parts) != 2 or not all(_IDENT.fullmatch(p) for p in parts):
        raise RouteError(
            f"{what}: {name!r} is not a table name NAMESPACE.TABLE (letters, digits and '_', "
            "starting with a letter or '_')"
        )


def table_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a table name, or None."""
    try:
        _check_name(name, "table")
    except RouteError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Routes:
    """The job's routes, in order of precedence (by topic name first, then by pattern)."""

    routes: tuple[Route, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.routes:
            raise RouteError(
                "no route: give a table, --route TOPIC=NS.TABLE, --routes FILE or --topic-pattern"
            )
        seen: dict[str, Route] = {}
        for r in self.routes:
            if r.topic is not None:
                if r.topic in seen and seen[r.topic] != r:
                    raise RouteError(
                        f"topic {r.topic} has two routes: {seen[r.topic].describe()} and {r.describe()}"
                    )
                seen[r.topic] = r
        ordered = sorted(dict.fromkeys(self.routes), key=lambda r: r.topic is None)
        object.__setattr__(self, "routes", tuple(ordered))

    def route_of(self, topic: str) -> Route | None:
        """The route that takes ``topic``'s records, or None."""
        for r in self.routes:
            if r.matches(topic):
                return r
        return None

    def namespaces_of_topic(self, topic: str, dead_letter: str | None) -> frozenset[str] | None:
        """The namespaces ``topic``'s records can reach under these routes (:meth:`Route.namespaces`),
        whether or not the job has seen the topic yet; None when that is open-ended, or when no route
        takes the topic (a route added later could send it anywhere)."""
        r = self.route_of(topic)
        return None if r is None else r.namespaces(topic, dead_letter)

    def namespaces(self, dead_letter: str | None) -> frozenset[str] | None:
        """The namespaces any record the routes take can reach (every topic a pattern may match, seen
        or not); None when that is open-ended."""
        reached: set[str] = set()
        for r in self.routes:
            some = r.namespaces(r.topic, dead_letter)
            if some is None:
                return None
            reached |= some
        return frozenset(reached)

    def table_of_topic(self, topic: str) -> str | None:
        """The table all of ``topic``'s records go to, when its route names one without reading them."""
        r = self.route_of(topic)
        if r is None or r.table_field:
            return None
        return self.resolve(topic)[0]  # None if the name it gives is not a table name

    def resolve(self, topic: str, field_value: Any = None) -> tuple[str | None, str | None]:
        """``(table, None)`` for a record of ``topic`` (``field_value``: its route's table field's
        value), or ``(None, reason)`` if it is unrouted."""
        r = self.route_of(topic)
        if r is None:
            return None, f"no route takes topic {topic}"
        values = {"topic": topic}
        if r.table_field:
            if field_value is None:
                return None, f"route {r.describe()}: the record has no field {r.table_field}"
            if not isinstance(field_value, str):
                return None, f"route {r.describe()}: field {r.table_field} is not a string"
            values["field"] = field_value
        name = r.table.format(**values)
        problem = table_name_problem(name)
        if problem is not None:
            return None, f"route {r.describe()}: {problem}"
        return name, None

    def fields(self) -> set[str]:
        """The record fields some route reads to find the table."""
        return {r.table_field for r in self.routes if r.table_field}

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(r.topic for r in self.routes if r.topic is not None)

    @property
    def patterns(self) -> tuple[str, ...]:
        return tuple(r.pattern for r in self.routes if r.pattern is not None)

    def subscription(self) -> dict[str, Any]:
        """What the source subscribes to: ``{"topics": [...], "pattern": regex or None}``."""
        pattern = "|".join(f"(?:{p})" for p in self.patterns) or None
        return {"topics": sorted(set(self.topics)), "pattern": pattern}

    def to_json(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in asdict(r).items() if v is not None} for r in self.routes]

    @classmethod
    def from_json(cls, data: Iterable[Mapping[str, Any]]) -> Routes:
        return cls(tuple(Route(**dict(d)) for d in data))

    def __str__(self) -> str:
        return ", ".join(r.describe() for r in self.routes)


def parse_route_flag(text: str) -> Route:
    """``--route TOPIC=NS.TABLE``."""
    topic, sep, table = text.partition("=")
    if not sep or not topic.strip() or not table.strip():
        raise RouteError(f"--route takes TOPIC=NS.TABLE (e.g. orders=shop.orders); got {text!r}")
    return Route(table=table.strip(), topic=topic.strip())


_FILE_KEYS = {"topic": "topic", "topic-pattern": "pattern", "table": "table", "table-field": "table_field"}


def read_routes_file(path: str | Path) -> tuple[Route, ...]:
    """The routes of a TOML routes file (see the module docstring)."""
    import tomllib

    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise RouteError(f"routes file {path}: cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RouteError(f"routes file {path}: not valid TOML: {exc}") from None
    extra = sorted(set(data) - {"route"})
    if extra:
        raise RouteError(f"routes file {path}: unknown key {extra[0]!r}; routes are [[route]] tables")
    entries = data.get("route", [])
    if not isinstance(entries, list):
        raise RouteError(f"routes file {path}: 'route' must be an array of tables ([[route]])")
    routes = []
    for i, entry in enumerate(entries, 1):
        unknown = sorted(set(entry) - set(_FILE_KEYS))
        if unknown:
            raise RouteError(
                f"routes file {path}, route {i}: unknown key {unknown[0]!r} "
                f"(a route has {', '.join(_FILE_KEYS)})"
            )
        if "table" not in entry:
            raise RouteError(f"routes file {path}, route {i}: no table")
        try:
            routes.append(Route(**{_FILE_KEYS[k]: str(v) for k, v in entry.items()}))
        except RouteError as exc:
            raise RouteError(f"routes file {path}, route {i}: {exc}") from None
    return tuple(routes)


def field_values(values: Sequence[bytes | None], name: str) -> list[Any]:
    """The top-level field ``name`` of each JSON record value (None where it is missing or the value
    is not a JSON object). Arrow reads the field of a whole batch at once; a batch it refuses goes
    record by record."""
    import pyarrow as pa
    import pyarrow.json as pj

    if not values:
        return []
    if all(v is not None and b"\n" not in v and b"\r" not in v and v.lstrip()[:1] == b"{" for v in values):
        try:
            parsed = pj.read_json(
                pa.BufferReader(b"\n".join(values)),  # type: ignore[arg-type]
                parse_options=pj.ParseOptions(
                    explicit_schema=pa.schema([(name, pa.string())]), unexpected_field_behavior="ignore"
                ),
            )
            if parsed.num_rows == len(values):
                return parsed.column(name).to_pylist()
        except Exception:  # any record Arrow refuses (or a non-string field): record by record
            pass
    out: list[Any] = []
    for v in values:
        try:
            record = json.loads(v) if v is not None else None
        except ValueError:
            record = None
        out.append(record.get(name) if isinstance(record, dict) else None)
    return out
