"""Critical participation (Snailtrail, Hoffmann thesis ch. 3): each activity's share of all
critical paths of a trace window, without materialising one path.

Definitions (docs/tracing.md has a worked example):
- a path runs from a vertex with no incoming edge to one with no outgoing edge; the critical
  paths are the longest ones, of weight L (the thesis's transient critical paths; when every
  timeline is busy across the window, L = t_e − t_s, its case);
- c(e), the number of critical paths through edge e = (u, v), is c1(u) · c2(v): the longest paths
  from a source into u times those from v to a sink, counted by one forward and one backward pass
  (Algorithm 2), when e lies on a longest path at all;
- CP_e = c(e) · w(e) / (N · L), N the number of critical paths (Eq. 3.3). Summed over all edges it
  is 1 (Eq. 3.5): CP is the share of the critical path each activity holds, averaged over all of
  them.
Counts are exact integers (a 10 s Spark window has ~10^21 critical paths).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from ballast.tracing.graph import Edge, Graph, Message, Trace, snapshot


@dataclass(frozen=True)
class Participation:
    """CP of every edge of a window, and the figures it was computed from."""

    edges: tuple[tuple[Edge, float], ...]  # (edge, CP) for the edges on some critical path
    paths: int  # N
    length_us: int  # L

    def by(self, key: str = "kind") -> dict[str, float]:
        """Summed CP per `kind`, `timeline`, `both` ("kind on timeline"; a message's timeline is
        "sender -> receiver") or `label` (as `both`, but a message by its kind alone), largest first."""
        out: dict[str, float] = defaultdict(float)
        for e, cp in self.edges:
            name = {"kind": e.kind, "timeline": e.timeline, "both": f"{e.kind} on {e.timeline}", "label": e.label}[key]
            out[name] += cp
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def bottleneck(self) -> str:
        """One sentence: what holds the largest share of the critical path — an activity of one
        participant, or a kind of message (Spark's source stage is one: its time is spent between
        the driver's plan and the tasks' start)."""
        if not self.edges:
            return "nothing was on a critical path in this window"
        name, share = next(iter(self.by("label").items()))
        return f"{name} holds {share:.0%} of the critical path"


def critical_participation(g: Graph) -> Participation:
    """Algorithm 2 over a graph or snapshot (`ballast.tracing.graph.snapshot`)."""
    n = len(g.times)
    out_e: list[list[Edge]] = [[] for _ in range(n)]
    in_e: list[list[Edge]] = [[] for _ in range(n)]
    for e in g.edges:
        out_e[e.u].append(e)
        in_e[e.v].append(e)
    order = _topological(n, out_e, in_e)
    # forward: the longest way from any source into v, and how many paths take it (c1); backward:
    # the longest way from v to any sink, and how many (c2)
    best_in, cnt_in = _longest(order, in_e, lambda e: e.u)
    best_out, cnt_out = _longest(order[::-1], out_e, lambda e: e.v)
    used = [v for v in range(n) if in_e[v] or out_e[v]]
    if not used:
        return Participation((), 0, 0)
    length = max(best_out[v] for v in used if not in_e[v])
    paths = sum(cnt_out[v] for v in used if not in_e[v] and best_out[v] == length)
    if length == 0:  # only instants: nothing took time, nothing holds anything back
        return Participation((), paths, 0)
    # e lies on a critical path when the longest way into its start, itself and the longest way out
    # of its end add up to L; c(e) = c1(u) * c2(v)
    cps = tuple((e, cnt_in[e.u] * cnt_out[e.v] * e.weight_us / (paths * length)) for e in g.edges
                if e.weight_us > 0 and best_in[e.u] + e.weight_us + best_out[e.v] == length)
    return Participation(cps, paths, length)


def _epoch_groups(trace: Trace) -> dict[int | None, list[int]]:
    """Each epoch's activities (indices into `trace.activities`, in their order)."""
    groups: dict[int | None, list[int]] = defaultdict(list)
    for i, a in enumerate(trace.activities):
        groups[a.epoch].append(i)
    return groups


def per_epoch(trace: Trace) -> dict[int | None, Participation]:
    """Each epoch's own CP (activities without an epoch form one group). An edge's `activity` is
    its position among the epoch's own activities."""
    out = {}
    for epoch, idx in _epoch_groups(trace).items():
        keep = {old: new for new, old in enumerate(idx)}
        sub = Trace(tuple(trace.activities[i] for i in idx),
                    tuple(Message(keep[x.src], keep[x.dst], x.kind) for x in trace.messages
                          if x.src in keep and x.dst in keep))
        out[epoch] = critical_participation(snapshot(sub))
    return out


def epochs_participation(trace: Trace) -> Participation:
    """CP of a window of several epochs: each epoch's own (between epochs the driver waits for its
    trigger, and waiting is never critical, so no path crosses from one epoch to the next), weighted
    by the length of its critical path: the result is each activity's share of all the critical
    time in the window. `paths` is the sum of the epochs' counts. An edge's `activity` is its index
    in `trace.activities` (each epoch's own analysis numbers them from 0: mapped back here)."""
    groups = _epoch_groups(trace)
    parts = per_epoch(trace)
    total = sum(p.length_us for p in parts.values())
    if total == 0:
        return Participation((), sum(p.paths for p in parts.values()), 0)
    edges = tuple((e if e.activity is None else replace(e, activity=groups[epoch][e.activity]),
                   cp * p.length_us / total) for epoch, p in parts.items() for e, cp in p.edges)
    return Participation(edges, sum(p.paths for p in parts.values()), total)


def _longest(order: list[int], near: list[list[Edge]], other: Callable[[Edge], int]) -> tuple[list[int], list[int]]:
    """One pass of Algorithm 2 in `order`: per vertex, the longest weight from the pass's ends
    through its `near` edges (whose `other` end comes earlier in the order), and the number of
    paths of that weight."""
    best = [0] * len(order)
    count = [0] * len(order)
    for v in order:
        if not near[v]:
            count[v] = 1
            continue
        best[v] = max(best[other(e)] + e.weight_us for e in near[v])
        count[v] = sum(count[other(e)] for e in near[v] if best[other(e)] + e.weight_us == best[v])
    return best, count


def _topological(n: int, out_e: list[list[Edge]], in_e: list[list[Edge]]) -> list[int]:
    """Kahn's order of the vertices (zero-weight edges make time alone ambiguous)."""
    indeg = [len(in_e[v]) for v in range(n)]
    queue = deque(v for v in range(n) if indeg[v] == 0)
    order: list[int] = []
    while queue:
        v = queue.popleft()
        order.append(v)
        for e in out_e[v]:
            indeg[e.v] -= 1
            if indeg[e.v] == 0:
                queue.append(e.v)
    if len(order) != n:
        raise ValueError("the trace's dependencies form a cycle: a message goes back in time")
    return order
