"""bench.cp_summary: a run's stored epoch traces read back as each job's critical participation,
with critical milliseconds per epoch, for a trace whose critical path is known (on a real SQLite
metrics DB, migrated like a bench run's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ballast.store import traces, writer
from ballast.tracing import Activity, Message, Trace
from bench import cp_summary
from migrations_db.db import migrate

pytestmark = pytest.mark.bench


def _epoch(t0: int, slow_fold: int) -> Trace:
    """plan 10 µs, the source stage 2, worker 1's fold `slow_fold` (worker 0's 28 is shorter), job end
    8: the critical path is plan → source stage → fold on worker 1 → job end."""
    return Trace((Activity("driver", "plan", t0, t0 + 10), Activity("worker 0", "fold", t0 + 12, t0 + 40),
                  Activity("worker 1", "fold", t0 + 12, t0 + 12 + slow_fold),
                  Activity("driver", "job end", t0 + 12 + slow_fold, t0 + 20 + slow_fold)),
                 (Message(0, 1, "source stage"), Message(0, 2, "source stage"), Message(2, 3, "task end")))


def _run(tmp_path: Path, run_id: str, slow_fold: int) -> Path:
    d = tmp_path / run_id
    d.mkdir()
    url = f"sqlite:///{d / 'metrics.db'}"
    migrate(url)
    for job in (f"bench-{run_id}-nxc-q7", f"bench-{run_id}-other"):
        for e in range(1, 4):
            with writer.epoch_transaction(url) as s:
                traces.replace_trace(s, traces.trace_row(job, "spark_jobs.nexmark.windows:Q7", e,
                                                         _epoch(e * 1_000_000, slow_fold)))
    return d


def test_the_known_critical_path_with_its_ms_per_epoch(tmp_path):
    d = _run(tmp_path, "r1", 88_000)
    cp = cp_summary.job_cp(f"sqlite:///{d / 'metrics.db'}", "bench-r1-nxc-q7", "spark_jobs.nexmark.windows:Q7")
    L = 10 + 2 + 88_000 + 8  # µs per epoch
    assert cp["epochs"] == 3 and cp["critical_ms_per_epoch"] == pytest.approx(L / 1000)
    top = cp["top"][0]
    assert top["activity"] == "fold on worker 1" and top["share"] == pytest.approx(88_000 / L)
    assert top["ms_per_epoch"] == pytest.approx(88.0)
    assert "worker 0" not in {t["activity"] for t in cp["top"]}  # never on the critical path
    assert cp_summary.brief(cp).startswith("fold on worker 1 100% (88 ms), plan on driver 0% (0 ms)")


def test_two_runs_line_up_by_the_job_without_its_run_prefix(tmp_path, capsys):
    a, b = _run(tmp_path, "before-1", 88_000), _run(tmp_path, "after-1", 20_000)
    assert cp_summary.main([str(a), str(b), "--match", "nxc-", "--top", "2"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| nxc-q7")]
    assert [x.split(" | ")[2] for x in lines] == ["before-1", "after-1"]  # one job, the runs in the order given
    assert "(88 ms)" in lines[0] and "(20 ms)" in lines[1]


def test_a_run_without_metrics_db_is_told_what_is_expected(tmp_path):
    with pytest.raises(SystemExit, match="has no metrics.db"):
        cp_summary.main([str(tmp_path)])
