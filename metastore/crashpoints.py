"""Named crash points and pause points for crash and race tests.

``STREAMPART_CRASHPOINT=<name>`` makes the process SIGKILL itself when it reaches that point,
so a test can kill a writer or roller at an exact step of the protocol (a real kill -9: no
cleanup, no ``finally``). ``<name>@<n>`` kills at the n-th time the point is reached (a
streaming job's third batch, say). Unset, a crash point costs one dictionary lookup.

``STREAMPART_PAUSEPOINT=<name>[@<n>]:<seconds>[,…]`` makes the process dwell at a point (every
time, or only the n-th time; several points separated by commas), so a test can let another
process act while this one is provably in the middle of a step — the shape of a GC pause or a
frozen VM. The process prints ``pausepoint <name>`` to stderr when the pause begins.
"""

from __future__ import annotations

import os
import signal
import sys
import time

ENV = "STREAMPART_CRASHPOINT"
PAUSE_ENV = "STREAMPART_PAUSEPOINT"

POINTS = (
    "chunk-after-write",  # chunk files written, commit not begun
    "chunk-before-delta-commit",  # COMMITTING recorded, Delta commit not made
    "chunk-after-delta-commit",  # Delta commit made, metastore not told
    "roll-after-begin",  # partition ROLLING, not sealed
    "roll-after-seal",  # sealed, not swept
    "roll-spark-after-write",  # (roll.engine = spark) Spark's files in the attempt's hidden directory
    "roll-spark-mid-rename",  # (roll.engine = spark) the first compacted file renamed, others not
    "roll-after-compact",  # compacted files written, sweep not committed
    "roll-after-sweep",  # sweep committed, no _SUCCESS, partition not STANDARD
    "roll-before-finish",  # _SUCCESS written, partition not STANDARD
    "expire-after-begin",  # partitions EXPIRING and the expiry recorded, their files not removed
    "expire-after-commit",  # the Delta commit removing their files landed, the expiry not finished
    "delete-after-begin",  # a delete recorded, the table not sealed
    "delete-after-rewrite",  # the rewritten files written, not committed
    "delete-after-commit",  # the delete's commit landed, the metastore not told
    "table-before-log",  # table recorded in the metastore, its Delta log not created
    "schema-before-log",  # ALTER: change recorded pending in the metastore, its metaData not committed
    "schema-after-log",  # ALTER: metaData committed to the Delta log, the metastore not finished
    "ctas-after-create",  # CREATE TABLE … AS SELECT: table and first chunk reserved, nothing staged
    "replica-after-claim",  # copy claimed, no file copied
    "replica-after-file",  # a file copied and verified (each file), not committed
    "replica-before-commit",  # every file copied, the secondary's Delta commit not made
    "replica-after-commit",  # committed to the secondary, not recorded as present
    "move-after-fence",  # namespace fenced in its metastore, commits in flight not drained
    "move-mid-copy",  # some tables copied to the target, others not (each table)
    "move-before-flip",  # the target holds a whole copy, the route still names the source
    "move-after-flip",  # the route names the target, the source's rows all there
    "move-mid-cleanup",  # some of the source's tables removed, others not (each table)
)


_hits: dict[str, int] = {}


def crashpoint(name: str) -> None:
    wanted = os.environ.get(ENV)
    if wanted is None or not wanted.startswith(name):
        return
    point, _, nth = wanted.partition("@")
    if point != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)


_pauses: dict[str, int] = {}


def pausepoint(name: str) -> None:
    for spec in os.environ.get(PAUSE_ENV, "").split(","):
        if spec.startswith(name):
            _pause(name, spec)


def _pause(name: str, spec: str) -> None:
    point, _, seconds = spec.partition(":")
    point, _, nth = point.partition("@")
    if point != name:
        return
    _pauses[name] = _pauses.get(name, 0) + 1
    if nth and _pauses[name] != int(nth):
        return
    sys.stderr.write(f"pausepoint {name}\n")
    sys.stderr.flush()
    time.sleep(float(seconds or 5))
