"""The status page's HTML, rendered on the server from :func:`scheduler.status.scheduler_status`.

Plain HTML and one stylesheet: no build step, nothing from a CDN. The page's script refreshes by
fetching :func:`body` again and swapping it in, so this module is the page's only renderer.
Values carry ``data-table`` / ``data-field`` attributes: what the browser tests (and any
scraper) read, independent of the wording around them.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from typing import Any

from metastore.models import parse_instant


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _td(label: str, text: str, field: str | None = None, cls: str = "") -> str:
    """A grid cell: ``text`` is HTML already; ``label`` heads it on a narrow screen."""
    attrs = (
        f' data-label="{label}"'
        + (f' data-field="{field}"' if field else "")
        + (f' class="{cls}"' if cls else "")
    )
    return f"<td{attrs}>{text}</td>"


def age(seconds: float | None) -> str:
    """``42s``, ``3m 12s``, ``5h 4m``, ``2d 3h``: an age read at a glance."""
    if seconds is None:
        return "never"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def took(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds:.2f}s" if seconds < 60 else age(seconds)


def clock_time(value: str | None, now: datetime) -> str:
    """HH:MM:SS (UTC), with the date when it is not today's."""
    if not value:
        return "—"
    t = parse_instant(value)
    return t.strftime("%H:%M:%S" if t.date() == now.date() else "%Y-%m-%d %H:%M")


def _when(value: str, now: datetime) -> str:
    """A partition's start in its row: HH:MM:SS today, ``21 Nov 10:00`` on another day (it wraps
    between date and time in the row's narrow first column)."""
    t = parse_instant(value)
    return t.strftime("%H:%M:%S" if t.date() == now.date() else "%d %b %H:%M")


def _health(t: dict[str, Any]) -> tuple[str, str]:
    """The table's one-word state and its CSS class: failing, late, rolling or ok."""
    if t["failures"]:
        return f"failing ×{t['failures']}", "bad"
    if t["overdue_seconds"] > 0:
        return f"late {age(t['overdue_seconds'])}", "warn"
    if t["rolling"]:
        return "rolling", "busy"
    return "ok", "ok"


def login(error: str | None = None) -> str:
    """The token form (and nothing else: no data without a token)."""
    note = f'<p class="error" role="alert">{_e(error)}</p>' if error else ""
    return _document(
        f"""<main class="login"><h1>streampart status</h1>
<form method="post" action="/ui/login">
<label for="token">API token with read scope</label>
<input id="token" name="token" type="password" autocomplete="off" required placeholder="spt_…">
<button type="submit">Open</button>
{note}
<p class="hint">Made by <code>streampart token create NAME --scope read:NAMESPACE</code>; kept in a
cookie only this page's server reads.</p>
</form></main>""",
        refresh=None,
    )


def page(info: dict[str, Any], note: str = "", can_log_out: bool = True) -> str:
    """The whole page: its frame, and :func:`body` inside (what the script refreshes)."""
    out = '<form method="post" action="/ui/logout" class="logout"><button>forget token</button></form>'
    viewer = f'as <b data-field="viewer">{_e(info.get("viewer"))}</b>' + (f" · {_e(note)}" if note else "")
    updated = clock_time(info["now"], parse_instant(info["now"]))
    return _document(
        f"""<header><h1>streampart status</h1>
<span class="viewer">{viewer}</span>
<span class="updated" id="updated" aria-live="polite">updated {_e(updated)} UTC</span>
{out if can_log_out else ""}</header>
<main id="status">{body(info)}</main>""",
        refresh=info.get("refresh_seconds"),
    )


def body(info: dict[str, Any]) -> str:
    """The status itself: summary, daemons, tables, timelines, recent rolls."""
    now = parse_instant(info["now"])
    tables = info["tables"]
    groups = _groups(tables)
    failing = sum(1 for t in tables if t["failures"])
    late = sum(1 for t in tables if t["overdue_seconds"] > 0)
    parts = [
        f'<div data-now="{_e(info["now"])}" hidden></div>',
        '<section class="summary">',
        f'<span class="chip" data-field="tables">{len(groups)} table{"s" if len(groups) != 1 else ""}</span>',
        f'<span class="chip {"bad" if failing else "ok"}" data-field="failing">{failing} failing</span>',
        f'<span class="chip {"warn" if late else "ok"}" data-field="late">{late} late</span>',
        "</section>",
        _daemons(info, now),
    ]
    if not tables:
        parts.append(
            '<p class="empty" data-field="no-tables">No tables to show: none exist, or this token may read '
            "no namespace that has one (the page shows only namespaces with <code>read</code> scope).</p>"
        )
    else:
        parts.append(_tables(groups, info["metastores"]))
        parts.append('<section class="timelines"><h2>Rolls</h2>')
        parts.extend(_timeline(main, companions, now) for main, companions in groups)
        parts.append(_legend())
        parts.append("</section>")
    if info.get("ingest_jobs"):
        parts.append(_ingest_jobs(info["ingest_jobs"]))
    if info.get("links"):
        parts.append(_links(info["links"]))
    catalogs = _catalogs(tables, info.get("shares") or [], now)
    if catalogs:
        parts.append(catalogs)
    parts.append(_recent(info["recent_rolls"], now))
    return "\n".join(parts)


