"""A history checker under a nemesis, the way Jepsen tests databases (issue 45, build item 4).

Clients (HTTP producers, delta-rs readers, a roller) do real calls against a real
``streampart serve`` and record every operation — invocation, completion, outcome ``ok`` /
``fail`` / ``unknown``, the rows or the version involved — as JSON lines in one history file
(:mod:`tests.history.history`); a nemesis SIGKILLs and restarts the server and freezes it with
SIGSTOP/SIGCONT, recording each fault there too (:mod:`tests.history.nemesis`); afterwards a
checker of pure functions proves the invariants on the history and an independent final read by
delta-rs (:mod:`tests.history.checker`), and reports operations, faults and anomalies.
"""
