"""The driver's Prometheus endpoint: each committed epoch's figures, labelled by job and operator.

Why here: the metrics DB is the record (the console, DS2 and the controller read it), but an
on-call's Prometheus and Grafana want to scrape the job itself. The values come from the same
`EpochReport` the epoch's commit wrote, and only after that commit returned: what Prometheus shows
is what the metrics DB holds (docs/operations.md, "Prometheus metrics").

Why this shape:
- a `CollectorRegistry` per process, not prometheus_client's global one, so nothing else in the
  driver (PySpark, a user's operator) leaks series into it, and two endpoints never share series;
- one HTTP server per process and port (`acquire`): a chain's operators share it, told apart by
  the `operator` label; it binds 127.0.0.1 only (scrape through a local agent or a tunnel);
- `observe` only sets numbers in memory (a few µs): a scrape runs in the server's own thread, so
  a slow or stuck scraper never holds an epoch back.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

if TYPE_CHECKING:
    from spark_jobs.epoch_commit import EpochReport

log = logging.getLogger("ballast.prom")

#: the address the endpoint binds: loopback only
HOST = "127.0.0.1"
LABELS = ("job", "operator")
#: epoch-time buckets (s): from an idle micro-batch (~0.2 s) to a long migration epoch
EPOCH_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 120.0)


class JobMetrics:
    """The metric families of one driver process, in a registry of their own."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.input_rate = Gauge("ballast_input_rate_records_per_second",
                                "input records per second arriving at the job, as measured for the last committed "
                                "epoch (epoch_metrics.input_rate)", LABELS, registry=r)
        self.backlog = Gauge("ballast_backlog_records",
                             "input records not yet read at the end of the last committed epoch "
                             "(epoch_metrics.backlog)", LABELS, registry=r)
        self.epoch_seconds = Histogram("ballast_epoch_duration_seconds",
                                       "wall time of each committed epoch, from its start to its commit "
                                       "(epoch_metrics.batch_ms); its p99 is the dashboard's latency",
                                       LABELS, buckets=EPOCH_BUCKETS, registry=r)
        self.last_epoch_seconds = Gauge("ballast_last_epoch_duration_seconds",
                                        "wall time of the last committed epoch (epoch_metrics.batch_ms)",
                                        LABELS, registry=r)
        self.last_epoch = Gauge("ballast_last_committed_epoch", "id of the last epoch this driver committed",
                                LABELS, registry=r)
        self.last_commit = Gauge("ballast_last_commit_timestamp_seconds",
                                 "Unix time the last committed epoch ended (epoch_metrics.ended_at)", LABELS,
                                 registry=r)
        self.workers = Gauge("ballast_workers", "W: workers of the routing map in force (epoch_metrics.workers)",
                             LABELS, registry=r)
        self.bins = Gauge("ballast_bins", "B: bins of the routing map in force", LABELS, registry=r)
        self.map_version = Gauge("ballast_map_version", "version of the routing map in force", LABELS, registry=r)
        self.state_bytes = Gauge("ballast_state_bytes", "state bytes over all workers after the last committed epoch",
                                 LABELS, registry=r)
        self.epochs = Counter("ballast_epochs_committed", "epochs this driver committed", LABELS, registry=r)
        self.records = Counter("ballast_input_records", "input records in the epochs this driver committed",
                               LABELS, registry=r)
        self.bins_moved = Counter("ballast_bins_moved", "bins moved by the control steps this driver applied",
                                  LABELS, registry=r)
        self.bytes_moved = Counter("ballast_moved_state_bytes", "state bytes moved with those bins", LABELS,
                                   registry=r)
        self.steps_applied = Counter("ballast_control_steps_applied", "control steps this driver applied", LABELS,
                                     registry=r)
        self.plan_step = Gauge("ballast_plan_step", "number of the last applied step of the last plan (from 1)",
                               LABELS, registry=r)
        self.plan_steps = Gauge("ballast_plan_steps", "steps of the last plan a step was applied from", LABELS,
                                registry=r)
        self.plan_progress = Gauge("ballast_plan_progress_ratio",
                                   "last plan's applied step / its steps (1: the plan's last step is applied)",
                                   LABELS, registry=r)
        self.dead_letters = Counter("ballast_dead_letters", "input records sent to <job>.dlq", LABELS, registry=r)
        self.refused = Counter("ballast_control_messages_refused",
                               "control messages refused (rejected steps, unsigned, forged, foreign, malformed)",
                               LABELS, registry=r)
        self.fenced = Counter("ballast_fencing_refusals",
                              "commits refused because a newer driver holds the operator's driver token", LABELS,
                              registry=r)
        self._last: dict[tuple[str, str], int] = {}  # (job, operator) -> last epoch counted

    def observe(self, job: str, operator: str, r: EpochReport) -> None:
        """Take a committed epoch's figures (call after its commit). A replayed or re-committed
        epoch sets the gauges again but is not counted twice."""
        lab = (job, operator)
        st = r.decision.state_after
        if r.rate is not None:
            self.input_rate.labels(*lab).set(r.rate)
        if r.backlog is not None:
            self.backlog.labels(*lab).set(r.backlog)
        self.last_epoch_seconds.labels(*lab).set(r.batch_ms / 1000)
        self.last_epoch.labels(*lab).set(r.epoch)
        self.last_commit.labels(*lab).set(r.ended_at.timestamp())
        self.workers.labels(*lab).set(st.workers)
        self.bins.labels(*lab).set(len(st.assignment))
        self.map_version.labels(*lab).set(st.map_version)
        self.state_bytes.labels(*lab).set(sum(int(w.get("state_bytes", 0)) for w in r.workers))
        # make every counter's series exist from the first epoch (a rate() over it then reads 0, not nothing)
        counters = (self.epochs, self.records, self.bins_moved, self.bytes_moved, self.steps_applied,
                    self.dead_letters, self.refused, self.fenced)
        for c in counters:
            c.labels(*lab)
        if r.epoch <= self._last.get(lab, -1):
            return
        self._last[lab] = r.epoch
        self.epoch_seconds.labels(*lab).observe(r.batch_ms / 1000)
        self.epochs.labels(*lab).inc()
        self.records.labels(*lab).inc(r.input_rows)
        self.dead_letters.labels(*lab).inc(sum(int(w.get("dead_letters", 0)) for w in r.workers))
        if r.moves:
            self.bins_moved.labels(*lab).inc(int(r.moves["bins"]))
            self.bytes_moved.labels(*lab).inc(int(r.moves["bytes"]))
        refused = sum(1 for e in r.decision.entries if e.action == "reject" or e.event)
        self.refused.labels(*lab).inc(refused)
        for e in r.decision.entries:
            if e.action == "apply":
                self.steps_applied.labels(*lab).inc()
                steps = int((e.message or {}).get("steps") or 0)
                if steps > 0:
                    self.plan_step.labels(*lab).set(e.step)
                    self.plan_steps.labels(*lab).set(steps)
                    self.plan_progress.labels(*lab).set(min(e.step / steps, 1.0))

    def note_fenced(self, job: str, operator: str) -> None:
        """A commit of this driver was refused by a newer driver's token."""
        self.fenced.labels(job, operator).inc()


class Endpoint:
    """A `JobMetrics` served over HTTP on one port of 127.0.0.1."""

    def __init__(self, port: int) -> None:
        self.metrics = JobMetrics()
        self._server: Any
        self._server, self._thread = start_http_server(port, addr=HOST, registry=self.metrics.registry)
        self.port = int(self._server.server_address[1])
        self.users = 0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


_lock = threading.Lock()
_endpoints: dict[int, Endpoint] = {}


def acquire(port: int) -> Endpoint:
    """This process's endpoint on `port`, started at its first user (0: a free port, never shared)."""
    with _lock:
        ep = _endpoints.get(port) if port else None
        if ep is None:
            ep = Endpoint(port)
            _endpoints[ep.port] = ep
            log.info("Prometheus metrics at %s", ep.url)
        ep.users += 1
        return ep


def release(ep: Endpoint) -> None:
    """One user fewer; the last one stops the server and frees the port."""
    with _lock:
        ep.users -= 1
        if ep.users <= 0:
            _endpoints.pop(ep.port, None)
            ep.close()
