"""What the fault tests share: a stored batched plan driven by the real controller in
a thread, the end-of-run oracle (state and outputs exactly once, steps applied once each)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from ballast import store
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.offsets import committed_epochs
from spark_jobs.output import read_output
from tests.helpers.dp_helpers import (
    check_migration_property,
    check_state,
    checkpoints,
    outputs_as_set,
    read_output_bounded,
    reference_by_epoch,
    steps_from_maps,
)


def store_plan(db_url: str, job: str, bins: int, maps: list[tuple[int, list[int]]], plan_id: str) -> None:
    """A batched plan (one step per map of `maps`) as the controller would store it."""
    steps = steps_from_maps(job, "keycount", plan_id, bins, maps)
    now = datetime.now(UTC)
    w, target = maps[-1]
    store.save_plan(db_url, store.PlanRecord(
        plan_id=plan_id, job=job, operator="keycount", created_at=now, strategy="batched", status="planned",
        source_map_version=0, source_workers=2, target_workers=w, target_assignment=tuple(target), steps=len(steps),
        params={"emit_mode": "flow-control", "gap_seconds": 0}, predicted_ms=None, reason="fault test",
        finished_at=None), [store.StepRecord(plan_id, s.step, s.to_dict(), s.effective_at, None, None, None, None)
                            for s in steps])


class ControllerThread(threading.Thread):
    """controller.run_plan_blocking in the background: emit with flow control, await, verify."""

    def __init__(self, db_url: str, bootstrap: str, plan_id: str, timeout_s: float) -> None:
        super().__init__(name=f"controller-{plan_id}", daemon=True)
        self.args = (db_url, bootstrap, plan_id, timeout_s)
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.db_outages = 0

    def run(self) -> None:
        from ballast.controller import run_plan_blocking

        def outage(_exc: BaseException) -> None:
            self.db_outages += 1

        db_url, bootstrap, plan_id, timeout_s = self.args
        try:
            self.result = run_plan_blocking(db_url, bootstrap, plan_id, timeout_s, poll_s=0.5, on_db_outage=outage)
        except BaseException as exc:  # reported to the test
            self.error = exc


def step_decisions(db_url: str, job: str, action: str) -> list[m.StepDecision]:
    with session_scope(db_url) as s:
        return list(s.scalars(select(m.StepDecision).where(m.StepDecision.job == job, m.StepDecision.action == action)))


def check_exactly_once(db_url: str, bootstrap: str, job: str, topic: str, ckpt_dir: str, state_uri: str,
                       final_workers: int, final_map: list[int], bins: int, n_records: int, plan_id: str,
                       n_steps: int) -> dict[str, int]:
    """Nothing lost or doubled: every step applied once, state and deduplicated outputs equal the
    reference cut at the job's own epochs (read by a consumer that remembers only the last three
    epochs' ids too), the migration property holds."""
    cps = checkpoints(db_url, job)
    assert sorted(cps) == [(plan_id, s) for s in range(1, n_steps + 1)], sorted(cps)
    assert all(c.status == "applied" for c in cps.values()), {k: (c.status, c.reason) for k, c in cps.items()}
    applies = step_decisions(db_url, job, "apply")
    assert sorted((d.plan_id, d.step) for d in applies) == sorted(cps), "each step decided 'apply' exactly once"
    check_migration_property(db_url, job)
    spark_ckpt = f"{ckpt_dir}/spark"
    epochs = committed_epochs(spark_ckpt)
    ref_counts, ref_outputs = reference_by_epoch(bootstrap, topic, spark_ckpt, epochs)  # type: ignore[arg-type]
    assert sum(ref_counts.values()) == n_records
    outs, dups = read_output(bootstrap, f"{job}.output")
    got = outputs_as_set(outs)
    assert got == ref_outputs, f"{len(got - ref_outputs)} unexpected, {len(ref_outputs - got)} missing outputs"
    assert read_output_bounded(bootstrap, f"{job}.output") == outs, "a consumer remembering 3 epochs kept a duplicate"
    check_state(state_uri, final_workers, final_map, bins, ref_counts)
    return {"epochs": len(epochs), "outputs": len(outs), "duplicates_dropped": dups}


