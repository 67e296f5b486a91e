"""The upgrade experiment's pure parts (bench.experiments.upgrade, bench.padded_proc*): the two
versions' state and its carry-over both ways, the lost/doubled check, and the summary and README
built from recorded session rows (no Spark)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

from bench import padded_proc, padded_proc_v2
from bench.experiments.upgrade import ACTIONS, UPGRADE_SMOKE, count_check, readme, summarize
from bench.padded import ENV
from spark_jobs.key_state import KeyState
from spark_jobs.processor import StatefulProcessorHandle, TimerValues
from spark_jobs.state_upgrade import chain_of

pytestmark = pytest.mark.bench


def _run(cls: type, ks: KeyState, key: str, n: int) -> list[dict[str, Any]]:
    h = StatefulProcessorHandle("None", TimerValues(1, -1))
    proc = cls()
    proc.init(h)
    h._current = ks
    return list(proc.handle_input_rows((key,), iter([object()] * n), h.timer_values))


def test_the_versions_keep_a_padded_count_that_carries_over_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "300")
    ks = KeyState()
    assert _run(padded_proc.PaddedCounter, ks, "k1", 2) == [{"key": "k1", "count": 2}]
    (n, pad), _ = ks.values["count"]
    assert n == 2 and len(pad) == 292 and len(ks.to_bytes() or b"") > 300
    up = chain_of([("1", padded_proc.PaddedCounter), ("2", padded_proc_v2.PaddedCounter)])
    up.carry(ks)
    assert ks.values["tally"][0] == (2, pad, 0) and ks.code == "2"
    assert _run(padded_proc_v2.PaddedCounter, ks, "k1", 3) == [{"key": "k1", "count": 5, "v": "2"}]
    back = chain_of([("1", padded_proc.PaddedCounter), ("2", padded_proc_v2.PaddedCounter),
                     ("1", padded_proc.PaddedCounter)])
    back.carry(ks)
    assert ks.values == {"count": ((5, pad), None)} and ks.code is None
    assert _run(padded_proc.PaddedCounter, ks, "k1", 1) == [{"key": "k1", "count": 6}]


def test_count_check_names_lost_and_doubled_records() -> None:
    inputs = Counter({"a": 3, "b": 2, "c": 1})
    assert count_check(inputs, {"a": 3, "b": 2, "c": 1}) == {"keys": 3, "records": 6, "lost": 0, "doubled": 0,
                                                             "keys_off": 0}
    got = count_check(inputs, {"a": 2, "b": 4, "d": 1})  # a lost one, b doubled two, c never answered, d unknown
    assert (got["lost"], got["doubled"], got["keys_off"]) == (2, 3, 4)


def _row(action: str, max_ms: float) -> dict[str, Any]:
    return {"role": "measured", "strategy": action, "max_latency_ms": max_ms, "p99_latency_ms": max_ms * 0.8,
            "steady_p99_ms": 600.0, "duration_s": 1.2, "max_epoch_batch_ms": 500.0}


def test_summary_ratios_and_goals_from_recorded_rows() -> None:
    r = {"migrations": [_row("upgrade", 800.0), _row("rollback", 700.0), _row("shadow-upgrade", 1_300.0)],
         "steady": {"p99_ms": 600.0}, "state": {"keys": 1_100_000, "bytes": 1_250_000_000},
         "counts": {"keys": 1_100_000, "records": 1_300_000, "lost": 0, "doubled": 0, "outputs": 1_200_000},
         "loadavg_start": [0.1, 0.2, 0.3], "loadavg_end": [1.0, 1.0, 1.0]}
    s = summarize(UPGRADE_SMOKE, r)
    assert s["max_over_steady_p99"] == pytest.approx(800 / 600)
    assert s["rollback_max_over_steady_p99"] == pytest.approx(700 / 600)
    assert s["shadow_max_over_steady_p99"] == pytest.approx(1300 / 600)
    assert (s["lost"], s["doubled"]) == (0, 0)
    assert s["goals"] == {"state_ge_1gb": True, "max_over_steady_p99_le_1_5": True,
                          "rollback_max_over_steady_p99_le_1_5": True, "lost_and_doubled_0": True}
    text = readme(s)
    assert "1.25 GB" in text and "**0 lost, 0 doubled**" in text and all(a in text for a in ACTIONS)
    bad = summarize(UPGRADE_SMOKE, {**r, "migrations": [_row("upgrade", 1_000.0)],
                                    "counts": {"lost": 3, "doubled": 0}})
    assert bad["goals"]["max_over_steady_p99_le_1_5"] is False and bad["goals"]["lost_and_doubled_0"] is False
    assert math.isnan(bad["rollback_max_over_steady_p99"])
    assert bad["goals"]["rollback_max_over_steady_p99_le_1_5"] is None
