"""bench.run's schedule: which experiments run side by side (a smoke run's lanes) and which alone."""

from __future__ import annotations

import threading
from pathlib import Path

from bench import report as rp
from bench.experiments import FULL, SMOKE
from bench.run import LANES, ORDER, schedule


def test_without_lanes_every_experiment_runs_alone_in_order() -> None:
    assert schedule(list(ORDER), lanes=False) == [[list(ORDER)]]
    assert schedule([], lanes=False) == []


def test_lanes_run_after_experiment_1_alone_and_cover_every_experiment_once() -> None:
    stages = schedule(list(ORDER), lanes=True)
    assert stages[0] == [["migration"]]  # what native, bins and ds2 build on; its step times are compared
    assert stages[1] == [list(lane) for lane in LANES] and len(stages) == 2
    ran = [n for stage in stages for lane in stage for n in lane]
    assert sorted(ran) == sorted(ORDER) and len(ran) == len(set(ran))
    # bins and ds2 read experiment 1's sessions: never beside it
    assert all("migration" not in lane for lane in stages[1])


def test_lanes_keep_what_was_asked_and_run_the_rest_after() -> None:
    assert schedule(["cluster", "nexmark"], lanes=True) == [[["cluster", "nexmark"]]]
    assert schedule(["migration", "native", "cluster", "trace"], lanes=True) == [
        [["migration"]], [["native"], ["cluster"]], [["trace"]]]


def test_only_the_smoke_runs_lanes() -> None:
    # a full run's figures are times, measured one experiment at a time on a quiet machine
    assert SMOKE.lanes and not FULL.lanes


def test_plots_from_two_threads_are_drawn_one_at_a_time(tmp_path: Path, monkeypatch) -> None:
    inside, most, errors = [0], [0], []
    lock = threading.Lock()
    orig = rp._save

    def save(fig, path):  # type: ignore[no-untyped-def]
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        threading.Event().wait(0.02)  # long enough for the other thread to try
        with lock:
            inside[0] -= 1
        return orig(fig, path)

    monkeypatch.setattr(rp, "_save", save)

    def draw(i: int) -> None:
        try:
            for j in range(5):
                rp.plot_series(tmp_path / f"s{i}-{j}.png", {"a": ([0.0, 1.0], [1.0, 2.0])}, "t", "y")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=draw, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and most[0] == 1
    assert len(list(tmp_path.glob("*.png"))) == 10
