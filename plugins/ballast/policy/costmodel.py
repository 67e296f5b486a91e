"""Migration cost model fitted on recorded checkpoints, and the dry run's table.

A step's pause is modelled as ms = a + b·bytes (+ c·keys): a fixed cost per step (the epoch that
applies it does extra work) plus a transfer cost. Least squares on the job's own checkpoints; with
fewer than 3 points the defaults stand, because a line through one or two noisy points is worse
than a conservative guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ballast.policy.plan import MigrationPlan, MigrationStep

#: Defaults before any checkpoint: 50 ms per step + 100 MB/s, one epoch = one 0.5 s batch.
DEFAULT_A_MS = 50.0
DEFAULT_B_MS_PER_BYTE = 1e-5
DEFAULT_EPOCH_MS = 500.0


@dataclass(frozen=True)
class CheckpointSample:
    """The numbers of one applied step's step checkpoint."""

    bytes_moved: int
    keys_moved: int
    bins_moved: int
    migration_ms: float


@dataclass(frozen=True)
class CostModel:
    """ms(step) = a + b·bytes + c·keys; `epoch_ms` is the time one step's epoch takes."""

    a_ms: float = DEFAULT_A_MS
    b_ms_per_byte: float = DEFAULT_B_MS_PER_BYTE
    c_ms_per_key: float = 0.0
    epoch_ms: float = DEFAULT_EPOCH_MS
    samples: int = 0  # 0 = defaults, not fitted

    def step_ms(self, bytes_: int, keys: int = 0, bins: int = 1) -> float:
        """Predicted pause of a step; a move-less step (worker count only) costs nothing extra."""
        if bins == 0:
            return 0.0
        return self.a_ms + self.b_ms_per_byte * bytes_ + self.c_ms_per_key * keys

    def predict_step(self, step: MigrationStep) -> float:
        """The step's pause: a handover pauses nothing, a pre-copy's cut-over loads one epoch's changes."""
        if step.mode == "handover":
            return 0.0
        if step.mode == "precopy":
            return self.step_ms(step.bytes if step.cutover_bytes is None else step.cutover_bytes, 0, step.bins)
        return self.step_ms(step.bytes, step.keys, step.bins)

    def predict_plan(self, plan: MigrationPlan) -> tuple[float, float]:
        """(max step pause ms, total duration ms) = Σ pauses + (n−1)·gap + n·epoch, + an epoch per
        pre-copy (it warms first) and each handover's wait for the old owners' windows."""
        pauses = [self.predict_step(s) for s in plan.steps]
        n = len(pauses)
        total = sum(pauses) + max(0, n - 1) * plan.gap_s * 1000.0 + n * self.epoch_ms
        total += sum(self.epoch_ms if s.mode == "precopy" else 1000.0 * s.wait_s for s in plan.steps)
        return (max(pauses, default=0.0), total)


def _solve(m: list[list[float]], v: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular (e.g. all bytes equal)."""
    n = len(v)
    a = [row[:] + [v[i]] for i, row in enumerate(m)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[piv][col]) < 1e-12 * max(1.0, max(abs(x) for row in a for x in row[:n])):
            return None
        a[col], a[piv] = a[piv], a[col]
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col])]
    return [a[i][n] / a[i][i] for i in range(n)]


def fit_cost_model(
    samples: Sequence[CheckpointSample], use_keys: bool = False, epoch_ms: float = DEFAULT_EPOCH_MS
) -> CostModel:
    """Least squares ms = a + b·bytes (+ c·keys) on applied checkpoints.

    Features are scaled before solving (bytes are ~1e6-1e9) and coefficients clamped at 0: a
    negative per-byte cost is noise and would make `auto` prefer huge steps.
    """
    pts = [s for s in samples if s.bins_moved > 0]
    if len(pts) < 3:
        return CostModel(epoch_ms=epoch_ms)
    cols = [[float(s.bytes_moved) for s in pts]] + ([[float(s.keys_moved) for s in pts]] if use_keys else [])
    scale = [max(max(c), 1.0) for c in cols]
    x = [[1.0] + [cols[j][i] / scale[j] for j in range(len(cols))] for i in range(len(pts))]
    y = [s.migration_ms for s in pts]
    k = len(x[0])
    xtx = [[sum(r[i] * r[j] for r in x) for j in range(k)] for i in range(k)]
    xty = [sum(r[i] * yy for r, yy in zip(x, y)) for i in range(k)]
    sol = _solve(xtx, xty)
    if sol is None:  # no spread in the features: only the mean is known
        return CostModel(a_ms=sum(y) / len(y), b_ms_per_byte=0.0, epoch_ms=epoch_ms, samples=len(pts))
    coef = [max(0.0, sol[j + 1] / scale[j]) for j in range(len(cols))]
    if any(sol[j + 1] < 0 for j in range(len(cols))):  # refit the intercept for the clamped slopes
        resid = [yy - sum(c * col[i] for c, col in zip(coef, cols)) for i, yy in enumerate(y)]
        a = sum(resid) / len(resid)
    else:
        a = sol[0]
    return CostModel(
        a_ms=max(0.0, a),
        b_ms_per_byte=coef[0],
        c_ms_per_key=coef[1] if use_keys else 0.0,
        epoch_ms=epoch_ms,
        samples=len(pts),
    )


def render_plan(plan: MigrationPlan, model: CostModel) -> str:
    """Dry-run table a person reads before approving: one row per step, then totals; with move modes
    (`plan.modes`) a mode column, and after the totals each bin's mode and why."""
    head = (
        f"plan: {plan.strategy} ({plan.order}), workers {plan.from_workers}->{plan.to_workers}, "
        f"map version {plan.base_version}->{plan.base_version + len(plan.steps)}, "
        f"cost model {'fitted on ' + str(model.samples) + ' checkpoints' if model.samples else 'defaults'}"
    )
    rows = [("step", "moves", "bins", "bytes", "workers", "pause_ms", "at_s") + (("mode",) if plan.modes else ())]
    for s in plan.steps:
        mv = ", ".join(f"{m.bin}:{m.src}->{m.dst}" for m in s.moves[:4]) + (" …" if len(s.moves) > 4 else "")
        mode = (s.mode + (f" ~{s.wait_s:.1f} s" if s.mode == "handover" else ""),) if plan.modes else ()
        rows.append((
            str(s.step), mv or "-", str(s.bins), f"{s.bytes:,}", str(s.workers),
            f"{model.predict_step(s):.0f}", f"{s.effective_offset_s:.1f}", *mode,
        ))
    worst, total = model.predict_plan(plan)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head] + [
        "  ".join(c.ljust(w) if i in (1, 7) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
        for r in rows
    ]
    lines.append(
        f"total: {len(plan.steps)} steps, {plan.bins} bins, {plan.bytes:,} bytes, "
        f"max pause {worst:.0f} ms, predicted duration {total / 1000:.1f} s"
    )
    if plan.modes:
        counts = {m: sum(c.mode == m for c in plan.modes) for m in ("transfer", "precopy", "handover")}
        lines.append("move modes: " + ", ".join(f"{n} {m}" for m, n in counts.items() if n) + "; per bin:")
        src = {m.bin: (m.src, m.dst) for s in plan.steps for m in s.moves}
        lines += [f"  bin {c.bin} {src[c.bin][0]}->{src[c.bin][1]}: {c.reason}" if c.bin in src else
                  f"  bin {c.bin}: {c.reason}" for c in plan.modes]
    return "\n".join(lines)
