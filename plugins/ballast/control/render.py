"""Per-plan tables for task logs and shells: what each step moved, when it applied, what it cost."""

from __future__ import annotations

from ballast import store


def summary_table(url: str, plan_id: str) -> str:
    """Per-step table: step, moves, bins, workers, status, applied epoch, ms, bytes, Kafka position."""
    steps = store.plan_steps(url, plan_id)
    cps = store.checkpoints(url, plan_id)
    rows = [("step", "moves", "bins", "workers", "status", "epoch", "ms", "bytes", "emitted@offset")]
    for s in steps:
        mv = s.payload.get("moves", [])
        txt = ", ".join(f"{m['bin']}:{m['from']}->{m['to']}" for m in mv[:4]) + (" …" if len(mv) > 4 else "")
        c = cps.get(s.step)
        rows.append((
            str(s.step), txt or "-", str(len(mv)), str(s.payload.get("workers", "")),
            c.status if c else ("in flight" if s.emitted else "not sent"),
            str(c.applied_epoch) if c and c.applied_epoch is not None else "-",
            f"{c.migration_ms:.0f}" if c else "-", f"{c.bytes_moved:,}" if c else "-",
            f"{s.kafka_partition}:{s.kafka_offset}" if s.emitted else "-",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(col.ljust(w) for col, w in zip(r, widths)) for r in rows]
    applied = [c for c in cps.values() if c.status == "applied"]
    lines.append(f"total: {len(applied)}/{len(steps)} applied, {sum(c.bins_moved for c in applied)} bins, "
                 f"{sum(c.bytes_moved for c in applied):,} bytes, "
                 f"{sum(c.migration_ms for c in applied):.0f} ms migrating")
    return "\n".join(lines)
