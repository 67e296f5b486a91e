"""The driver's Prometheus endpoint (spark_jobs.prom_metrics), without Spark: names, values from an
EpochReport, counting once, loopback only, sharing and freeing the port, and no wait on a scraper."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spark_jobs import prom_metrics
from spark_jobs.control_state import Entry, EpochControl, initial_state
from spark_jobs.epoch_commit import EpochReport

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

#: the names docs/operations.md lists (a renamed metric must fail here and in the docs' test)
EXPOSED = {
    "ballast_input_rate_records_per_second", "ballast_backlog_records", "ballast_epoch_duration_seconds",
    "ballast_last_epoch_duration_seconds", "ballast_last_committed_epoch", "ballast_last_commit_timestamp_seconds",
    "ballast_workers", "ballast_bins", "ballast_map_version", "ballast_state_bytes",
    "ballast_epochs_committed_total", "ballast_input_records_total", "ballast_bins_moved_total",
    "ballast_moved_state_bytes_total", "ballast_control_steps_applied_total", "ballast_plan_step",
    "ballast_plan_steps", "ballast_plan_progress_ratio", "ballast_dead_letters_total",
    "ballast_control_messages_refused_total", "ballast_fencing_refusals_total",
}


def entry(action: str, step: int = 1, steps: int = 4, event: bool = False) -> Entry:
    return Entry(seq=0, action=action, plan_id="p1", step=step, reason="", offset="0:1", job="j", operator="keycount",
                 checkpoint=not event, event=event, message={"steps": steps})


def report(epoch: int, *, workers: int = 2, entries: tuple[Entry, ...] = (), moves: dict[str, Any] | None = None,
           backlog: int | None = 1234, rate: float | None = 5000.0, batch_ms: float = 750.0,
           dead: int = 3) -> EpochReport:
    st = initial_state(16, workers)
    st.map_version = epoch // 2
    d = EpochControl(epoch=epoch, decided_at=T0.isoformat(), entries=list(entries), state_after=st,
                     map_version_before=0, workers_before=workers)
    docs = [{"worker": w, "state_bytes": 100 * (w + 1), "dead_letters": dead if w == 0 else 0}
            for w in range(workers)]
    return EpochReport(epoch=epoch, decision=d, moves=moves, workers=docs, started_at=T0,
                       ended_at=T0 + timedelta(seconds=epoch), batch_ms=batch_ms, input_rows=1000, control_rows=0,
                       backlog=backlog, rate=rate, end_offsets={})


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by name and sorted labels."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    want = {"job": "j", "operator": "keycount", **labels}
    return samples(text)[(name, tuple(sorted(want.items())))]


def scrape(ep: prom_metrics.Endpoint) -> str:
    with urllib.request.urlopen(ep.url, timeout=10) as resp:
        return resp.read().decode()


@pytest.fixture
def endpoint() -> Any:
    ep = prom_metrics.acquire(0)
    yield ep
    prom_metrics.release(ep)


def test_committed_epoch_is_served_with_prometheus_names(endpoint: prom_metrics.Endpoint) -> None:
    m = endpoint.metrics
    m.observe("j", "keycount", report(7, entries=(entry("apply", step=2, steps=4), entry("reject", step=3),
                                                   entry("queue"), entry("ignored", event=True)),
                                      moves={"bins": 5, "bytes": 4096}))
    text = scrape(endpoint)
    names = {n for n, _ in samples(text)}
    for name in EXPOSED:
        base = name.removesuffix("_total")
        assert name in names or f"{base}_count" in names, name
    assert value(text, "ballast_backlog_records") == 1234
    assert value(text, "ballast_input_rate_records_per_second") == 5000.0
    assert value(text, "ballast_workers") == 2 and value(text, "ballast_bins") == 16
    assert value(text, "ballast_last_committed_epoch") == 7 and value(text, "ballast_map_version") == 3
    assert value(text, "ballast_last_epoch_duration_seconds") == 0.75
    assert value(text, "ballast_epoch_duration_seconds_bucket", le="0.75") == 1
    assert value(text, "ballast_epoch_duration_seconds_bucket", le="0.5") == 0
    assert value(text, "ballast_last_commit_timestamp_seconds") == (T0 + timedelta(seconds=7)).timestamp()
    assert value(text, "ballast_state_bytes") == 300
    assert value(text, "ballast_bins_moved_total") == 5 and value(text, "ballast_moved_state_bytes_total") == 4096
    assert value(text, "ballast_plan_step") == 2 and value(text, "ballast_plan_steps") == 4
    assert value(text, "ballast_plan_progress_ratio") == 0.5
    assert value(text, "ballast_control_steps_applied_total") == 1
    assert value(text, "ballast_control_messages_refused_total") == 2  # the rejected step and the refused message
    assert value(text, "ballast_dead_letters_total") == 3
    assert value(text, "ballast_input_records_total") == 1000
    assert value(text, "ballast_fencing_refusals_total") == 0  # exists from the first epoch
    m.note_fenced("j", "keycount")
    assert value(scrape(endpoint), "ballast_fencing_refusals_total") == 1
    # every series carries job and operator, and nothing of prometheus_client's global registry is served
    for fam in text_string_to_metric_families(text):
        assert fam.name.startswith("ballast_"), fam.name
        for s in fam.samples:
            assert {"job", "operator"} <= set(s.labels), s


def test_a_replayed_epoch_is_not_counted_twice(endpoint: prom_metrics.Endpoint) -> None:
    m = endpoint.metrics
    r = report(4, moves={"bins": 2, "bytes": 10})
    m.observe("j", "keycount", r)
    m.observe("j", "keycount", r)  # Spark ran the batch again, the commit rewrote the same rows
    m.observe("j", "keycount", report(5, backlog=7))
    text = scrape(endpoint)
    assert value(text, "ballast_epochs_committed_total") == 2
    assert value(text, "ballast_bins_moved_total") == 2 and value(text, "ballast_dead_letters_total") == 6
    assert value(text, "ballast_epoch_duration_seconds_count") == 2
    assert value(text, "ballast_backlog_records") == 7


def test_operators_of_one_driver_share_the_port_and_the_last_release_frees_it() -> None:
    port = prom_metrics.acquire(0).port
    prom_metrics.release(prom_metrics._endpoints[port])
    a = prom_metrics.acquire(port)
    b = prom_metrics.acquire(port)  # a chain's second operator
    assert a is b and a.port == port
    a.metrics.observe("j", "first", report(1))
    b.metrics.observe("j", "second", report(1, workers=3))
    text = scrape(a)
    assert value(text, "ballast_workers", operator="first") == 2
    assert value(text, "ballast_workers", operator="second") == 3
    prom_metrics.release(a)
    scrape(b)  # still served for the other operator
    prom_metrics.release(b)
    with socket.socket() as s:  # the port is free again (as a server binds it: closed scrapes may linger in TIME_WAIT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


def test_binds_loopback_only(endpoint: prom_metrics.Endpoint) -> None:
    assert endpoint._server.server_address[0] == "127.0.0.1"
    other = [a for a in {i[4][0] for i in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
             if not a.startswith("127.")]
    for addr in other:  # the host's own addresses do not answer
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(2)
            s.connect((addr, endpoint.port))


def test_observe_is_cheap_and_does_not_wait_for_a_scraper(endpoint: prom_metrics.Endpoint) -> None:
    """An epoch pays microseconds, and a scraper that connects and sends nothing holds nothing back."""
    stuck = socket.create_connection(("127.0.0.1", endpoint.port))  # a scraper that never sends its request
    scrapes = threading.Thread(target=lambda: [scrape(endpoint) for _ in range(50)], daemon=True)
    scrapes.start()
    r = report(1, entries=(entry("apply"),), moves={"bins": 1, "bytes": 1})
    t0 = time.perf_counter()
    for i in range(2000):
        endpoint.metrics.observe("j", "keycount", report(i + 1) if i % 100 == 0 else r)
    per_epoch_ms = (time.perf_counter() - t0) * 1000 / 2000
    scrapes.join(timeout=30)
    stuck.close()
    assert per_epoch_ms < 2.0, f"observe took {per_epoch_ms:.3f} ms per epoch"


def test_off_by_default() -> None:
    from spark_jobs.cli import config_from_args, parser

    a = parser().parse_args(["run", "--job", "j", "--input-topic", "t", "--checkpoint-dir", "/tmp/x",
                             "--db-url", "sqlite://"])
    assert config_from_args(a).metrics_port is None
    a = parser().parse_args(["run", "--job", "j", "--input-topic", "t", "--checkpoint-dir", "/tmp/x",
                             "--db-url", "sqlite://", "--metrics-port", "9464"])
    assert config_from_args(a).metrics_port == 9464


def test_jobs_file_key_reaches_the_command_line() -> None:
    from ballast.config import JobConfig
    from ballast.supervisor import data_plane_args

    off = JobConfig(job="j", operator="keycount", input_topic="t")
    assert "--metrics-port" not in data_plane_args(off, "b:9092")
    on = JobConfig(job="j", operator="keycount", input_topic="t", metrics_port=9464)
    args = data_plane_args(on, "b:9092")
    assert args[args.index("--metrics-port") + 1] == "9464"


def _served_names() -> set[str]:
    """Every metric family name the endpoint serves (counters with `_total`), after one epoch."""
    m = prom_metrics.JobMetrics()
    m.observe("j", "keycount", report(1, entries=(entry("apply"),), moves={"bins": 1, "bytes": 1}))
    from prometheus_client import generate_latest

    out = set()
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        if not fam.name.endswith("_created"):  # prometheus_client's start time of each counter and histogram
            out.add(f"{fam.name}_total" if fam.type == "counter" else fam.name)
    return out


def test_operations_doc_lists_exactly_the_served_metrics() -> None:
    import re

    from ballast.options import REPO

    text = (REPO / "docs/operations.md").read_text()
    section = text[text.index("## Prometheus metrics"):]
    section = section[:section.index("\n## ", 1)]
    documented = set(re.findall(r"^\| `(ballast_[a-z_]+)` \|", section, re.M))
    assert documented == _served_names() == EXPOSED
    assert "honor_labels: true" in section and "127.0.0.1" in section
    assert (REPO / "docs/img/prometheus-backlog-migration.png").is_file()


def test_grafana_dashboard_queries_only_served_metrics() -> None:
    import json
    import re

    from ballast.options import REPO

    dash = json.loads((REPO / "docs/grafana/ballast-jobs.json").read_text())
    served = _served_names()
    series = served | {f"{n}_bucket" for n in served} | {f"{n}_count" for n in served} | {f"{n}_sum" for n in served}
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {n for e in exprs for n in re.findall(r"\b(ballast_[a-z_]+)", e)}
    assert used <= series, used - series
    # every figure the issue asks for has a panel
    for name in ("ballast_input_rate_records_per_second", "ballast_backlog_records",
                 "ballast_last_epoch_duration_seconds",
                 "ballast_epoch_duration_seconds_bucket", "ballast_workers", "ballast_bins_moved_total",
                 "ballast_plan_progress_ratio", "ballast_dead_letters_total", "ballast_fencing_refusals_total"):
        assert name in used, name
    assert all('job=~"$job"' in e and 'operator=~"$operator"' in e for e in exprs)
    assert [v["name"] for v in dash["templating"]["list"]] == ["datasource", "job", "operator"]
