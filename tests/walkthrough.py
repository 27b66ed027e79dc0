"""Run a document's ```bash blocks as written: the README's tour and every guide (tests/test_guides.py).

The blocks are read from the documents (never copied here), so an example that stops working fails
a test. A document's blocks run in order, in **one** bash process, as a user would paste them top
to bottom into one terminal (so ``source``, ``export``, ``cd``, shell variables and background jobs
carry over), in a fresh temporary directory with the real ``streampart`` CLI. Each document starts
from nothing: its own warehouse, its own tables, its own files.

How a block's text becomes commands (the convention every document follows, checked by
:func:`problems`):

- a command is a line, with its ``\\`` continuation lines; a line that is only a comment (a shown
  output, a comment going on) belongs to the command above it;
- the exit status a command must have is written ``error, exit N`` in its comment (its trailing
  comment or the comment lines under it: ``# error, exit 1: …``); without it, it must exit 0. A
  comment that starts with ``error`` must say ``error, exit N``;
- a comment that starts with a number and a colon (``# 2: the link, by its local name``) gives the
  answer: the command's output must show that number;
- a command ending in ``&`` runs in the background until the document's end (a server, a broker);
- a command whose comment says ``(not run`` is shown, not run (the reason follows); any other
  command with ``…`` in it, or with usage notation (``[--json]``, ``[NAME]``), is an error of the
  document: write a command that runs, or mark it ``(not run``;
- what only makes sense on the reader's machine is replaced by :data:`PLACEHOLDERS` (each must
  still occur in some document, so the mapping cannot rot): ``/tmp/`` is the test's directory,
  ports 8080 (``streampart serve``), 9092 (``streampart dev broker``), 10000 (the SQL server),
  9464 and 9470 (the roll daemon's metrics and status page), 7077, 8090 and 8091 (a Spark
  standalone master, its web UI, a worker's) and 9000 (an S3 server) are free ports of this host.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Document text → what the test runs instead. {tmp} is the test's directory, {m1}/{m2} the
# PostgreSQL URLs of two scratch schemas of STREAMPART_TEST_PG naming their passwords as the
# documents' secrets, {secret1}/{secret2} those passwords (any word under trust auth); the ports
# of PORTS are free ports.
PLACEHOLDERS = {
    ".venv/bin/activate": str(ROOT / ".venv" / "bin" / "activate"),
    "/tmp/": "{tmp}/",
    "/mnt/": "{tmp}/mnt/",  # the clusters' shared directories (made by the test, as a mount would be)
    "spark://dc2-gw:7077": "'local[1]'",  # the data centres' Spark masters: this host's local Spark
    "spark://dc$n-gw:7077": "'local[1]'",
    "postgresql://sp:${M1_PASSWORD}@db2/streampart": "{m1}",
    "postgresql://sp:${M2_PASSWORD}@db3/streampart": "{m2}",
    "'the password of sp on db2'": "'{secret1}'",
    "'the password of sp on db3'": "'{secret2}'",
}
PORTS = {
    "8080": "http",
    "9092": "kafka",
    "10000": "sql",
    "9464": "metrics",
    "9470": "status",
    "7077": "spark",  # a Spark standalone master, and its web UI and a worker's
    "8090": "spark_ui",
    "8091": "worker_ui",
    "9000": "s3",  # an S3 server (moto's)
}
MOUNTS = ("dc1", "dc2", "dc3", "dc4")
USAGE_NOTATION = re.compile(r"(?<=\s)\[[^\s\]]")


@dataclass
class Command:
    source: str  # the file it is in
    line: int  # of that file, 1-based
    text: str  # as the document shows it (continuations joined)
    comment: str
    run: str  # what the test runs: its lines as shown, placeholders filled
    expected: int | None  # None: not run
    answer: str | None = None  # a number its output must show

    def where(self) -> str:
        return f"{self.source}:{self.line}: {self.text}"


def section(name: str, heading: str | None = None) -> tuple[str, int, str]:
    """(file, first line number, text) of a document, or of its ``## heading`` section."""
    lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
    if heading is None:
        return name, 1, "\n".join(lines)
    starts = [i for i, line in enumerate(lines) if line.startswith("## ")]
    [start] = [i for i in starts if lines[i][3:].strip() == heading]
    end = next((i for i in starts if i > start), len(lines))
    return name, start + 1, "\n".join(lines[start:end])


def _bash_blocks(first: int, text: str) -> Iterator[tuple[int, list[str]]]:
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```bash":
            j = i + 1
            while lines[j].strip() != "```":
                j += 1
            yield first + i + 1, lines[i + 1 : j]
            i = j
        i += 1


def _split_comment(line: str, quote: str = "") -> tuple[str, str]:
    """The code and the comment of one shell line (a ``#`` outside quotes, after a blank).

    ``quote`` is the quote the line starts in (a quoted string continued from the line above).
    """
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), ""


def _open_quote(code: str) -> str:
    """The quote left open at the end of ``code`` ('' if none)."""
    quote = ""
    for c in code:
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
    return quote


def _unquoted(code: str) -> str:
    """``code`` with its quoted strings blanked out."""
    out, quote = [], ""
    for c in code:
        if quote:
            quote = "" if c == quote else quote
            out.append(" ")
        elif c in "'\"":
            quote = c
            out.append(" ")
        else:
            out.append(c)
    return "".join(out)


class _Unfilled(dict[str, str]):
    def __missing__(self, key: str) -> str:  # a value not given (checking the convention): kept as {key}
        return "{" + key + "}"


_PLACEHOLDER = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS))


