"""What held a benchmark job's epochs back: the critical participation (docs/tracing.md) of the
epochs a job stored a trace for, per activity, read from a run's metrics DB.

A job stores one trace per epoch that read input, so for the NEXMark cost jobs (which read a
backlog and stop) this is the CP of their data epochs. Beside each activity's share, its critical
milliseconds per epoch (share × the epochs' critical path ÷ epochs): two runs of the same query at
the same batch size compare in those, where a share alone can move because another activity did.

    python -m bench.cp_summary bench/results/RUN_A [bench/results/RUN_B ...] [--top 4] [--match nxc-]

prints a markdown table, one row per run, job and operator (the job's name without the run's
`bench-<run id>-` prefix, so that two runs line up). `bench.experiments.nexmark` keeps the same
figures per query in summary.json (`nexmark.cost.<q>.critical_path`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ballast.store.traces import read_trace, traced_operators
from ballast.tracing import epochs_participation
from bench.experiments.common import job_name


def job_cp(url: str, job: str, operator: str, top: int = 4) -> dict[str, Any]:
    """The CP of every stored epoch of one job's operator: epochs, critical ms per epoch, the
    `top` activities by share (share and ms per epoch) and the one-sentence bottleneck."""
    trace = read_trace(url, job, operator)
    epochs = len({a.epoch for a in trace.activities})
    if not epochs:
        return {"epochs": 0, "critical_ms_per_epoch": None, "top": [], "bottleneck": "no trace stored"}
    cp = epochs_participation(trace)
    per_epoch = cp.length_us / 1000 / epochs
    return {"epochs": epochs, "critical_ms_per_epoch": per_epoch,
            "top": [{"activity": k, "share": v, "ms_per_epoch": v * per_epoch}
                    for k, v in list(cp.by("label").items())[:top]],
            "bottleneck": cp.bottleneck()}


def brief(cp: dict[str, Any]) -> str:
    """`source stage 78% (1 590 ms), plan on driver 9% (180 ms)`: one cell of a report table."""
    return ", ".join(f"{t['activity']} {t['share']:.0%} ({t['ms_per_epoch']:_.0f} ms)".replace("_", " ")
                     for t in cp["top"]) or cp["bottleneck"]


def _url(run_dir: Path) -> str:
    """A bench run's metrics DB (bench/run.py makes one SQLite file per run)."""
    db = run_dir / "metrics.db"
    if not db.exists():
        raise SystemExit(f"{run_dir} has no metrics.db: is it a bench run directory (bench/results/<run id>)?")
    return f"sqlite:///{db}"


def rows(run_dirs: list[Path], top: int, match: str) -> list[dict[str, Any]]:
    """One row per run, job and operator; a job's rows in the order of `run_dirs` (a stable sort)."""
    out = []
    for d in run_dirs:
        url, prefix = _url(d), job_name(d.name.replace("_", "-").lower(), "")
        for job, op in traced_operators(url):
            short = job.removeprefix(prefix)
            if match not in short:
                continue
            cp = job_cp(url, job, op, top)
            out.append({"run": d.name, "job": short, "operator": op.rsplit(".", 1)[-1], "epochs": cp["epochs"],
                        "critical ms/epoch": cp["critical_ms_per_epoch"], "critical path": brief(cp)})
    return sorted(out, key=lambda r: (r["job"], r["operator"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cp_summary", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="bench run directories (bench/results/<run id>)")
    ap.add_argument("--top", type=int, default=4, help="activities per job (default 4)")
    ap.add_argument("--match", default="", help="only jobs whose short name contains this (e.g. nxc-)")
    ap.add_argument("--json", action="store_true", help="the rows as JSON instead of a markdown table")
    a = ap.parse_args(argv)
    got = rows(a.runs, a.top, a.match)
    if a.json:
        print(json.dumps(got, indent=1))
        return 0
    from bench.report import md_table

    print(md_table(got, ["job", "operator", "run", "epochs", "critical ms/epoch", "critical path"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
