"""Deletes by predicate (issue 30): the predicate of ``streampart delete --where``, read from its SQL
text into an Arrow filter over a data file's rows (``predicate.py``).
"""

from __future__ import annotations