def fill(code: str, values: dict[str, str]) -> str:
    # one pass: what one placeholder puts in is never taken for another (a checkout under /tmp/
    # gives an activate script's path that "/tmp/" would map again)
    code = _PLACEHOLDER.sub(lambda m: PLACEHOLDERS[m.group(0)].format_map(_Unfilled(values)), code)
    for port, name in PORTS.items():
        code = re.sub(rf"\b{port}\b", values.get(name, port), code)
    return code


def commands(parts: Sequence[tuple[str, int, str]], values: dict[str, str]) -> list[Command]:
    found: list[Command] = []
    for source, start_line, text in parts:
        found += _commands(source, start_line, text)
    for cmd in found:
        cmd.run = fill(cmd.run, values)
        if "(not run" in cmd.comment:
            cmd.expected = None
            continue
        exit_marker = re.search(r"\berror, exit (\d+)\b", cmd.comment)
        cmd.expected = int(exit_marker[1]) if exit_marker else 0
        answer = re.match(r"\s*(\d+):", cmd.comment)
        cmd.answer = answer[1] if answer else None
    return found


def _commands(source: str, start_line: int, text: str) -> list[Command]:
    found: list[Command] = []
    for first, block in _bash_blocks(start_line, text):
        i = 0
        while i < len(block):
            line = block[i]
            if not line.strip():
                i += 1
                continue
            code, comment = _split_comment(line)
            if not code:  # a comment line: it goes on the command above
                if found and found[-1].line >= first:
                    found[-1].comment += " " + comment
                i += 1
                continue
            start = i
            raw = [code]  # run as shown: continuation lines and all
            while raw[-1].endswith("\\"):
                i += 1
                code, comment = _split_comment(block[i], _open_quote("\n".join(raw)))
                raw.append(code)
            shown = " ".join(part.removesuffix("\\").strip() for part in raw)
            found.append(Command(source, first + start + 1, shown, comment, "\n".join(raw), 0))
            i += 1
    return found


def problems(cmds: Sequence[Command]) -> list[str]:
    """What breaks the convention: unfilled ``…``, usage notation, an ``error`` without its exit."""
    found = [
        f"{c.where()}: a command with … must be filled in or marked '(not run: why)'"
        for c in cmds
        if c.expected is not None and "…" in c.text
    ]
    found += [
        f"{c.where()}: usage notation ([…]) in a command that runs: write the command as it is typed"
        for c in cmds
        if c.expected is not None and USAGE_NOTATION.search(_unquoted(c.text))
    ]
    found += [
        f"{c.where()}: its comment says error: add 'exit N'"
        for c in cmds
        if c.comment.strip().lower().startswith("error") and not re.search(r"\berror, exit \d", c.comment)
    ]
    return found


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def walk(
    parts: Sequence[tuple[str, int, str]], tmp_path: Path, values: dict[str, str], timeout_s: float
) -> None:
    """Run the parts' commands in one shell in ``tmp_path``; fail naming every command that failed."""
    for mount in MOUNTS:
        (tmp_path / "mnt" / mount / "warehouse").mkdir(parents=True, exist_ok=True)
    values = {"tmp": str(tmp_path), **{name: free_port() for name in PORTS.values()}, **values}
    cmds = commands(parts, values)
    broken = problems(cmds)
    assert broken == [], broken
    out = tmp_path / ".walk"
    out.mkdir()
    script = ["set +e", f"cd {tmp_path}"]
    for n, cmd in enumerate(cmds):
        if cmd.expected is None:
            continue
        script += [
            f"echo $EPOCHREALTIME > {out}/{n}.start",
            "{ " + cmd.run,
            f"}} >{out}/{n}.out 2>{out}/{n}.err </dev/null",
            f"echo $? $EPOCHREALTIME > {out}/{n}.rc",
        ]
    # Background jobs (a server, a broker) are stopped as a user would: SIGTERM, then waited for.
    script += ["kill $(jobs -p) 2>/dev/null", "wait"]
    (out / "script.sh").write_text("\n".join(script) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMPART_", "VIRTUAL_ENV"))}
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if ".venv" not in p)
    shell = subprocess.Popen(["bash", str(out / "script.sh")], env=env, cwd=tmp_path, start_new_session=True)
    try:
        shell.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:  # the commands not finished are reported below
        pass
    finally:  # whatever the walk left running (a background job that ignored SIGTERM)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()

    failures, report = [], []
    for n, cmd in enumerate(cmds):
        if cmd.expected is None:
            report.append(f"   not run  {cmd.where()}")
            continue
        rc_file = out / f"{n}.rc"
        if not rc_file.exists():
            failures.append(f"{cmd.where()}: never finished (the script stopped before it)")
            continue
        rc, end = rc_file.read_text().split()
        seconds = float(end) - float((out / f"{n}.start").read_text())
        stderr = (out / f"{n}.err").read_text(errors="replace")
        report.append(f"{int(rc):3d} {seconds:6.1f}s  {cmd.where()}")
        stdout = (out / f"{n}.out").read_text(errors="replace")
        wrong = cmd.answer is not None and not re.search(rf"(?<![\w.(]){cmd.answer}(?![\w.)])", stdout)
        if wrong:
            stderr += f"\nits output does not show {cmd.answer}:\n{stdout}"
        refused = cmd.expected == 0 and stdout.lstrip().startswith('{"error"')  # curl exits 0 on a 4xx
        if refused:
            stderr += f"\nthe server refused it:\n{stdout}"
        if int(rc) != cmd.expected or "Traceback" in stderr or wrong or refused:
            tail = "\n    ".join(stderr.strip().splitlines()[-6:])
            failures.append(
                f"{cmd.where()}\n  ran: {cmd.run}\n  exit {rc}, expected {cmd.expected}:\n    {tail}"
            )
    (tmp_path / "report.txt").write_text("\n".join(report) + "\n", encoding="utf-8")
    print("\n".join(report))
    assert failures == [], "\n\n".join(failures)
