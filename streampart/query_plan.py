"""One statement of ``streampart query``, from its text to what runs where.

:func:`plan` — without Spark — takes the leading ``USE`` statements off (namespace, cluster),
checks the statement against the query policy, finds the table it writes, pins every table it
reads on its primary and finds their copies (:mod:`streampart.query_copies`), chooses the
cluster (:mod:`streampart.query_cluster`) and pins what the statement reads there. ``--explain``
prints that plan; :func:`run` runs it on a SparkSession of the chosen cluster: the rows of a
query, or the chunk a writing statement committed (:mod:`streampart.query_writes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ingest.config import ChunkConfig
from metastore.catalog import Catalog
from metastore.models import Table, TableName
from streampart.query import (
    Prepared,
    Session,
    Snapshot,
    catalog_resolver,
    prepare,
    split_use,
    statement_frame,
)
from streampart.query_cluster import Choice, Target, choose
from streampart.query_copies import Located, cut_note, describe_reads, locate, snapshots_on
from streampart.query_policy import TableRef
from streampart.query_writes import WriteResult, output_table, write_result

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class Plan:
    """A statement checked, its cluster chosen, and what it reads there pinned."""

    session: Session
    prepared: Prepared
    output: TableName | None  # the table it writes
    table: Table | None  # … if that exists
    choice: Choice
    located: dict[TableRef, Located]
    snapshots: dict[TableRef, Snapshot]  # what it reads, on the chosen cluster

    @property
    def cluster(self) -> str:
        return self.choice.cluster

    def reads(self) -> list[dict[str, Any]]:
        return describe_reads(self.located, self.snapshots, self.choice.cuts)

    def notes(self) -> list[str]:
        """One line per table read as a replicated cut: what the answer is as of."""
        return [cut_note(read) for read in self.reads() if "cut" in read]

    def explain(self) -> dict[str, Any]:
        """``--explain --json``: the cluster and why, the table written, what is read where."""
        output = self.prepared.output
        return {
            "cluster": self.choice.cluster,
            "reason": self.choice.reason,
            "statement": "select" if output is None else ("create" if output.create else "insert"),
            "output": str(self.output) if self.output is not None else None,
            "reads": self.reads(),
        }


def plan(
    catalog: Catalog,
    sql: str,
    namespace: str | None = None,
    cluster: str | None = None,
    replicated_only: bool = False,
) -> Plan:
    """Plan one statement (``USE`` statements first, then a query, INSERT INTO or CREATE TABLE … AS).

    Args:
        namespace: ``--namespace``; cluster: ``--cluster`` (None: choose); replicated_only:
            ``--replicated-only``.

    Raises:
        NoClusterError: no cluster (or not the one asked for) holds every table it reads;
        StreampartError: whatever else is wrong with it, naming the fault.
    """
    session = split_use(sql, namespace, cluster)
    if session.namespace is not None:
        catalog.namespaces.get(session.namespace)
    if session.cluster is not None:
        catalog.clusters.get(session.cluster)  # an unknown cluster: NotFoundError
    prepared = prepare(session.sql, catalog_resolver(catalog, session.namespace))
    name, table = (None, None)
    if prepared.output is not None:
        name, table = output_table(catalog, prepared.output, session.namespace)
    located = locate(catalog, prepared.refs)
    target = Target(str(name), table.cluster if table is not None else None) if name is not None else None
    inputs = [loc.as_input() for loc in located.values()]
    choice = choose(inputs, target, session.cluster, replicated_only)
    snapshots = snapshots_on(catalog, located, choice.cluster, choice.cuts)
    return Plan(session, prepared, name, table, choice, located, snapshots)


def run(
    spark: SparkSession,
    catalog: Catalog,
    planned: Plan,
    key: str | None = None,
    chunk: ChunkConfig | None = None,
    *,
    create_namespace: bool = True,
) -> DataFrame | WriteResult:
    """Run a planned statement on ``spark`` (a session of the chosen cluster's Spark master).

    Returns:
        A query's rows (a DataFrame over pinned snapshots), or what a writing statement committed.
    """
    df = statement_frame(spark, planned.prepared, planned.snapshots)
    output = planned.prepared.output
    if output is None:
        return df
    assert planned.output is not None
    return write_result(
        catalog,
        output,
        planned.output,
        planned.table,
        df,
        key,
        planned.cluster,
        chunk,
        create_namespace=create_namespace,
    )
