"""Unit tests of the NEXMark experiment's pieces that need neither Kafka nor Spark (fast): the
query table and the summary the smoke test reads."""

from __future__ import annotations

import numpy as np
import pytest

from bench.experiments.nexmark import QUERIES, summarize

pytestmark = pytest.mark.bench


def test_every_query_has_its_operators() -> None:
    for q, (ops, name) in QUERIES.items():
        assert ops and (name in ops or any(op.startswith(f"{name}=") for op in ops)), q


def test_summary_ratios() -> None:
    def mig(strategy: str, max_ms: float, dur: float) -> dict:
        return {"strategy": strategy, "role": "measured", "max_latency_ms": max_ms, "duration_s": dur,
                "p99_latency_ms": 1.0, "steady_p99_ms": 1.0, "steady_max_ms": 1.0, "keys_moved": 10, "mb_moved": 0.1,
                "bins_moved": 4, "steps": 1, "state_keys": 40, "state_mb": 0.4, "move_ms_max_step": 5.0,
                "max_epoch_gap_s": 1.0}

    res = {"migration": {"q8": {"migrations": [mig("all-at-once", 3000.0, 2.0), mig("batched", 1500.0, 8.0)],
                                "rate": 1000.0, "bins": 64, "workers": 2, "median_batch_ms": np.float64(700.0)}},
           "cost": {"q5": {"ballast": {"events_per_s": 500.0}, "native": {"events_per_s": 1000.0},
                           "ballast_ms_per_event": 2.0, "native_ms_per_event": 1.0, "ratio": 2.0,
                           "native_error": None}},
           "backlog_events": 1000}
    s = summarize(res)
    assert s["migration"]["q8"]["max_latency_ratio_all_at_once_over_batched"] == 2.0
    assert s["migration"]["q8"]["duration_ratio_batched_over_all_at_once"] == 4.0
    assert s["cost"]["q5"]["ratio"] == 2.0 and s["backlog_events"] == 1000
