"""ballast.policy.movemodes: each moving bin's move mode from what the control plane knows (sizes,
loads, the job row's declared window, the cost model and the job's budgets), with a reason a dry run
shows; a manual run forces one, and a forced handover the operator's windows do not allow is refused
with the core's reason (a session handover is never chosen on its own, its wait has no bound, but a
run may force it); a bin demoted for a worker-count change says why."""

from __future__ import annotations

import pytest

from ballast.policy.handover import WindowSpec
from ballast.policy.movemodes import (
    MOVE_MODES,
    DeclaredWindow,
    ModeBudgets,
    changed_bytes_per_epoch,
    choose_bin_modes,
)

pytestmark = pytest.mark.controlplane

BUDGETS = ModeBudgets(a_ms=50.0, b_ms_per_byte=1e-5, pause_budget_ms=200.0, step_budget_s=60.0, epoch_s=0.5)
TUMBLING = DeclaredWindow(WindowSpec(10_000), lateness_ms=20_000)  # NEXMark Q8's: a wait of ~30.5 s
SIZES = [1_000_000, 600_000_000, 600_000_000, 0]  # 60 ms, 6 s, 6 s, 50 ms by transfer
KEYS = [1_000, 600_000, 600_000, 0]
PER_EPOCH = [100.0, 2_000.0, 2_000.0, 0.0]  # records per epoch: 2 000 keys of 1 000 B change = 2 MB


def test_each_bin_moves_by_transfer_handover_or_precopy_by_the_cost_model_and_the_declared_window() -> None:
    got = choose_bin_modes([0, 1, 3], SIZES, KEYS, PER_EPOCH, TUMBLING, BUDGETS)
    assert {b: c.mode for b, c in got.choices.items()} == {0: "transfer", 1: "handover", 3: "transfer"}
    assert got.requested == "auto" and [c.bin for c in got.ordered()] == [0, 1, 3]
    ho = got.choices[1].reason
    assert "nothing is copied" in ho and "~30.5 s" in ho and "within the 60 s step budget" in ho
    assert "estimated" in ho and "tumbling 10000 ms, lateness 20000 ms" in ho and "no watermark" in ho
    assert "estimated" not in got.choices[0].reason, "a transfer waits for no window"
    assert (got.cutover_bytes(0), got.cutover_bytes(1)) == (1_000_000, 0)
    assert (got.bytes_moved(1), got.wait_s(1), got.wait_s(0)) == (0, pytest.approx(30.5), 0.0)

    plain = choose_bin_modes([1], SIZES, KEYS, PER_EPOCH, None, BUDGETS)  # no declared window: pre-copy
    assert plain.mode(1) == "precopy" and "declares no windows" in plain.choices[1].reason
    assert plain.cutover_bytes(1) == 2_000_000 and plain.bytes_moved(1) == 600_000_000
    tight = choose_bin_modes([1], SIZES, KEYS, PER_EPOCH, TUMBLING,
                             ModeBudgets(50.0, 1e-5, 200.0, step_budget_s=10.0, epoch_s=0.5))
    assert tight.mode(1) == "precopy" and "past the 10 s step budget" in tight.choices[1].reason
    sessions = choose_bin_modes([1], SIZES, KEYS, PER_EPOCH, DeclaredWindow(WindowSpec(0, gap_ms=5_000)), BUDGETS)
    assert sessions.mode(1) == "precopy" and "no bound on the wait" in sessions.choices[1].reason, (
        "the planner never chooses a session handover on its own")


def test_a_manual_run_forces_a_mode_and_a_handover_the_windows_do_not_allow_is_refused() -> None:
    forced = choose_bin_modes([0, 1], SIZES, KEYS, PER_EPOCH, TUMBLING, BUDGETS, requested="handover")
    assert [c.mode for c in forced.ordered()] == ["handover", "handover"]
    assert all("forced by the run" in c.reason and "estimated" in c.reason for c in forced.ordered())
    pre = choose_bin_modes([0], SIZES, KEYS, PER_EPOCH, TUMBLING, BUDGETS, requested="precopy")
    assert pre.mode(0) == "precopy" and "estimated" not in pre.choices[0].reason
    with pytest.raises(ValueError, match="needs the operator's windows .* declares none"):
        choose_bin_modes([0], SIZES, KEYS, PER_EPOCH, None, BUDGETS, requested="handover")
    sessions = choose_bin_modes([0], SIZES, KEYS, PER_EPOCH, DeclaredWindow(WindowSpec(0, gap_ms=5_000), 1_000),
                                BUDGETS, requested="handover")
    assert sessions.mode(0) == "handover" and sessions.bytes_moved(0) == 0, "a run may force a session handover"
    why = sessions.choices[0].reason
    assert "forced by the run" in why and "the wait is unbounded" in why and "~6.0 s" in why and "busy" in why
    with pytest.raises(ValueError, match="unknown move mode 'teleport'"):
        choose_bin_modes([0], SIZES, KEYS, PER_EPOCH, None, BUDGETS, requested="teleport")  # type: ignore[arg-type]
    assert MOVE_MODES == ("auto", "transfer", "precopy", "handover")


def test_a_demoted_bin_moves_by_precopy_and_says_why() -> None:
    got = choose_bin_modes([0, 1], SIZES, KEYS, PER_EPOCH, TUMBLING, BUDGETS).demote([1], "its step grows W")
    assert got.mode(1) == "precopy" and got.mode(0) == "transfer"
    assert got.choices[1].reason.startswith("pre-copy: its step grows W, which a handover cannot")
    assert "instead of handover:" in got.choices[1].reason and got.cutover_bytes(1) == 2_000_000


def test_the_job_rows_window_round_trips_and_anything_else_is_none() -> None:
    sliding = DeclaredWindow(WindowSpec(10_000, 5_000, offset_ms=1_000), lateness_ms=3_000)
    assert DeclaredWindow.from_config(sliding.to_config()) == sliding
    assert DeclaredWindow.from_config(TUMBLING.to_config()) == TUMBLING
    sessions = DeclaredWindow(WindowSpec(0, gap_ms=4_000), lateness_ms=1_000)
    assert DeclaredWindow.from_config(sessions.to_config()) == sessions and sessions.refusal
    for bad in (None, {}, {"length_ms": None}, {"length_ms": "ten"}, {"length_ms": 0},
                {"length_ms": 10, "slide_ms": 20}, "tumbling"):
        assert DeclaredWindow.from_config(bad) is None, bad
    assert sliding.describe() == "sliding 10000 ms every 5000 ms, lateness 3000 ms" and not sliding.refusal


def test_a_precopys_cutover_replays_at_most_the_bin() -> None:
    assert changed_bytes_per_epoch(10, 1_000_000, 1_000) == 10_000  # 10 keys of 1 000 B
    assert changed_bytes_per_epoch(10_000, 1_000_000, 1_000) == 1_000_000  # never more than the bin
    assert changed_bytes_per_epoch(10, 1_000_000, 0) == 1_000_000  # no key count: the whole bin
    assert changed_bytes_per_epoch(0, 1_000_000, 1_000) == 0 and changed_bytes_per_epoch(5, 0, 0) == 0
