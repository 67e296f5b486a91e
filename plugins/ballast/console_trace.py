"""The console's "What holds epochs back" view: the stored traces of a job's last epochs
(ballast.store.traces) turned into what the page draws — one sentence naming the bottleneck, the
critical participation (CP) of the largest activities per epoch, and the newest epoch's timeline
with its critical path marked. docs/tracing.md explains the measure.
"""

from __future__ import annotations

from typing import Any

from ballast.store import traces
from ballast.tracing import epochs_participation, per_epoch

TOP = 6  # activities named in the chart; the rest are summed as "other"


def critical_view(url: str, job: str, operator: str, last: int = 30) -> dict[str, Any]:
    """The view's data over the newest `last` stored epochs."""
    window = traces.last_epochs(url, job, operator, last)
    if window is None:
        return {"epochs": [], "names": [], "shares": {}, "timeline": [], "latest_epoch": None,
                "bottleneck": "No trace stored yet: each epoch stores its trace after its commit."}
    trace = traces.read_trace(url, job, operator, *window)
    overall = epochs_participation(trace)
    total = overall.by("label")
    names = sorted(total, key=lambda n: -total[n])[:TOP]
    parts = {e: p for e, p in per_epoch(trace).items() if e is not None}
    epochs = sorted(parts)
    series: dict[str, list[float]] = {n: [] for n in [*names, "other"]}
    lengths = []
    for e in epochs:
        s = parts[e].by("label")
        for n in names:
            series[n].append(round(s.get(n, 0.0), 4))
        series["other"].append(round(max(0.0, 1.0 - sum(s.get(n, 0.0) for n in names)), 4) if s else 0.0)
        lengths.append(round(parts[e].length_us / 1000, 1))
    latest = epochs[-1]
    crit = {e.activity: v for e, v in parts[latest].edges if e.activity is not None}
    acts = [(i, a) for i, a in enumerate(trace.activities) if a.epoch == latest]
    t0 = min(a.start_us for _, a in acts)
    # the activity index in parts[latest] is its position among the epoch's own activities
    timeline = [{"timeline": a.timeline, "kind": a.kind, "start_ms": (a.start_us - t0) / 1000,
                 "ms": (a.end_us - a.start_us) / 1000, "cp": round(crit.get(j, 0.0), 4)}
                for j, (_, a) in enumerate(acts)]
    return {"epochs": epochs, "length_ms": lengths, "names": [*names, "other"], "shares": series,
            "timeline": timeline, "latest_epoch": latest,
            "bottleneck": f"Over epochs {window[0]}–{window[1]}: {overall.bottleneck()}."}
