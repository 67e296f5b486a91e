"""ballast.tracing.cp: critical participation by Algorithm 2 equals Eq. 3.2 computed by
enumerating every path (on random traces); it sums to 1; a known critical path is found; waiting
is never critical; the bottleneck sentence names the participant and activity."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from ballast.tracing import Activity, Message, Trace, critical_participation, epochs_participation, snapshot
from ballast.tracing.graph import Graph

pytestmark = pytest.mark.controlplane


def _paths(g: Graph) -> list[list[int]]:
    """Every source-to-sink path, as edge indexes (the brute force Algorithm 2 avoids)."""
    out: dict[int, list[int]] = defaultdict(list)
    has_in = set()
    for i, e in enumerate(g.edges):
        out[e.u].append(i)
        has_in.add(e.v)
    used = {e.u for e in g.edges} | {e.v for e in g.edges}
    found: list[list[int]] = []

    def walk(v: int, path: list[int]) -> None:
        if not out[v]:
            found.append(path)
            return
        for i in out[v]:
            walk(g.edges[i].v, [*path, i])

    for v in sorted(used - has_in):
        walk(v, [])
    return found


def _brute_force(g: Graph) -> dict[int, float]:
    """Eq. 3.2: each edge's participation averaged over all longest paths."""
    paths = _paths(g)
    weight = [sum(g.edges[i].weight_us for i in p) for p in paths]
    longest = max(weight)
    crit = [p for p, w in zip(paths, weight, strict=True) if w == longest]
    cp: dict[int, float] = defaultdict(float)
    for p in crit:
        for i in p:
            cp[i] += g.edges[i].weight_us / longest / len(crit)
    return {i: v for i, v in cp.items() if v > 0}


def _random_trace(rng: random.Random) -> Trace:
    """2–4 timelines of touching and gapped activities, and messages forward in time."""
    acts: list[Activity] = []
    for t in range(rng.randint(2, 4)):
        now = rng.randint(0, 5)
        for _ in range(rng.randint(1, 4)):
            now += rng.choice([0, 0, rng.randint(1, 6)])  # touching, or after some waiting
            dur = rng.randint(1, 9)
            acts.append(Activity(f"worker {t}", rng.choice(["fold", "load", "commit"]), now, now + dur))
            now += dur
    msgs = [Message(i, j) for i, a in enumerate(acts) for j, b in enumerate(acts)
            if a.timeline != b.timeline and a.end_us <= b.start_us and rng.random() < 0.3]
    return Trace(tuple(acts), tuple(msgs))


@pytest.mark.parametrize("seed", range(40))
def test_algorithm_2_equals_eq_3_2_over_every_path_and_sums_to_one(seed):
    g = snapshot(_random_trace(random.Random(seed)))
    fast = critical_participation(g)
    slow = _brute_force(g)
    got = {g.edges.index(e): v for e, v in fast.edges}
    assert got.keys() == slow.keys()
    for i, v in slow.items():
        assert got[i] == pytest.approx(v)
    assert sum(got.values()) == pytest.approx(1.0)
    assert fast.paths == len([p for p in _paths(g)
                              if sum(g.edges[i].weight_us for i in p) == fast.length_us])


def _epoch(slow_worker: int, fold_us: tuple[int, ...]) -> Trace:
    """The driver plans, W workers fold, the driver receives each task's end and commits after the last."""
    acts = [Activity("driver", "plan", 0, 10)]
    msgs = []
    ends = []
    for w, f in enumerate(fold_us):
        acts.append(Activity(f"worker {w}", "fold", 12, 12 + f))
        msgs.append(Message(0, len(acts) - 1))
        ends.append((12 + f, len(acts) - 1))
    for end, i in sorted(ends):  # the driver handles each task's end as it arrives (then waits)
        acts.append(Activity("driver", "receive", end + 1, end + 2))
        msgs.append(Message(i, len(acts) - 1))
    last = max(ends)[0]
    acts.append(Activity("driver", "commit", last + 2, last + 20))
    assert fold_us.index(max(fold_us)) == slow_worker
    return Trace(tuple(acts), tuple(msgs))


def test_the_slow_workers_fold_is_the_critical_path_and_an_early_workers_is_not():
    cp = critical_participation(snapshot(_epoch(1, (28, 88, 30))))
    assert cp.paths == 1 and cp.length_us == 12 + 88 + 20
    both = cp.by("both")
    assert both["fold on worker 1"] == pytest.approx(88 / 120)
    assert "fold on worker 0" not in both and "fold on worker 2" not in both, "they finished and waited"
    assert cp.by("kind")["commit"] == pytest.approx(18 / 120)
    assert cp.bottleneck() == "fold on worker 1 holds 73% of the critical path"


def test_waiting_is_never_critical_and_two_equal_paths_share():
    # worker 0 waits 50 us for worker 1's message; both fold the same time after
    acts = (Activity("worker 1", "load", 0, 50), Activity("worker 0", "fold", 50, 80),
            Activity("worker 1", "fold", 50, 80))
    trace = Trace(acts, (Message(0, 1),))
    cp = critical_participation(snapshot(trace))
    assert cp.paths == 2 and cp.length_us == 80
    assert cp.by("both") == pytest.approx({"load on worker 1": 50 / 80, "fold on worker 0": 15 / 80,
                                           "fold on worker 1": 15 / 80})


def test_a_window_cuts_what_straddles_it():
    trace = Trace((Activity("worker 0", "fold", 0, 100), Activity("worker 0", "commit", 100, 140)))
    g = snapshot(trace, 60, 120)
    assert sorted((e.kind, e.start_us, e.end_us) for e in g.edges) == [
        ("commit", 100, 120), ("fold", 60, 100), ("link", 100, 100)]
    cp = critical_participation(g)
    assert cp.by("kind") == pytest.approx({"fold": 40 / 60, "commit": 20 / 60})
    assert critical_participation(snapshot(trace, 200, 300)).edges == ()


def test_bad_traces_are_refused_with_what_is_wrong():
    a, b = Activity("worker 0", "fold", 0, 10), Activity("worker 0", "commit", 5, 12)
    with pytest.raises(ValueError, match="overlap on timeline worker 0"):
        Trace((a, b))
    with pytest.raises(ValueError, match="stays on timeline"):
        Trace((a, Activity("worker 0", "commit", 10, 12)), (Message(0, 1),))
    with pytest.raises(ValueError, match="ends .* before it starts"):
        Activity("driver", "plan", 5, 4)
    x, y = Activity("driver", "plan", 0, 10), Activity("worker 0", "fold", 20, 30)
    with pytest.raises(ValueError, match="form a cycle"):
        critical_participation(snapshot(Trace((x, y), (Message(0, 1), Message(1, 0)))))


def test_a_window_of_epochs_weighs_each_epochs_cp_by_its_critical_path():
    one = [Activity("driver", "plan", 0, 20, epoch=1), Activity("worker 1", "fold", 20, 100, epoch=1)]
    two = [Activity("driver", "db", 1000, 1300, epoch=2)]  # after the trigger's wait: no path crosses it
    cp = epochs_participation(Trace((*one, *two), (Message(0, 1),)))
    assert cp.length_us == 400 and cp.paths == 2
    assert cp.by("both") == pytest.approx({"db on driver": 0.75, "fold on worker 1": 0.2, "plan on driver": 0.05})
    assert sum(v for _, v in cp.edges) == pytest.approx(1.0)