def alive_check(runner: Any) -> Callable[[], None]:
    def check() -> None:
        exc = runner.query.exception()
        assert exc is None and runner.query.isActive, f"the job stopped: {exc}"

    return check


def migrate_through_outage(runner: Any, cfg: Any, db_url: str, bootstrap: str, plan_id: str, n_records: int,
                           stop: Callable[[], None], start: Callable[[], None], outage_s: float,
                           plan_timeout_s: float = 420) -> dict[str, Any]:
    """Drive `plan_id` with the real controller; once two steps are applied, stop a component for
    `outage_s` (the job must stay up), start it again; then the plan must end applied and the input
    be consumed. Returns the controller thread, the epochs committed during the outage and the
    seconds from the restart until all was done."""
    import time

    from spark_jobs.offsets import committed_epochs

    ckpt = cfg.checkpoint_dir + "/spark"
    ctl = _controller_past_two_steps(runner, cfg, db_url, bootstrap, plan_id, plan_timeout_s)
    stop()
    t_down, at_stop = time.time(), len(committed_epochs(ckpt))
    while time.time() - t_down < outage_s:
        alive_check(runner)()
        time.sleep(1)
    during = len(committed_epochs(ckpt)) - at_stop
    start()
    t_up = time.time()
    _controller_ended_and_input_consumed(runner, ctl, cfg, db_url, n_records, plan_timeout_s, "all input consumed")
    if ctl.error is not None:
        raise AssertionError(f"the plan failed (clearly, with a reason) instead of completing: {ctl.error!r}")
    return {"controller": ctl, "epochs_during_outage": during, "recovered_s": time.time() - t_up}


def _controller_past_two_steps(runner: Any, cfg: Any, db_url: str, bootstrap: str, plan_id: str,
                               plan_timeout_s: float) -> ControllerThread:
    """The real controller driving `plan_id`, started once the job committed its first epoch;
    returns when two of its steps are applied (the moment the fault tests break something)."""
    from spark_jobs.offsets import committed_epochs
    from tests.helpers.wait import wait_until

    ckpt = cfg.checkpoint_dir + "/spark"
    ctl = ControllerThread(db_url, bootstrap, plan_id, timeout_s=plan_timeout_s)
    wait_until(lambda: committed_epochs(ckpt), 120, "first epoch", check=alive_check(runner))
    ctl.start()
    wait_until(lambda: len(checkpoints(db_url, cfg.job)) >= 2, 300, "two steps applied", check=alive_check(runner))
    return ctl


def _controller_ended_and_input_consumed(runner: Any, ctl: ControllerThread, cfg: Any, db_url: str, n_records: int,
                                         plan_timeout_s: float, what: str) -> None:
    """Wait (the job staying up) until the controller thread has ended and the job's last
    committed epoch reaches the end of its `n_records` input records."""
    import time

    from spark_jobs.offsets import committed_epochs, read_end_offsets
    from tests.helpers.wait import wait_until

    ckpt = cfg.checkpoint_dir + "/spark"
    t_up = time.time()
    while ctl.is_alive() and time.time() - t_up < plan_timeout_s + 60:
        alive_check(runner)()
        ctl.join(timeout=2)
    assert not ctl.is_alive(), (f"the controller did not finish; job at epoch {runner.last_epoch}, "
                                f"checkpoints {sorted(checkpoints(db_url, cfg.job))}")
    wait_until(lambda: (e := committed_epochs(ckpt))
               and sum(read_end_offsets(ckpt, e[-1]).get(cfg.input_topic, {}).values()) == n_records,
               600, what, check=alive_check(runner))


