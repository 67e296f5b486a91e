"""A job's trace as a program activity graph (PAG, Snailtrail's Definition 7), and its snapshot.

Why a graph and not a per-activity profile: in a dataflow a long activity followed by waiting
holds nothing back, and a short one every other participant waits for does. Only the
dependencies say which is which; Snailtrail's critical participation (`ballast.tracing.cp`) reads
them from this graph.

The trace is what participants (the driver, each worker slot) did: `Activity`s on their
`timeline`, never overlapping on one timeline, and `Message`s, the happened-before edges between
timelines (the driver's plan releases each task; a task's end releases the driver's commit).
Vertices are the start and end of every activity; edges are
- the activity itself (start -> end, its kind),
- a message (the sender's end -> the receiver's start, of the message's kind),
- the next activity of the same timeline when it starts as the last one ends (kind of neither: a
  zero-weight link). A gap on a timeline is *waiting*, which is never on a critical path
  (Snailtrail §3.3.1): it gets no edge, so a path crosses it only through a message.
Every edge weighs its time span (end vertex time − start vertex time), so every path between two
vertices weighs the same: what differs between paths is only which activities they pass.

Times are integer microseconds on one clock (the executors' and the driver's wall clocks; on one
host, or hosts kept in step by NTP, whose skew is then part of the message times).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

MESSAGE = "message"  # the kind of a message edge
LINK = "link"  # the kind of a zero-weight edge between touching activities of one timeline


@dataclass(frozen=True)
class Activity:
    """What one participant did from `start_us` to `end_us` (`kind`: fold, commit, plan, ...)."""

    timeline: str  # "driver", "worker 0", ...
    kind: str
    start_us: int
    end_us: int
    epoch: int | None = None
    label: str = ""  # shown with the activity (a bin, a topic partition)

    def __post_init__(self) -> None:
        if self.end_us < self.start_us:
            raise ValueError(f"activity {self.kind} on {self.timeline} ends ({self.end_us}) before it starts "
                             f"({self.start_us})")


@dataclass(frozen=True)
class Message:
    """`src`'s end happened before `dst`'s start (indexes into the trace's activities); `kind`
    names what passed (a task's launch, a task's end)."""

    src: int
    dst: int
    kind: str = MESSAGE


@dataclass(frozen=True)
class Edge:
    """An edge of the PAG (after projection): its kind, its timeline and its vertices' times."""

    u: int
    v: int
    kind: str
    timeline: str
    start_us: int
    end_us: int
    activity: int | None = None  # index of the activity it is (None: a message or a link)

    @property
    def weight_us(self) -> int:
        return self.end_us - self.start_us

    @property
    def label(self) -> str:
        """What summaries call it: `fold on worker 1`; a message by its kind (`source stage`)."""
        return self.kind if self.activity is None else f"{self.kind} on {self.timeline}"


@dataclass
class Graph:
    """Vertices (their times) and edges of a PAG or of a snapshot of it."""

    times: list[int] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)

    def vertex(self, t_us: int) -> int:
        self.times.append(t_us)
        return len(self.times) - 1


@dataclass(frozen=True)
class Trace:
    """Activities and messages of a job over some time."""

    activities: tuple[Activity, ...]
    messages: tuple[Message, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.activities)
        for m in self.messages:
            if not (0 <= m.src < n and 0 <= m.dst < n):
                raise ValueError(f"message {m} names an activity outside the trace's {n}")
            a, b = self.activities[m.src], self.activities[m.dst]
            if a.timeline == b.timeline:
                raise ValueError(f"message {m} stays on timeline {a.timeline}: order on a timeline is by time")
        for tl, acts in self.timelines().items():
            for a, b in zip(acts, acts[1:], strict=False):
                if b.start_us < a.end_us:
                    raise ValueError(f"activities {a.kind} and {b.kind} overlap on timeline {tl}: a timeline is "
                                     "one participant doing one thing at a time")

    def timelines(self) -> dict[str, list[Activity]]:
        """Each timeline's activities in time order."""
        out: dict[str, list[Activity]] = {}
        for a in sorted(self.activities, key=lambda a: (a.start_us, a.end_us)):
            out.setdefault(a.timeline, []).append(a)
        return out

    def window(self) -> tuple[int, int]:
        """The first start and the last end."""
        if not self.activities:
            raise ValueError("an empty trace has no window")
        return min(a.start_us for a in self.activities), max(a.end_us for a in self.activities)


def snapshot(trace: Trace, t_s: int | None = None, t_e: int | None = None) -> Graph:
    """The PAG projected on [t_s, t_e] (Snailtrail's Definitions 10–11): edges straddling a bound are
    cut at it (each cut end a vertex of its own); edges outside are left out. Defaults: the trace's
    window."""
    lo, hi = trace.window()
    t_s = lo if t_s is None else t_s
    t_e = hi if t_e is None else t_e
    if t_e < t_s:
        raise ValueError(f"window ends ({t_e}) before it starts ({t_s})")
    g = Graph()
    start_v: dict[int, int] = {}
    end_v: dict[int, int] = {}

    def point(memo: dict[int, int], i: int, t: int) -> int:
        if i not in memo:
            memo[i] = g.vertex(t)
        return memo[i]

    def add(kind: str, timeline: str, u: tuple[dict[int, int], int, int], v: tuple[dict[int, int], int, int],
            activity: int | None) -> None:
        tu, tv = u[2], v[2]
        if tv < t_s or tu > t_e or (tu == tv and not t_s <= tu <= t_e):
            return
        a = point(*u) if tu >= t_s else g.vertex(t_s)
        b = point(*v) if tv <= t_e else g.vertex(t_e)
        g.edges.append(Edge(a, b, kind, timeline, max(tu, t_s), min(tv, t_e), activity))

    index = {id(a): i for i, a in enumerate(trace.activities)}
    for i, a in enumerate(trace.activities):
        add(a.kind, a.timeline, (start_v, i, a.start_us), (end_v, i, a.end_us), i)
    for acts in trace.timelines().values():
        for a, b in zip(acts, acts[1:], strict=False):
            if b.start_us == a.end_us:  # touching: one continues where the other ended
                ia, ib = index[id(a)], index[id(b)]
                add(LINK, a.timeline, (end_v, ia, a.end_us), (start_v, ib, b.start_us), None)
    for m in trace.messages:
        a, b = trace.activities[m.src], trace.activities[m.dst]
        start = min(a.end_us, b.start_us)  # a clock step may put the receipt first: the message took 0
        add(m.kind, f"{a.timeline} -> {b.timeline}", (end_v, m.src, start), (start_v, m.dst, b.start_us), None)
    return g


def activities_of(graph: Graph, kinds: Iterable[str]) -> Sequence[Edge]:
    """The graph's edges of the given kinds (tests, summaries)."""
    want = set(kinds)
    return [e for e in graph.edges if e.kind in want]
