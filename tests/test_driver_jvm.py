"""The Spark driver JVM's stderr, relayed by ``streampart/driver_jvm.py``: the JDK's notice about
incubator modules is left out, every other line passes as it was written, and the relay keeps
reading whatever happens to where it writes (a JVM must never block on a full pipe)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from streampart.driver_jvm import relay

NOTICE = b"WARNING: Using incubator modules: jdk.incubator.vector\n"


def relayed(data: bytes, sink: int, piece: int = 1 << 16) -> None:
    """Relay a pipe to ``sink`` while ``data`` is written into it ``piece`` bytes at a time, then ended."""
    source, writer = os.pipe()
    relaying = threading.Thread(target=relay, args=(source, sink), daemon=True)
    relaying.start()

    written: list[int] = []

    def write() -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(writer, view[:piece]) :]
        os.close(writer)
        written.append(len(data))

    writing = threading.Thread(target=write, daemon=True)
    writing.start()
    writing.join(60)
    assert not writing.is_alive(), "the relay stopped reading: the writer (the JVM) is blocked"
    assert written == [len(data)], "the relay stopped reading: the writer (the JVM) met a closed pipe"
    relaying.join(60)
    assert not relaying.is_alive()


def test_the_notice_is_left_out_and_every_other_line_passes(tmp_path: Path) -> None:
    kept = (
        b"12:00:01 ERROR Executor: a task failed\n"
        b"OpenJDK 64-Bit Server VM warning: a warning of the JVM's own\n"
        b"WARNING: Using incubator modules: jdk.incubator.vector, jdk.incubator.foreign\n"  # not the notice
        b'Traceback (most recent call last):\n  File "worker.py", line 1\nValueError: relayed by the JVM\n'
    )
    with (tmp_path / "stderr").open("wb") as sink:  # written as a JVM writes: lines in pieces
        relayed(NOTICE + kept + NOTICE + b"the last words, no line end", sink.fileno(), piece=7)
    assert (tmp_path / "stderr").read_bytes() == kept + b"the last words, no line end"


def test_a_sink_that_cannot_be_written_to_does_not_stop_the_reading() -> None:
    reader, sink = os.pipe()
    os.close(reader)  # nobody reads this process's stderr any more: writes fail (EPIPE)
    try:
        relayed(b"a line the JVM writes\n" * 20_000, sink)  # 440 kB: many times a pipe's buffer
    finally:
        os.close(sink)
