"""Benchmarks of streampart: chunk commits, rolls and snapshot reads, each against a baseline.

Run them all with ``python -m bench`` (``make bench``); ``--quick`` is a small smoke run and
``--only NAME`` runs one benchmark. Every benchmark measures a plain pyarrow / Spark baseline
on the same data in the same run and reports its own figures as a ratio against it. Results
go to the terminal (rich tables) and to ``bench/results/latest.json``. Nothing is asserted:
the numbers are for reading, not for failing a build.
"""
