"""The Spark session of a table's cluster, as this host reaches it: what rolls and ingest jobs compute on.

A table's data and writes live on its primary cluster, so the jobs that write it (Kafka ingest,
``roll.engine = spark`` compaction) run on that cluster's Spark master: this host's
``[clusters] spark_masters`` entry for it, else its registered master, else ``spark.master``
(the ``default`` cluster), as :meth:`streampart.config.Settings.spark_for` decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from metastore.catalog import Catalog
from metastore.models import Table
from streampart.config import Settings, SparkConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class ClusterSpark:
    """A factory of Spark sessions per table (``Roller(spark=ClusterSpark(settings, catalog))``)."""

    settings: Settings
    catalog: Catalog

    def config(self, table: Table) -> SparkConfig:
        """The Spark settings of jobs on ``table``'s cluster."""
        return self.settings.spark_for(self.catalog.clusters.get(table.cluster))

    def __call__(self, table: Table) -> SparkSession:
        """The process's session, started on ``table``'s cluster on first use.

        Raises:
            SparkUnavailableError: the cluster's standalone master does not answer.
            UserInputError: this process already runs Spark on another master.
        """
        from streampart.query import spark_session

        return spark_session(self.config(table))
