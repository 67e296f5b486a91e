"""A two-topic stream-stream join (examples/operators/order_payments.py: orders ⋈ payments on the
order id, event-time bound, state cleaned up by timers) run by the CLI with both topics as its
inputs, killed inside a worker before its cache commits and at a random moment while an 8-step
batched plan moves its bins; after restarts, the deduplicated output equals the pure-Python
reference (every matching pair exactly once) and only the flush id is left in the state."""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import pytest

from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import read_output
from spark_jobs.runner import ensure_job_topics
from tests.helpers.dp_helpers import plan_maps, produce, steps_from_maps
from tests.helpers.kill_runs import StepSender, check_plan_applied, cli_env, final_run, keys_with_state, killed_runs
from tests.helpers.window_helpers import BASE_MS, EXAMPLES, iso

sys.path.insert(0, str(EXAMPLES))
import order_payments as op  # noqa: E402

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

BINS = 32
OP = "order_payments:OrderPayments"
FLUSH = "~flush"


def join_events(n: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """n orders 20 ms apart (ids with one or two orders) and 0-2 payments each, up to 4 s later,
    each topic in event-time order (so no row is ever late: the lateness is 10 s)."""
    rng = random.Random(seed)
    orders = [{"id": f"o{rng.randrange(n * 2 // 3):05d}", "ts_ms": BASE_MS + i * 20, "amount": rng.randrange(1, 99)}
              for i in range(n)]
    payments = [{"id": o["id"], "ts_ms": o["ts_ms"] + rng.randrange(0, 4000), "method": rng.choice("abc")}
                for o in orders for _ in range(rng.choice((0, 1, 1, 2)))]
    return orders, sorted(payments, key=lambda p: p["ts_ms"])


def as_records(evs: list[dict[str, Any]]) -> tuple[list[bytes], list[bytes]]:
    return ([e["id"].encode() for e in evs],
            [json.dumps({**{k: v for k, v in e.items() if k != "ts_ms"}, "ts": iso(e["ts_ms"])}).encode()
             for e in evs])


def test_join_exactly_once_across_migration_and_kills(kafka_bootstrap, make_topics, unique_name, tmp_path, db_url):
    job, orders_t, pay_t = unique_name, f"{unique_name}.orders", f"{unique_name}.payments"
    make_topics({orders_t: 2, pay_t: 2})
    orders, payments = join_events(3000, seed=3)
    for topic, evs in ((orders_t, orders), (pay_t, payments)):
        keys, values = as_records(evs)
        produce(kafka_bootstrap, topic, keys, 2, values)
    expected = op.reference(orders, payments)
    assert len(expected) > 2000
    ensure_job_topics(kafka_bootstrap, job, 2)
    steps = steps_from_maps(job, OP, "plan-join", BINS, plan_maps(BINS))
    ckpt_dir, faults_file, logs = tmp_path / "ckpt", tmp_path / "faults", tmp_path / "logs"
    logs.mkdir()
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, "--operator", OP,
           "--input-topic", f"{orders_t},{pay_t}", "--bins", str(BINS), "--workers", "2",
           "--checkpoint-dir", str(ckpt_dir), "--bootstrap", kafka_bootstrap, "--db-url", db_url,
           "--trigger-ms", "100", "--max-offsets-per-trigger", "800"]
    env = cli_env(faults_file, EXAMPLES)
    spark_ckpt = ckpt_dir / "spark"
    rng = random.Random(31)
    control_tick = StepSender(kafka_bootstrap, job, OP, steps, spark_ckpt, db_url)
    flushed = False

    def consumed() -> int:
        eps = committed_epochs(spark_ckpt)
        end = read_end_offsets(spark_ckpt, eps[-1]) if eps else None
        return sum(sum((end or {}).get(t, {}).values()) for t in (orders_t, pay_t))

    def outputs() -> list[tuple[str, int, int]]:
        return sorted((d["id"], int(d["order_ms"]), int(d["payment_ms"]))
                      for d in (json.loads(o.value) for o in read_output(kafka_bootstrap, f"{job}.output")[0]))

    killed_runs(cmd, env, logs, faults_file, control_tick, rng)

    def done() -> bool:
        nonlocal flushed
        control_tick()
        if not flushed and consumed() == len(orders) + len(payments):
            far = max(p["ts_ms"] for p in payments) + 10 * op.HORIZON_MS + op.LATENESS_MS
            fk, fv = as_records([{"id": FLUSH, "ts_ms": far, "amount": 0}])
            produce(kafka_bootstrap, orders_t, fk, 1, fv)
            flushed = True
        return flushed and control_tick.all_applied and len(outputs()) >= len(expected)

    # linger: a few more epochs, so that the flush's watermark fires the cleanup timers
    final_run(cmd, env, logs / "final.log", done, linger_s=5)

    check_plan_applied(db_url, job, "plan-join", steps)
    got = outputs()
    assert len(set(got)) == len(got), "a pair emitted twice"
    assert got == expected, f"{len(set(got) - set(expected))} unexpected, {len(set(expected) - set(got))} missing"
    left = keys_with_state(str(ckpt_dir / "state"), "id")
    assert left == {FLUSH}, f"state left for {len(left)} ids: timers did not clean up"
    print(f"pairs={len(got)} epochs={len(committed_epochs(spark_ckpt))}")