def planned_job(bootstrap: str, db_url: str, job: str, ckpt_dir: str, bins: int, n_records: int, seed: int,
                plan_id: str) -> tuple[Any, list[tuple[int, list[int]]]]:
    """Input of `n_records` on `<job>.in`, the job's topics, an 8-step batched plan stored for the
    controller (W 2 -> 3 -> 2), and the job's config (small batches, so the plan spans many epochs)."""
    import ballast_stack as stack  # loaded by tests/conftest.py (scripts/stack.py)

    from spark_jobs.runner import RunConfig, ensure_job_topics
    from tests.helpers.dp_helpers import plan_maps, produce, zipf_keys

    topic = f"{job}.in"
    stack.ensure_topics({topic: 2}, bootstrap)
    produce(bootstrap, topic, zipf_keys(n_records, 3_000, seed=seed), 2)
    ensure_job_topics(bootstrap, job, 2)
    maps = plan_maps(bins)
    store_plan(db_url, job, bins, maps, plan_id)
    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=ckpt_dir, bootstrap=bootstrap, db_url=db_url,
                    bins=bins, workers=2, trigger_ms=200, max_offsets_per_trigger=600)
    return cfg, maps


def fail_past_budget_then_restart(spark: Any, runner: Any, cfg: Any, db_url: str, bootstrap: str, plan_id: str,
                                  n_records: int, stop: Callable[[], None], start: Callable[[], None],
                                  fail_within_s: float = 300, plan_timeout_s: float = 600) -> dict[str, Any]:
    """Drive `plan_id` with the real controller; once two steps are applied, stop a component and
    keep it down until the job's query fails (its outage budget spent); start it again, see the
    failure surface as the CLI's exit-1 error (a RuntimeError, not `Fenced`), restart the job from
    its checkpoint and run until the controller has ended and the input is consumed. Returns the
    controller thread and how long the query took to fail."""
    import time

    from ballast.store.fencing import Fenced
    from spark_jobs.runner import start_job
    from tests.helpers.wait import wait_until

    ctl = _controller_past_two_steps(runner, cfg, db_url, bootstrap, plan_id, plan_timeout_s)
    t_down = time.time()  # the outage starts as the stop starts: clients lose the component before stop() returns
    stop()
    try:
        wait_until(lambda: not runner.query.isActive, fail_within_s, "the query to fail past its outage budget")
        failed_after = time.time() - t_down
    finally:
        start()
    try:
        runner.await_termination()
    except Exception as exc:  # what spark_jobs.cli.run turns into exit code 1
        error: Exception | None = exc
    else:
        error = None
    finally:
        runner.stop()
    assert isinstance(error, RuntimeError) and not isinstance(error, Fenced), f"not the CLI's exit 1: {error!r}"
    runner = start_job(spark, cfg)
    try:
        _controller_ended_and_input_consumed(runner, ctl, cfg, db_url, n_records, plan_timeout_s,
                                             "all input consumed after the restart")
    finally:
        runner.stop()
    return {"controller": ctl, "failed_after_s": failed_after, "error": error}


def check_plan_ended(db_url: str, bootstrap: str, job: str, topic: str, ckpt_dir: str, state_uri: str,
                     maps: list[tuple[int, list[int]]], bins: int, n_records: int, plan_id: str,
                     ctl: ControllerThread) -> dict[str, int]:
    """The plan ended applied (every step once) or failed with a reason in the metrics DB (the
    steps applied so far once each, in order); either way the run is exactly once."""
    n = len(maps)
    if ctl.error is not None:
        plan = store.get_plan(db_url, plan_id)
        assert plan is not None and plan.status == "failed" and plan.reason, (ctl.error, plan)
        n = len(checkpoints(db_url, job))
        assert n >= 2
    else:
        assert ctl.result and ctl.result["map_version"] == n, ctl.result
    w, final = maps[n - 1]
    return check_exactly_once(db_url, bootstrap, job, topic, ckpt_dir, state_uri, w, final, bins, n_records,
                              plan_id, n)
