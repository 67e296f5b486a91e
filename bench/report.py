"""Writers: CSV tables, PNG plots (matplotlib, Agg), Markdown summaries and summary.json."""

from __future__ import annotations

import csv
import functools
import json
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.hist import LogHistogram, TimelineRow  # noqa: E402

#: pyplot keeps its figures in one process-wide registry, not safe across threads; a smoke run's lanes
#: (bench.run.LANES) plot from two threads, so every figure is drawn and saved under this lock
PLOT_LOCK = threading.RLock()


def locked(fn: Callable[..., Path]) -> Callable[..., Path]:
    """`fn` draws and saves a figure under PLOT_LOCK."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Path:
        with PLOT_LOCK:
            return fn(*args, **kwargs)
    return run


def write_csv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = list(columns or (rows[0].keys() if rows else []))
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _fmt(r.get(k)) for k in cols})
    return path


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return "" if math.isnan(v) else round(v, 3)
    return v


def clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf → None, numpy scalars → Python, tuples → lists."""
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            obj = obj.item()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, float):
        return None if (math.isnan(obj) or math.isinf(obj)) else obj
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def write_json(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(clean(doc), indent=2, sort_keys=True))
    return path


def timeline_rows(rows: Iterable[TimelineRow], label: str) -> list[dict[str, Any]]:
    return [{"series": label, "t_s": r.t_s, "count": r.count, "throughput_per_s": r.throughput,
             "p50_ms": r.p50_ms, "p99_ms": r.p99_ms, "max_ms": r.max_ms} for r in rows]


def _save(fig: Any, path: Path) -> Path:
    """Lay out, write (110 dpi) and free a figure; every plot ends here."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _finish_log_axes(ax: Any, title: str) -> None:
    """Title, log-scale grid and a legend when anything is labelled (the CCDF and scatter plots)."""
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


@locked
def plot_timelines(path: Path, series: dict[str, tuple[list[TimelineRow], list[tuple[float, float]]]],
                   title: str, span_label: str = "migration") -> Path:
    """One panel per series: max and p99 latency per 250 ms window (log y), throughput on a twin
    axis, the actions' spans shaded (`span_label`: what they are). `series[label] = (rows, [(start_s, end_s), ...])`."""
    n = max(1, len(series))
    fig, axes = plt.subplots(n, 1, figsize=(10, 2.6 * n), squeeze=False)
    for ax, (label, (rows, spans)) in zip(axes[:, 0], series.items()):
        t = [r.t_s for r in rows]
        nz = [r for r in rows if r.count]  # a micro-batch answers in bursts: connect the non-empty windows
        ax.semilogy([r.t_s for r in nz], [r.max_ms for r in nz], ".-", ms=3, lw=0.9, label="max")
        ax.semilogy([r.t_s for r in nz], [r.p99_ms for r in nz], ".-", ms=2, lw=0.7, label="p99")
        for i, (s, e) in enumerate(spans):
            ax.axvspan(s, e, color="orange", alpha=0.25, label=span_label if i == 0 else None)
            ax.axvline(s, color="orange", lw=0.8)
            ax.axvline(e, color="red", lw=0.8, ls="--")
        ax.set_ylabel("latency ms")
        ax.set_title(label, fontsize=9)
        ax2 = ax.twinx()
        ax2.plot(t, [r.throughput for r in rows], color="grey", lw=0.5, alpha=0.6)
        ax2.set_ylabel("answered/s", color="grey", fontsize=8)
        ax.legend(loc="upper left", fontsize=7)
    axes[-1, 0].set_xlabel("time (s)")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


@locked
def plot_cdf(path: Path, hists: dict[str, LogHistogram], title: str) -> Path:
    """Complementary CDF (Megaphone's presentation) of latency per series."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, h in hists.items():
        x, y = h.cdf()
        if x.size:
            ax.loglog(x, [max(1 - v, 1e-7) for v in y], drawstyle="steps-post", label=label)
    ax.set_xlabel("latency ms")
    ax.set_ylabel("fraction of records with latency > x")
    _finish_log_axes(ax, title)
    return _save(fig, path)


@locked
def plot_bars(path: Path, labels: list[str], panels: dict[str, list[float]], title: str,
              colors: list[str] | None = None) -> Path:
    """One panel of bars per entry of `panels`; `colors`: one per label (default: a fixed cycle)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4), squeeze=False)
    for ax, (name, vals) in zip(axes[0], panels.items()):
        ax.bar(labels, [0 if (v is None or (isinstance(v, float) and math.isnan(v))) else v for v in vals],
               color=colors or ["C3", "C0", "C2", "C1", "C4", "C5"][: len(labels)])
        ax.set_title(name, fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


@locked
def plot_scatter(path: Path, points: dict[str, list[tuple[float, float, str]]], title: str,
                 xlabel: str = "migration duration s", ylabel: str = "max latency ms") -> Path:
    """Megaphone fig. 16: one line per strategy, one point per configuration (annotated)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, pts in points.items():
        pts = [p for p in pts if p[0] == p[0] and p[1] == p[1]]
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        for x, y, note in pts:
            ax.annotate(note, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _finish_log_axes(ax, title)
    return _save(fig, path)


@locked
def plot_series(path: Path, series: dict[str, tuple[list[float], list[float]]], title: str, ylabel: str,
                marks: list[tuple[float, str]] | None = None,
                twin: dict[str, tuple[list[float], list[float]]] | None = None,
                twin_label: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(10, 3.6))
    for label, (x, y) in series.items():
        ax.plot(x, y, label=label, lw=1)
    for t, note in marks or []:
        ax.axvline(t, color="grey", ls=":", lw=0.8)
        ax.annotate(note, (t, ax.get_ylim()[1]), fontsize=6, rotation=90, va="top")
    ax.set_ylabel(ylabel)
    ax.set_xlabel("time (s)")
    if twin:
        ax2 = ax.twinx()
        for label, (x, y) in twin.items():
            ax2.step(x, y, where="post", label=label, color="C3", lw=1.2)
        ax2.set_ylabel(twin_label)
        ax2.legend(loc="upper right", fontsize=7)
    ax.legend(loc="upper left", fontsize=7)
    ax.set_title(title, fontsize=10)
    return _save(fig, path)


def md_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    def f(v: Any) -> str:
        if v is None:
            return "–"
        if isinstance(v, float):
            if math.isnan(v):
                return "–"
            return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
        return str(v)

    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(f(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(out)


@locked
def plot_stacked(path: Path, parts: dict[str, dict[str, float]], title: str) -> Path:
    """One stacked bar per series (e.g. a system and trigger): its named parts (NaN counts as 0)."""
    names = sorted({k for d in parts.values() for k in d if k != "batch_ms"})
    fig, ax = plt.subplots(figsize=(8, 4))
    bottom = [0.0] * len(parts)
    for i, name in enumerate(names):
        vals = [float(d.get(name) or 0.0) if d.get(name) == d.get(name) else 0.0 for d in parts.values()]
        ax.bar(list(parts), vals, bottom=bottom, label=name, color=f"C{i % 10}")
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("ms")
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=10)
    return _save(fig, path)
