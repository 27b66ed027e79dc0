"""The federation's health as Prometheus sees it, from inside one process (its router).

Served on the API server's ``/metrics`` and on the roll daemon's metrics port:

- ``streampart_metastore_up{metastore}``: 1 if the metastore answers, 0 if not. A federated
  metastore whose circuit breaker is open is 0 at once (no probe: calls for it fail fast anyway);
  otherwise one ``SELECT 1`` per metastore, all at once, at most every ``health_s`` seconds (the
  answers are cached between scrapes, so many Prometheus servers scraping often cost nothing
  more). A failed probe opens the breaker, exactly as a failed call would.
- ``streampart_metastore_call_seconds{metastore}``: the latency of this process's metastore
  transactions (:class:`~metastore.store.engine.CallTimes`, kept by each open database).
- ``streampart_route_table_version``: the route-table version this process routes by (if the
  primary cannot be read, the one it keeps using).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from metastore.errors import StreampartError
from metastore.federation import PROBE_TIMEOUT_S
from metastore.models import PRIMARY
from metastore.router import FanOut, Router
from metastore.store import Metastore

log = logging.getLogger(__name__)


class FederationHealth:
    """Which metastores of the federation answer, probed at most every ``health_s`` seconds."""

    def __init__(self, router: Router, health_s: float | None = None) -> None:
        self.router = router
        self.health_s = router.fail_fast_s if health_s is None else health_s
        self._lock = threading.Lock()
        self._until = 0.0
        self._up: dict[str, bool] = {}
        self._why: dict[str, str] = {}

    def up(self) -> dict[str, bool]:
        """``{metastore: answers}`` for every metastore of the federation, the primary first."""
        with self._lock:
            if time.monotonic() < self._until:
                return dict(self._up)
            names = self.router.names()
            opened = self.router.opened()
            down = {n: s.down for n, s in opened.items() if s.down is not None}
            # A probe of a metastore never opened in this process opens it (and migrates it once),
            # like any first call for one of its namespaces would.
            probed: FanOut[None] | None = None
            if len(down) < len(names):
                try:
                    probed = self.router.fan_out(_ping, timeout_s=PROBE_TIMEOUT_S + 1)
                except StreampartError as exc:  # no federation: the primary alone, called directly
                    probed = FanOut(missing={PRIMARY: str(exc)})
            up: dict[str, bool] = {}
            why: dict[str, str] = {}
            for name in names:
                if name in down:
                    up[name], why[name] = False, str(down[name])
                elif probed is not None and name in probed.answers:
                    up[name] = True
                else:
                    up[name] = False
                    why[name] = probed.missing.get(name, "no answer") if probed is not None else "down"
            for name, reason in why.items():
                if self._up.get(name, True):
                    log.warning("metastore %s is down: %s", name, reason)
            self._up, self._why = up, why
            self._until = time.monotonic() + self.health_s
            return dict(up)


def _ping(store: Metastore) -> None:
    store.ping()


class FederationCollector(Collector):
    """The three series of this module's docstring, computed when Prometheus scrapes."""

    def __init__(self, router: Router, health_s: float | None = None) -> None:
        self.router = router
        self.health = FederationHealth(router, health_s)

    def describe(self) -> Iterator[Metric]:
        return self._families(None)  # names only: registering must not touch a database

    def collect(self) -> Iterator[Metric]:
        return self._families(self.health)

    def _families(self, health: FederationHealth | None) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "streampart_metastore_up",
            "1 if the metastore answers (probed at most every [federation] health_interval), 0 if not.",
            labels=["metastore"],
        )
        calls = HistogramMetricFamily(
            "streampart_metastore_call_seconds",
            "Latency of this process's transactions on the metastore (reads and writes).",
            labels=["metastore"],
        )
        version = GaugeMetricFamily(
            "streampart_route_table_version", "The route-table version this process routes by."
        )
        if health is not None:
            try:
                for name, answers in health.up().items():
                    up.add_metric([name], 1 if answers else 0)
            except StreampartError as exc:  # the primary cannot be read and no routes were ever read
                log.warning("metastore health: %s", exc)
            for name, store in self.router.opened().items():
                buckets, total, _count = store.call_times.snapshot()
                calls.add_metric([name], [(_bound(b), float(n)) for b, n in buckets], float(total))
            try:
                version.add_metric([], self.router.version)
            except StreampartError as exc:
                log.warning("route table version: %s", exc)
        yield from (up, calls, version)


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)
