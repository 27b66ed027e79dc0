"""A table's clustering: the columns its rolled partitions' rows are ordered by (``--cluster-by``).

A roll writes a standard partition's rows sorted by its one clustering column, or Z-ordered by two
or more (``scheduler/clustering.py``), and cuts them into files of about the target size. Each file
then holds a narrow range of those columns, and its add's statistics say so
(``metastore/delta/stats.py``): a reader looking for one value opens the few files whose range holds
it. Rows are clustered when their partition rolls; the streaming partition's chunk files stay as
they were written.

:func:`check_cluster_by` is the one check, for ``table create``, ``table alter``, the HTTP API and
``TBLPROPERTIES``.
"""

from __future__ import annotations

from collections.abc import Sequence

from metastore.errors import UserInputError
from metastore.models.columns import Column

# Why 4: Z-ordering gives each column 1/n of the bits of the order, so each added column makes the
# others less selective; Delta's liquid clustering stops at 4 for the same reason.
MAX_CLUSTER_COLUMNS = 4

# The types whose statistics carry a range (metastore/delta/stats.py): ordering rows by any other
# (a boolean, a binary, a decimal) would let no reader skip a file.
CLUSTERABLE = ("byte", "short", "integer", "long", "float", "double", "string", "date", "timestamp")

# What ``--cluster-by`` (table alter) and ``cluster_by`` (the HTTP API) take to stop clustering.
NO_CLUSTERING = "none"


def parse_cluster_by(text: str, what: str = "--cluster-by") -> tuple[str, ...]:
    """``"a, b"`` → ``("a", "b")``; ``"none"`` → ``()``. A name given twice or an empty name is refused."""
    if text.strip().lower() == NO_CLUSTERING:
        return ()
    names = tuple(n.strip() for n in text.split(","))
    if any(not n for n in names):
        raise UserInputError(
            f"{what}: give one or more column names separated by commas (or {NO_CLUSTERING}), not {text!r}"
        )
    return names


def check_cluster_by(
    names: Sequence[str], columns: Sequence[Column], what: str = "--cluster-by"
) -> tuple[str, ...]:
    """The clustering columns ``names`` as the table spells them, checked against its ``columns``.

    Raises:
        UserInputError: naming every column at fault and why (not in the table, of a type with no
            range in the statistics, given twice), or too many columns.
    """
    by_name = {c.name.lower(): c for c in columns}
    problems: list[str] = []
    found: list[str] = []
    for name in names:
        c = by_name.get(name.lower())
        if c is None:
            problems.append(f"{name!r} is not a column of the table")
        elif c.name in found:
            problems.append(f"{name!r} is named twice")
        elif c.type not in CLUSTERABLE:
            problems.append(
                f"{c.name!r} is {c.sql_type}: its files' statistics carry no range for it, so ordering "
                "rows by it would let no reader skip a file"
            )
        else:
            found.append(c.name)
    if len(names) > MAX_CLUSTER_COLUMNS:
        problems.append(
            f"{len(names)} columns are given, at most {MAX_CLUSTER_COLUMNS} are taken (each added column "
            "makes the others less selective)"
        )
    if problems:
        raise UserInputError(f"{what}: {'; '.join(problems)}")
    return tuple(found)


def describe_clustering(names: Sequence[str]) -> str:
    """How a table's rolled rows are ordered, in words (``table describe``)."""
    if not names:
        return "not clustered"
    if len(names) == 1:
        return f"rolled partitions sorted by {names[0]}"
    return f"rolled partitions Z-ordered by {', '.join(names)}"
