"""bench.epoch_profile: the per-phase medians per 1 000 rows from a run's Ballast log lines and
native progress, over the batches after the first two."""

from __future__ import annotations

import json
from pathlib import Path

from bench.epoch_profile import profile, table


def test_profile_reads_ballast_phases_and_native_progress(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "nexmark" / "native").mkdir(parents=True)
    lines = []
    for e, spark_ms in enumerate([5000, 5000, 400, 500, 600]):  # the first two pay the start-up
        lines.append(f"INFO ballast.runner: epoch {e}: rows=2000 W=2 B=64 map=v0 steps: none; batch 1 ms")
        lines.append(f"INFO ballast.runner: epoch {e} time ms: control 0, plan 20, spark {spark_ms}, db 10; "
                     "Spark outside the batch before: walCommit 40, commitOffsets 60")
    lines.append("INFO ballast.runner: epoch 5: rows=0 W=2 B=64 map=v0 steps: none; batch 1 ms")
    lines.append("INFO ballast.runner: epoch 5 time ms: control 0, backlog 3")  # no input: not a batch of cost
    (tmp_path / "logs" / "bench-x-nxc-q1.log").write_text("\n".join(lines))
    (tmp_path / "nexmark" / "native" / "q1.jsonl").write_text("\n".join(json.dumps(
        {"numInputRows": 1000, "durationMs": {"addBatch": a, "walCommit": 20, "triggerExecution": a + 50}})
        for a in (3000, 3000, 100, 200, 300)))
    p = profile(tmp_path)["q1"]
    assert p["epochs"] == 5 and p["native_batches"] == 5
    assert p["ballast"]["spark"] == 250 and p["ballast"]["plan"] == 10 and p["ballast"]["spark.walCommit"] == 20
    assert p["native"]["spark.addBatch"] == 200 and p["native"]["spark.walCommit"] == 20
    text = table("q1", p)
    assert "| **in the batch** (`addBatch`) | **265.0** | **200.0** |" in text
    assert "| Spark: walCommit | 20.0 | 20.0 |" in text
