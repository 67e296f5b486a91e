"""The `reaction` experiment's pure parts (bench.experiments.reaction): the next cron tick, the
reaction figures from timestamps, the jobs file, and its place in summary.json and REPORT.md
(no Spark, no broker, no Airflow)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

import pytest

from bench.experiments import reaction as rx

pytestmark = pytest.mark.bench


def _t(s: str) -> float:
    return datetime.fromisoformat(s).replace(tzinfo=UTC).timestamp()


def test_next_tick_is_the_next_multiple_of_the_interval_within_the_hour() -> None:
    assert rx.next_tick(_t("2026-11-26 14:51:10"), 2) == _t("2026-11-26 14:52:00")
    assert rx.next_tick(_t("2026-11-26 14:52:00"), 2) == _t("2026-11-26 14:54:00")  # strictly after
    assert rx.next_tick(_t("2026-11-26 14:59:30"), 2) == _t("2026-11-26 15:00:00")
    assert rx.next_tick(_t("2026-11-26 14:56:59"), 7) == _t("2026-11-26 15:00:00")  # */7: 56, then 0 of next hour


def test_the_summary_gives_both_reactions_their_ratio_and_the_schedule_in_context() -> None:
    step = _t("2026-11-26 14:51:10")
    s = rx.reaction_summary(step, {"event": step + 12.0, "schedule": step + 60.0},
                            {"event": 8.0, "schedule": 10.0}, 2)
    assert s["event_s"] == 12.0 and s["schedule_s"] == 60.0 and s["event_over_schedule"] == pytest.approx(0.2)
    assert s["schedule_tick_wait_s"] == 50.0 and s["schedule_dag_run_s"] == 10.0
    assert s["schedule_expected_s"] == 70.0 and s["schedule_worst_s"] == 130.0 and s["cron"] == "*/2 * * * *"
    text = rx.readme({**s, "words": 20, "signal_epochs": 3, "base_rate": 60.0, "step_rate": 1200.0,
                      "trigger_ms": 1000, "signal_reason": "backlog_growing", "signal_after_step_s": 5.0})
    assert "**event ÷ schedule = 0.20**" in text and "50.0 s before the next tick" in text


def test_a_job_that_never_emitted_gives_nan_not_a_ratio() -> None:
    s = rx.reaction_summary(100.0, {"event": 110.0, "schedule": None}, {}, 2)
    assert s["event_s"] == 10.0 and math.isnan(s["schedule_s"]) and math.isnan(s["event_over_schedule"])
    assert "event ÷ schedule = n/a" in rx.readme({**s, "words": 1, "signal_epochs": 3, "base_rate": 1.0,
                                                   "step_rate": 2.0, "trigger_ms": 500})


def test_the_jobs_file_schedules_rebalance_only_and_validates() -> None:
    from ballast.config import JobConfig

    entry = {"job": "a", "operator": "wordcount", "input_topic": "t", "bins": 16, "initial_workers": 1,
             "min_workers": 1, "max_workers": 2, "rebalance": {"signal_epochs": 0}}
    doc = rx.jobs_doc({"schedule": entry}, "*/2 * * * *")
    assert doc["schedules"] == {"supervise": None, "rebalance": "*/2 * * * *"} and doc["jobs"] == [entry]
    assert JobConfig.model_validate(entry).rebalance.signal_epochs == 0


def test_the_run_registers_reaction_as_optional_and_reports_it(tmp_path) -> None:
    from bench import run
    from bench.experiments import SMOKE, Ctx

    assert "reaction" in run.OPTIONAL and "reaction" not in run.ORDER  # only when named in --only
    s = {**rx.reaction_summary(100.0, {"event": 110.0, "schedule": 150.0}, {"schedule": 9.0}, 2),
         "words": 20, "signal_epochs": 3, "base_rate": 60.0, "step_rate": 1200.0, "trigger_ms": 1000}
    machine = {"cores": 2, "ram_gb": 8, "cpu_model": "cpu", "python": "3.11", "spark": "4", "java": "21",
               "loadavg_at_start": [0.5, 0.5, 0.5], "commit_at_start": "abc"}
    ctx = Ctx(run_id="r1", run_dir=tmp_path / "r1", bootstrap="", db_url="", profile=SMOKE)
    summary = run.build_summary(ctx, {"reaction": {"summary": s}}, {}, time.time(), machine)
    assert summary["reaction"]["event_over_schedule"] == pytest.approx(0.2)
    ctx.run_dir.mkdir()
    assert "## 10. Reaction to a load step" in run.write_report(ctx.run_dir, summary).read_text()
