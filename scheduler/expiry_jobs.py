"""The roll daemon's expiry pass (leader only, every ``scheduler.expiry_interval``): each table it
rolls that has a retention (its own ``--retain``, or its namespace's) has its due standard
partitions expired by :class:`scheduler.expiry.Expirer` under the daemon's leadership lease.

A table's expiry runs under the same per-table lock as its rolls (``RollJobs``), so the daemon
never expires a table while it rolls it; a table busy rolling is left to the next pass. One
table's failure is logged and the others go on; the pass resumes it next time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from metastore.catalog import Catalog
from metastore.errors import LeaseLostError, NotFoundError
from metastore.logs import event
from metastore.models import Lease
from scheduler.config import RollConfig
from scheduler.errors import RollAbandonedError
from scheduler.expiry import Expirer, ExpiryResult
from scheduler.metrics import SchedulerMetrics
from scheduler.roll_jobs import RollJobs

log = logging.getLogger("streampart.scheduler")


@dataclass
class ExpiryJobs:
    """Expiry passes for one roll daemon (its leader's work)."""

    catalog: Catalog
    rolls: RollJobs
    roll_config: RollConfig
    metrics: SchedulerMetrics
    owner: str
    fence: Callable[[], Lease | None]
    stopping: Callable[[], bool]
    should_abandon: Callable[[], bool]
    step_down: Callable[[str], None]

    def sweep(self) -> list[ExpiryResult]:
        """One pass over every table this daemon rolls; what it expired."""
        done: list[ExpiryResult] = []
        for table in self.catalog.store.list_tables():
            fence = self.fence()
            if fence is None or self.stopping():
                break
            if not self.rolls.ours(table):
                continue
            lock = self.rolls.table_lock(table.id)
            if not lock.acquire(blocking=False):
                continue  # rolling now: the next pass
            try:
                expirer = Expirer(
                    self.catalog,
                    self.roll_config.renewed(),
                    owner=self.owner,
                    fence=fence,
                    should_abandon=self.should_abandon,
                )
                results = expirer.expire_table(table)
            except NotFoundError:
                continue  # dropped meanwhile
            except LeaseLostError as exc:
                self.step_down(str(exc))
                break
            except RollAbandonedError:
                break  # shutting down: the next leader resumes it
            except Exception as exc:
                event(
                    log,
                    logging.WARNING,
                    "expiry.failed",
                    "expiry failed",
                    table=str(table.name),
                    error=str(exc),
                )
                continue
            finally:
                lock.release()
            for r in results:
                self.metrics.expired_partitions.labels(r.table).inc(len(r.partitions))
                event(
                    log,
                    logging.INFO,
                    "expiry.done",
                    "expired partitions past retention",
                    table=r.table,
                    retain=r.retain,
                    partitions=len(r.partitions),
                    rows=r.rows,
                    version=r.version,
                    resumed=r.resumed,
                )
            done += results
        return done
