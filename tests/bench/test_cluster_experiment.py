"""The cluster experiment's pure parts (bench.cluster): the plan it sends, the control steps it emits
(through a stand-in emitter: the real one needs a broker), the runner's phase lines it parses, and the
files it writes when a half of the run failed (no figures, NaNs everywhere)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.ballast_job import BallastJob, JobSpec
from bench.cluster import CLUSTER_SMOKE, report_section, summarize
from bench.cluster.local import emit_step, epoch_phases, precopy_moves
from bench.cluster.writeup import write_files
from spark_jobs.epoch_times import EpochTimes

pytestmark = pytest.mark.bench


class _Sent:
    def __init__(self) -> None:
        self.steps: list = []

    def send(self, step: object) -> None:
        self.steps.append(step)


class _Job(BallastJob):
    def current_map(self) -> tuple[int, int, list[int]]:
        return 3, 2, [0, 1, 0, 1]


def test_a_single_step_plan_is_emitted_as_a_typed_control_step(tmp_path: Path) -> None:
    """The pre-copy run's steps (a warm-up no-op, then moves) reach the emitter as ControlSteps of the
    map in force (a run once failed here: the step was an untyped namespace without a split field)."""
    job = _Job(JobSpec(job="j", input_topic="t", bins=4, workers=2, db_url="sqlite://", bootstrap="127.0.0.1:1",
                       run_dir=tmp_path))
    sent = job._emitter = _Sent()
    emit_step(job, [], False, "warm")
    emit_step(job, [(1, 1, 0)], True, "move")
    noop, move = sent.steps
    assert (noop.kind, noop.moves, noop.map_version, noop.workers, noop.precopy) == ("noop", (), 3, 2, False)
    assert move.kind == "moves" and [(m.bin, m.src, m.dst) for m in move.moves] == [(1, 1, 0)] and move.precopy
    assert move.bins is None and move.settings is None


def test_precopy_moves_swap_a_fraction_of_the_bins_between_two_workers() -> None:
    assignment = [b % 2 for b in range(64)]
    moves = precopy_moves(assignment, 0.25)
    assert len(moves) == 16 and len({b for b, _, _ in moves}) == 16
    assert all(assignment[b] == src and dst == 1 - src for b, src, dst in moves)
    assert sum(1 for _, src, _ in moves if src == 0) == 8


def test_epoch_phases_reads_the_lines_the_runner_logs(tmp_path: Path) -> None:
    """The lines come from spark_jobs.epoch_times as the runner writes them (a hand-written line in
    an older format kept this test green while the experiment's phase columns were all NaN)."""
    lines = ["noise"]
    for epoch, laps in ((7, (2, 3, 40, 60, 10, 5, 30, 4)), (8, (1, 2, 30, 50, 5, 2, 25, 3))):
        now = iter([0.0, *[sum(laps[: i + 1]) / 1000 for i in range(len(laps))]])
        t = EpochTimes(clock=lambda now=now: next(now))
        for phase in ("control", "decide", "plan", "spark", "manifest", "backlog", "db", "acks"):
            t.lap(phase)
        lines.append(f"INFO ballast.runner: epoch {epoch} time ms: {t.text({'walCommit': 9.0})}")
    log = tmp_path / "job.log"
    log.write_text("\n".join(lines) + "\n")
    assert epoch_phases(log) == {7: {"apply_ms": 120.0, "db_ms": 30.0, "acks_ms": 4.0},
                                 8: {"apply_ms": 90.0, "db_ms": 25.0, "acks_ms": 3.0}}
    assert epoch_phases(tmp_path / "missing.log") == {}


def test_a_run_without_figures_still_writes_its_files(tmp_path: Path) -> None:
    summary = summarize(CLUSTER_SMOKE, {}, {})
    assert math.isnan(summary["durable_vs_local"]["batch_ms_ratio"])
    write_files(tmp_path, CLUSTER_SMOKE, {}, {}, summary)
    written = {p.name for p in tmp_path.iterdir()}
    assert {"README.md", "durable_vs_local_epochs.csv", "precopy.csv", "durable_vs_local.png"} <= written
    section = report_section(summary)
    assert section.startswith("| figure | baseline |") and "local-only" in section


def test_a_recovery_slower_than_the_observation_window_is_still_measured() -> None:
    """A loaded machine (CI, the suite beside the smoke) may finish the first batch after a kill later
    than `observe_s`: that is the recovery time, not a missing figure (CI at a65147f got None)."""
    from bench.cluster.standalone import recovery_figures

    t_kill = 100.0
    batches = [{"end": 97.0, "duration_s": 0.5}, {"end": 99.0, "duration_s": 0.5},
               {"end": t_kill + CLUSTER_SMOKE.observe_s + 3.0, "duration_s": 9.0},
               {"end": t_kill + CLUSTER_SMOKE.observe_s + 3.5, "duration_s": 0.5},
               {"end": t_kill + CLUSTER_SMOKE.observe_s + 30.0, "duration_s": 0.5}]
    r = recovery_figures(batches, t_kill, CLUSTER_SMOKE)
    assert r["recovery_s"] == pytest.approx(CLUSTER_SMOKE.observe_s + 3.0)
    assert r["first_batch_s"] == 9.0 and r["extra_s"] == pytest.approx(8.5)
    assert r["max_gap_s"] == pytest.approx(CLUSTER_SMOKE.observe_s + 4.0)
    assert r["batches_observed"] == 1  # the window ends at the first completion; later ones are not in it
    on_time = recovery_figures(batches[:2] + [{"end": 102.0, "duration_s": 1.0}], t_kill, CLUSTER_SMOKE)
    assert on_time["recovery_s"] == pytest.approx(2.0) and on_time["batches_observed"] == 1