def _groups(tables: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each main table with its dead-letter and late-data tables (a companion whose main table is
    not shown, which should not happen, stands on its own)."""
    shown = {t["table"] for t in tables}
    companions: dict[str, list[dict[str, Any]]] = {}
    for t in tables:
        if t.get("companion_of") in shown:
            companions.setdefault(t["companion_of"], []).append(t)
    return [
        (t, sorted(companions.get(t["table"], []), key=lambda c: c["kind"]))
        for t in tables
        if t.get("companion_of") not in shown
    ]


# What a companion table holds, in the page's words (its kind in status.json).
_COMPANION_KIND = {"dead-letter": "dead letters", "late": "late rows"}


def _daemons(info: dict[str, Any], now: datetime) -> str:
    rows = []
    federated = len(info["metastores"]) > 1
    for m in info["metastores"]:
        where = f"<b>{_e(m['metastore'])}</b> " if federated else ""
        if m["error"]:
            rows.append(f'<div class="daemon bad">{where}did not answer: {_e(m["error"])}</div>')
            continue
        leader = m["leader"]
        if leader is None:
            head = '<span class="bad" data-field="leader">no leader</span> (no roll daemon has run here)'
        elif not leader["live"]:
            head = (
                f'<span class="bad" data-field="leader">no leader</span> (the last lease, epoch '
                f"{_e(leader['epoch'])}, lapsed at {_e(clock_time(leader['expires_at'], now))})"
            )
        else:
            beat = parse_instant(leader["renewed_at"]) if leader["renewed_at"] else None
            beat_age = age(None if beat is None else (now - beat).total_seconds())
            head = (
                f'leader <b data-field="leader">{_e(leader["holder"])}</b> · epoch '
                f'<b data-field="epoch">{_e(leader["epoch"])}</b> · heartbeat '
                f'<span data-field="heartbeat">{beat_age} ago</span>'
            )
        standbys = [d for d in m["daemons"] if d["role"] == "standby"]
        standby = ", ".join(f"{_e(d['holder'])} ({age(d['heartbeat_age_seconds'])} ago)" for d in standbys)
        hk = m["housekeeping"]
        housekeeping = (
            "never"
            if hk is None
            else f'<span class="{"bad" if hk["outcome"] == "failed" else ""}">{_e(hk["outcome"])}</span> '
            f"at {_e(clock_time(hk['at'], now))}"
        )
        rows.append(
            f'<div class="daemon" data-metastore="{_e(m["metastore"])}">{where}{head}<br>'
            f'<span class="muted">standbys:</span> <span data-field="standbys">{standby or "none"}</span> · '
            f'<span class="muted">housekeeping:</span> <span data-field="housekeeping">{housekeeping}</span>'
            "</div>"
        )
    return '<section class="daemons"><h2>Daemons</h2>' + "".join(rows) + "</section>"


def _tables(
    groups: list[tuple[dict[str, Any], list[dict[str, Any]]]], metastores: list[dict[str, Any]]
) -> str:
    federated = len(metastores) > 1
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "table",
            *(["metastore"] if federated else []),
            "mode",
            "roll every",
            "freshness",
            "commits/min",
            "dead letters 1h",
            "state",
        )
    )
    rows = []
    for main, companions in groups:
        rows.append(_table_row(main, federated))
        rows.extend(_table_row(c, federated, companion=True) for c in companions)
    return (
        '<section class="tables"><h2>Tables</h2><div class="scroll"><table class="grid">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div></section>"
    )


def _table_row(t: dict[str, Any], federated: bool, companion: bool = False) -> str:
    """One table's row; a companion's comes right under its main table's, indented, and without a
    dead-letter count (it has no dead letters of its own). Its mode and interval are its own: a
    dead-letter table rolls by arrival, at least hourly."""
    word, cls = _health(t)
    name = _e(t["table"])
    dead = t["dead_letters_last_hour"]
    row_class = ' class="companion"' if companion else ""
    if companion:
        kind = _e(_COMPANION_KIND.get(t["kind"], t["kind"]))
        head = (
            f'<th scope="row"><span class="arrow" aria-hidden="true">↳</span> <a href="#t-{name}">{name}</a>'
            f' <span class="kind" data-field="companion_of" data-main="{_e(t["companion_of"])}">'
            f"{kind}</span></th>"
        )
    else:
        head = f'<th scope="row"><a href="#t-{name}">{name}</a></th>'
    return (
        f'<tr data-table="{name}"{row_class}>{head}'
        + (_td("metastore", _e(t["metastore"])) if federated else "")
        + _td("mode", _e(t["mode"]), "mode")
        + _td("roll every", _e(t["roll_every"]), "roll_every")
        + _td("freshness", age(t["freshness_seconds"]), "freshness")
        + _td("commits/min", f"{t['commits_per_minute']:g}", "commits")
        + (
            "<td></td>"
            if companion
            else _td("dead letters 1h", str(dead), "dead_letters", "warn" if dead else "")
        )
        + _td("state", f'<span class="badge {cls}" data-field="health">{_e(word)}</span>')
        + "</tr>"
    )


def _timeline(t: dict[str, Any], companions: list[dict[str, Any]], now: datetime) -> str:
    """One table's card: its newest partitions as bars along time, its replicas and links, and
    its companions' timelines folded under it (unfolded while one is failing or late)."""
    word, cls = _health(t)
    extra = [_e(t["mode"]), f"every {_e(t['roll_every'])}"]
    for r in t.get("replication", []):
        missing = r["missing_partitions"]
        behind = (
            f'<span class="warn">{missing} partition{"s" if missing != 1 else ""} missing, lag '
            f"{age(r['lag_seconds'])}</span>"
            if missing
            else "every standard partition copied"
        )
        extra.append(
            f'<span data-field="replica" data-cluster="{_e(r["cluster"])}">replica on '
            f"<b>{_e(r['cluster'])}</b>: {behind}</span>"
        )
    if t["links"]:
        names = ", ".join(f"<b>{_e(link)}</b>" for link in t["links"])
        extra.append(f'<span data-field="linked_as">linked as {names}</span>')
    extra += _schema(t, now) + _retention(t, now)
    extra.append(f"next roll {_e(clock_time(t['next_roll'], now))}")
    folded = "".join(_companion(c, now) for c in companions)
    return (
        f'<article class="timeline" id="t-{_e(t["table"])}" data-table="{_e(t["table"])}">'
        f'<h3>{_e(t["table"])} <span class="badge {cls}">{_e(word)}</span></h3>'
        f'<p class="muted">{" · ".join(extra)}</p>'
        f"{_error(t, now)}{_rows(t, now)}{folded}</article>"
    )


def _schema(t: dict[str, Any], now: datetime) -> list[str]:
    """What a table's card says of its schema: that it evolves from data, and its newest change."""
    out = []
    if t.get("schema_evolution", "none") != "none":
        out.append(f'<span data-field="schema_evolution">schema evolves: {_e(t["schema_evolution"])}</span>')
    change = t.get("last_schema_change")
    if change:
        out.append(
            f'<span data-field="schema_change" data-version="{change["version"]}">schema changed at version '
            f"{change['version']}, {_e(clock_time(change['at'], now))}: {_e(change['change'])}</span>"
        )
    return out


def _retention(t: dict[str, Any], now: datetime) -> list[str]:
    """What a table's card says of its retention: how long, the next expiry, what expired."""
    r = t.get("retention") or {}
    if not r.get("retain"):
        return []
    text = f"keeps {_e(r['retain'])}"
    if r.get("next_expiry"):
        text += f", next expiry {_e(clock_time(r['next_expiry'], now))}"
    if r["expired"]["partitions"]:
        text += f", {r['expired']['partitions']} partition(s) expired"
    return [f'<span data-field="retention">{text}</span>']


def _companion(t: dict[str, Any], now: datetime) -> str:
    """A dead-letter or late-data table's timeline, inside its main table's card."""
    word, cls = _health(t)
    kind = _e(_COMPANION_KIND.get(t["kind"], t["kind"]))
    name = _e(t["table"])
    unfolded = " open" if cls in ("bad", "warn") else ""
    return (
        f'<details class="companion" id="t-{name}" data-table="{name}"{unfolded}>'
        f'<summary><span class="kind">{kind}</span> <b>{name}</b> <span class="badge {cls}">{_e(word)}</span>'
        f' <span class="muted">next roll {_e(clock_time(t["next_roll"], now))}</span></summary>'
        f"{_error(t, now)}{_rows(t, now)}</details>"
    )


def _error(t: dict[str, Any], now: datetime) -> str:
    if not t["last_error"]:
        return ""
    retry = f" · retry at {_e(clock_time(t['retry_at'], now))}" if t["retry_at"] else ""
    return (
        f'<p class="error" data-field="last_error">last error ({t["failures"]} failed '
        f"attempt{'s' if t['failures'] != 1 else ''}{retry}): {_e(t['last_error'][:400])}</p>"
    )


def _rows(t: dict[str, Any], now: datetime) -> str:
    """The partitions' rows: one each, newest on top (forced rolls overlap)."""
    parts = t.get("partitions", [])
    rows = []
    if parts:
        start = min(parse_instant(p["partition"]) for p in parts)
        end = max(parse_instant(p["end"]) for p in parts)
        # the axis runs on to now unless now is far past the partitions (a backfill of days ago
        # in an event-time table): then its bars would be slivers at the left, so it stops at them
        show_now = now <= end + (end - start)
        end = max(end, now) if show_now else end
        span = max((end - start).total_seconds(), 1.0)

        def at(value: datetime) -> float:
            return round(100 * (value - start).total_seconds() / span, 3)

        now_mark = f'<span class="now" style="left:{at(now)}%"></span>' if show_now else ""
        for p in reversed(parts):  # newest on top
            left = at(parse_instant(p["partition"]))
            width = max(at(parse_instant(p["end"])) - left, 0.8)
            state = p["state"]
            late = p["late"]
            info = _state_text(p, t, now)
            rows.append(
                f'<div class="row" data-partition="{_e(p["partition"])}" data-state="{_e(state)}"'
                f' data-late="{"true" if late else "false"}">'
                f'<span class="when">{_e(_when(p["partition"], now))}</span>'
                f'<span class="track"><span class="bar {_e(state)}{" late" if late else ""}"'
                f' style="left:{left}%;width:{width}%" title="{_e(info)}"></span>{now_mark}</span>'
                f'<span class="info">{_e(info)}</span></div>'
            )
    return f'<div class="rows">{"".join(rows) or "<p class=muted>no partitions</p>"}</div>'


def _state_text(p: dict[str, Any], t: dict[str, Any], now: datetime) -> str:
    """What one partition's row says: its state, when it rolled and how long that took, lateness."""
    state = p["state"]
    if state == "standard":
        text = f"rolled {clock_time(p['rolled_at'], now)} in {took(p['roll_seconds'])}"
        if p["rows"] is not None:
            text += f" · {p['rows']} rows"
        if p["replicated_on"]:
            text += " · copied to " + ", ".join(p["replicated_on"])
        if missing := [c for c in t["replicas"] if c not in p["replicated_on"]]:
            text += " · not yet on " + ", ".join(missing)
        return text
    due = parse_instant(p["due_at"])
    if state == "rolling":
        text = f"rolling for {took(p['roll_seconds'])}"
    else:
        text = f"streaming · due {clock_time(p['due_at'], now)}"
    if p["late"]:
        text += f" · LATE by {age((now - due).total_seconds())}"
        if t["failed_partition"] == p["partition"] and t["failures"]:
            text += " · roll failing"
    return text


def _legend() -> str:
    keys = (("streaming", "streaming"), ("rolling", "rolling"), ("standard", "standard"))
    bars = "".join(f'<span><span class="bar {cls}"></span>{text}</span>' for cls, text in keys)
    return (
        f'<p class="legend">{bars}<span><span class="bar streaming late"></span>late (due, not rolled)</span>'
        '<span><span class="nowkey"></span>now</span></p>'
    )


def _links(links: list[dict[str, Any]]) -> str:
    items = "".join(
        f'<li data-link="{_e(link["link"])}"><b>{_e(link["link"])}</b> → '
        f'<span data-field="source">{_e(link["source"])}</span> '
        f'(<span data-field="mode">{_e(link["mode"])}</span>)</li>'
        for link in links
    )
    return f'<section class="links"><h2>Links</h2><ul>{items}</ul></section>'


def _catalogs(tables: list[dict[str, Any]], shares: list[dict[str, Any]], now: datetime) -> str:
    """Other engines' reads: the tables loaded through the Iceberg catalog (``/iceberg``), at which
    version and when, and Delta Sharing's shares (``/delta-sharing``) with what each holds."""
    loaded = [t for t in tables if t.get("iceberg")]
    if not loaded and not shares:
        return ""
    parts = ['<section class="catalogs"><h2>Catalogs</h2>']
    if loaded:
        items = "".join(
            f'<li data-table="{_e(t["table"])}"><b>{_e(t["table"])}</b>: Iceberg snapshot '
            f'<span data-field="iceberg-version">{_e(t["iceberg"]["version"])}</span>, loaded '
            f"{_e(clock_time(t['iceberg']['loaded_at'], now))}</li>"
            for t in loaded
        )
        parts.append(f"<p>Loaded through the Iceberg catalog (<code>/iceberg</code>):</p><ul>{items}</ul>")
    if shares:
        items = "".join(
            f'<li data-share="{_e(s["share"])}"><b>{_e(s["share"])}</b>: '
            f'<span data-field="shared">{_e(", ".join(s["tables"]))}</span></li>'
            for s in shares
        )
        parts.append(f"<p>Delta Sharing shares (<code>/delta-sharing</code>):</p><ul>{items}</ul>")
    parts.append("</section>")
    return "".join(parts)


def _ingest_jobs(jobs: list[dict[str, Any]]) -> str:
    """Per Kafka ingest job and topic: state, table, lag in records and seconds, last error; the job's
    failure, and its pending requests."""
    rows = []
    for j in jobs:
        status, name = j["status"], _e(j["job"])
        job_state = "silent" if j["silent"] else "failed" if status.get("failure") else ""
        heard = f"{age(j['quiet_seconds'])} ago"
        for topic, t in status.get("topics", {}).items():
            state = job_state or t["state"]
            lag_s = t.get("lag_seconds")
            rows.append(
                f'<tr data-job="{name}" data-topic="{_e(topic)}" '
                f'class="{"bad" if t["last_error"] or job_state else ""}">'
                + _td("job", name)
                + _td("topic", _e(topic))
                + _td("state", _e(state), "state", "warn" if state == "paused" else "")
                + _td("table", _e(t["table"] or "by record"))
                + _td("lag (records)", _e(t["lag_records"]), "lag_records")
                + _td("lag", "?" if lag_s is None else age(lag_s), "lag_seconds")
                + _td("heard", heard)
                + _td("last error", _e((t["last_error"] or "")[:160]), cls="err")
                + "</tr>"
            )
        if status.get("failure"):
            rows.append(
                f'<tr data-job="{name}" class="bad"><td colspan="8" data-field="failure">{name} failed '
                f"({heard}): {_e(status['failure'][:300])}</td></tr>"
            )
        for r in j["requests"]:
            if not r["done_at"]:
                what = f"{r['action']} {r['topic']}" + (f" to {r['target']}" if r.get("target") else "")
                rows.append(
                    f'<tr data-job="{name}" class="muted"><td colspan="8">request {_e(r["id"])}: '
                    f"{_e(what)} by {_e(r['requested_by'])}, pending</td></tr>"
                )
    head = "".join(f"<th>{h}</th>" for h in _INGEST_COLUMNS)
    return (
        '<section class="ingest"><h2>Kafka ingest</h2><div class="scroll"><table class="grid">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div></section>"
    )


_INGEST_COLUMNS = ("job", "topic", "state", "table", "lag (records)", "lag", "heard", "last error")


def _recent(recent: list[dict[str, Any]], now: datetime) -> str:
    title = "<h2>Recent roll attempts</h2>"
    if not recent:
        return f'<section class="recent">{title}<p class="muted">none by the daemon yet</p></section>'
    rows = "".join(
        f'<tr class="{"bad" if r["outcome"] == "failed" else ""}">'
        + _td("finished", _e(clock_time(r["finished_at"], now)))
        + _td("table", _e(r["table"]))
        + _td("partition", _e(clock_time(r["partition"], now)))
        + _td("outcome", _e(r["outcome"]))
        + _td("took", took(r["seconds"]))
        + _td("error", _e((r["error"] or "")[:160]), cls="err")
        + "</tr>"
        for r in recent
    )
    return (
        f'<section class="recent">{title}<div class="scroll"><table class="grid">'
        "<thead><tr><th>finished</th><th>table</th><th>partition</th><th>outcome</th><th>took</th><th>error</th>"
        f"</tr></thead><tbody>{rows}</tbody></table></div></section>"
    )


def _document(content: str, refresh: float | None) -> str:
    script = f'<script src="/ui/static/ui.js" data-refresh="{refresh:g}" defer></script>' if refresh else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>streampart status</title>
<link rel="stylesheet" href="/ui/static/ui.css">
{script}</head>
<body>{content}</body></html>
"""
