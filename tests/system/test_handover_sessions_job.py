"""Handover of session windows on a real job (docs/handover.md, "Session windows: the rule"): a
session-window processor's bins (tests/system/session_counts.py, gap 1 s, lateness 5 s) move with no
state moved. Both owners get the bins' rows from the step's epoch; per key, each keeps the sessions
on its side of the key's crossing (the first session start from F + gap on); the step applies once
the watermark passed F + gap and the new owner's tasks report no key open. Every (user, session) is
emitted exactly once and equals a run without a migration; the checkpoint records 0 keys and 0
bytes moved, the new owner reports each bin moved in by "handover", the map moves the bins."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.bins import uniform_assignment
from tests.helpers.handover import bin_records, bins_of, check_applied, handover_times, run_handover
from tests.helpers.window_helpers import FLUSH_USER, WindowJob

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
SESSIONS = HERE / "session_counts.py"
sys.path.insert(0, str(HERE))
import session_counts as sc  # noqa: E402

BINS, MOVED, PLAN = 16, 4, "handover-sessions"


def _bins_to_move(spark: Any, db_url: str, job: str) -> list[int]:
    """MOVED of worker 0's bins, the busiest so far first; never the flush record's bin: its key's one
    session never closes (nothing follows it), and a key that never goes quiet keeps a handover open."""
    flush = json.dumps({"user": FLUSH_USER}, separators=(",", ":")).encode()
    never = bins_of(spark, [flush], BINS)[flush]
    records = bin_records(db_url, job)
    on0 = [b for b, w in enumerate(uniform_assignment(BINS, 2)) if w == 0 and b != never]
    return sorted(sorted(on0, key=lambda b: (-records.get(b, 0), b))[:MOVED])


def test_session_windows_hand_over_with_no_state_moved_and_every_session_once(spark, kafka_bootstrap, make_topics,
                                                                              unique_name, tmp_path, db_url):
    w = WindowJob(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, BINS, seed=37,
                  operator="session_counts:SessionCounts", py_files=[SESSIONS], ref=sc.session_reference)
    r = run_handover(w, kafka_bootstrap, db_url, PLAN, lambda: _bins_to_move(spark, db_url, w.job),
                     "test session handover")
    times = handover_times(r.queued)
    assert times["activation"] == times["boundary"] == times["migration"] + sc.GAP_MS, times
    assert all("keys still holding it open" in d.reason for d in r.queued), [(d.epoch, d.reason) for d in r.queued]
    assert "every session the old owner started before" in r.cp.reason, r.cp.reason
    check_applied(db_url, w, r, PLAN, BINS)  # every (user, session) once, equal to session_reference
    print(f"session handover of bins {r.bins}: queued at epochs {sorted({d.epoch for d in r.queued})} "
          f"({[d.reason.split('keys still holding it open: ')[1].split(' (')[0] for d in r.queued]}), applied at "
          f"{r.cp.applied_epoch}{'' if r.during_input else ' (after the flush)'}; {len(w.expected)} sessions")
