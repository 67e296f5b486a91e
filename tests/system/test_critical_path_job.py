"""A real job with one worker made slow on purpose (its operator sleeps on one key): every epoch
that carries the key logs a critical path whose largest activity is that worker's fold, and that
never names the other worker's fold (spark_jobs.epoch_trace, docs/tracing.md). Its stored traces,
exported by the command operators use, open in a real trace viewer in a real browser with one
timeline per participant (tests/helpers/trace_viewer.py; a screenshot in $BALLAST_UI_SHOTS when set)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from ballast.policy import bin_weights, folds_ms, useful_time
from ballast.store import JobStore, bin_stats
from ballast.store.traces import read_trace
from ballast.tracing import Message, Trace, epochs_participation
from spark_jobs.bins import bin_of_hash, bits_for, uniform_assignment
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.runner import RunConfig, start_job
from tests.helpers import console_stack as cs
from tests.helpers.trace_viewer import open_trace, show_timeline
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]
HERE = Path(__file__).parent
BINS, WORKERS = 8, 2
LINE = re.compile(r"epoch (\d+) critical path (\d+) ms: (.*)")


def test_the_slow_workers_fold_leads_the_critical_path(spark, kafka_bootstrap, make_topics, unique_name, tmp_path,
                                                        db_url, produce_with_spark, caplog, browser):
    spark.sparkContext.addPyFile(str(HERE / "slow_key_operator.py"))
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    keys = [b"slow" if i % 50 == 0 else b"k%d" % (i % 400) for i in range(3000)]
    produce_with_spark(topic, keys, [b"1"] * len(keys))
    [h] = spark.range(1).select(F.xxhash64(F.lit(b"slow")).alias("h")).first()  # the routing's own hash
    slow = uniform_assignment(BINS, WORKERS)[bin_of_hash(h, bits_for(BINS))]
    fast = 1 - slow
    cfg = RunConfig(job=job, operator="slow_key_operator:SlowKeyCount", input_topic=topic,
                    checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap, db_url=db_url, bins=BINS,
                    workers=WORKERS, trigger_ms=100, max_offsets_per_trigger=500)
    ckpt = cfg.checkpoint_dir + "/spark"
    with caplog.at_level(logging.INFO, "ballast.runner"):
        runner = start_job(spark, cfg)
        try:
            wait_until(lambda: (e := committed_epochs(ckpt)) and sum(
                read_end_offsets(ckpt, e[-1]).get(topic, {}).values()) == len(keys), 300, "all input consumed",
                check=lambda: runner.query.exception() is None or pytest.fail(str(runner.query.exception())))
        finally:
            runner.stop()
    lines = [m.groups() for r in caplog.records if (m := LINE.match(r.getMessage()))]
    stored = read_trace(db_url, job, cfg.operator)
    assert {a.epoch for a in stored.activities} == {int(e) for e, _, _ in lines}, \
        "each epoch's trace is stored by its tail, the last one's too (the stop joins it)"
    # the epochs that carried the slow key: the slow worker's fold slept a second (the stored trace);
    # another epoch can also take a second on a loaded machine (Spark's own stages), with no fold to lead
    carried = {a.epoch for a in stored.activities if a.kind == "fold" and a.timeline == f"worker {slow}"
               and a.end_us - a.start_us >= 900_000}
    slow_epochs = [(int(e), int(ms), text) for e, ms, text in lines if int(ms) >= 1000 and int(e) in carried]
    print("\n".join(f"epoch {e} critical path {ms} ms: {text}" for e, ms, text in slow_epochs))
    assert len(slow_epochs) >= 3, f"too few epochs carried the slow key: {lines}"
    for epoch, ms, text in slow_epochs:
        # the largest activity (a message kind such as Spark's source stage may still lead on a loaded machine)
        activities = [part.rsplit(" ", 1)[0] for part in text.split(", ") if " on " in part]
        assert activities and activities[0] == f"fold on worker {slow}", f"epoch {epoch} ({ms} ms): {text}"
        assert f"fold on worker {fast} " not in text, f"epoch {epoch}: the fast worker finished early: {text}"

    # the planner's input: by records the slow key's bin is light, by the measured fold time it is the
    # hottest, and the stored traces' critical path (the folds) tells placement to weigh by time
    stats = bin_stats(db_url, job, cfg.operator, BINS, last_epochs=1000)
    slow_bin = bin_of_hash(h, bits_for(BINS))
    assert max(range(BINS), key=lambda b: stats.fold_us[b]) == slow_bin, stats
    assert stats.fold_us[slow_bin] / sum(stats.fold_us) > 2 * stats.load[slow_bin] / sum(stats.load), stats
    # the window the controller would look at while the slow key flows (the idle epochs after the
    # input ran out are Spark's own stages only, and on a loaded machine they can outweigh the folds)
    keep = [i for i, a in enumerate(stored.activities) if a.epoch in carried]
    index = {old: new for new, old in enumerate(keep)}
    window = Trace(tuple(stored.activities[i] for i in keep),
                   tuple(Message(index[m.src], index[m.dst], m.kind) for m in stored.messages
                         if m.src in index and m.dst in index))
    shares = epochs_participation(window).by("label")
    # 0.3, not the default 0.5: on a loaded machine Spark's source stage grows (folds 44 %, source
    # stage 39 % when this ran beside the bench smoke's cluster, 2026-11-28)
    weights = bin_weights(stats.load, stats.fold_us, shares, min_share=0.3)
    assert weights.basis == "fold time" and f"hottest: bin {slow_bin}" in weights.reason, (weights.reason, shares)
    print(weights.reason)

    # DS2's useful time from the traces: each worker epoch's fold, which its counter (input read's end to
    # fold's end) contains with the time its bins were brought up to date (docs/policy.md)
    rows = JobStore(db_url, job, cfg.operator).worker_window(sorted({a.epoch for a in stored.activities}))
    counters = {(w.epoch, w.worker): float(w.useful_ms) for w in rows}
    useful = useful_time(counters, folds_ms((a.epoch, a.timeline, a.kind, a.start_us, a.end_us)
                                            for a in stored.activities))
    assert useful.basis == "trace", useful.reason
    prepare = {(a.epoch, int(a.timeline.split()[1])): (a.end_us - a.start_us) / 1000 for a in stored.activities
               if a.kind == "prepare"}
    for k, c in counters.items():  # two clocks (perf_counter, time.time) read a few µs apart: 5 ms of slack
        assert c - prepare.get(k, 0.0) - 5 <= useful.ms[k] <= c + 5, (k, c, useful.ms[k], prepare.get(k))
    print(useful.reason)

    # the export command, then the file in a trace viewer: one timeline per participant, the slow fold critical
    out = tmp_path / "trace.json"
    res = subprocess.run([sys.executable, "-m", "ballast.store.traces", "export", "--job", job, "--last", "20",
                          "-o", str(out), "--db-url", db_url], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and f"fold on worker {slow}" in res.stdout, res.stdout + res.stderr
    events = json.loads(out.read_text())["traceEvents"]
    timelines = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"driver", f"worker {slow}", f"worker {fast}"} <= timelines, timelines
    assert any(e["ph"] == "X" and e["name"] == "fold" and e["cat"] == "critical" for e in events)
    text, shown = open_trace(browser, out, job)
    assert shown == len(timelines), f"the viewer shows {shown} timelines of {len(timelines)}: {text[:300]}"
    show_timeline(browser, f"worker {slow}")  # the slow worker's folds, for the eye
    shot = cs.screenshot(browser, tmp_path / "trace-in-speedscope.png", full_page=False)
    if os.environ.get("BALLAST_UI_SHOTS"):
        shutil.copy(shot, Path(os.environ["BALLAST_UI_SHOTS"]) / shot.name)
