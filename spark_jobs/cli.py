"""`python -m spark_jobs.cli run ...`: start a Ballast job and keep it running until SIGTERM.

SIGTERM/SIGINT stop the query after the current epoch (exit code 0); a failed query exits 1; a start
refused before any epoch (another job's state, a changed --bins, ...) exits 2 with the reason; a
driver fenced by a newer driver of its job exits 3 (`FENCED_EXIT`) having committed nothing more.
`python -m spark_jobs.cli stop --checkpoint-dir D` does the same through a file, which also works
under spark-submit (there the JVM is the parent process and handles SIGTERM itself, abruptly).
The same entry point runs under spark-submit via spark_jobs/main.py.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Any

from ballast.errors import BallastError
from ballast.kafka_security import ENV_CONFIG, KafkaSecurity
from ballast.options import settings
from ballast.policy.signals import SignalConfig
from ballast.protocol import MAX_MESSAGE_BYTES
from ballast.signing import DEFAULT_MAX_AGE_S, ENV_KEYS, load_keyring
from ballast.store.fencing import Fenced
from spark_jobs.chain import ChainRunner, OperatorSpec, check_unique
from spark_jobs.fencing import FENCED_EXIT
from spark_jobs.runner import JobRunner, RunConfig
from spark_jobs.txn_output import OUTPUT_MODES, TRANSACTIONAL


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ballast-job", description="Ballast data plane: a migratable stateful job")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a job until SIGTERM")
    r.add_argument("--job", required=True, help="job name; topics <job>.control, <job>.control.acks, <job>.output")
    r.add_argument("--operator", action="append", default=None,
                   help="keycount | wordcount | package.module:Class (an Operator or a stateful processor, "
                        "docs/operators.md); repeat as NAME=PATH for a chain of operators, each reading the "
                        "previous one's output (default keycount)")
    r.add_argument("--input-topic", required=True,
                   help="the (first) operator's input; several comma-separated topics for a join")
    r.add_argument("--bins", type=int, default=256, help="B = 2^k, fixed at the first start")
    r.add_argument("--workers", type=int, default=2, help="initial W (first start only)")
    r.add_argument("--checkpoint-dir", required=True)
    r.add_argument("--state-uri", default=None,
                   help="where bin state lives for good: a path or hdfs://, s3://, gs://, abfs:// URI that the "
                        "driver and every executor reach (default <checkpoint-dir>/state)")
    r.add_argument("--cache-dir", default=None,
                   help="workers' local state caches (default: each executor's own work directory)")
    r.add_argument("--snapshot-every", type=int, default=10, help="epochs with changes between state snapshots")
    r.add_argument("--max-workers", type=int, default=None,
                   help="the most workers the cluster can run (default: the standalone master's alive cores)")
    r.add_argument("--master-ui", default=None, help="standalone master web UI URL, to ask its capacity")
    r.add_argument("--allow-data-loss", action="store_true",
                   help="let the job go on when Kafka retention deleted records it had not read (default: fail)")
    r.add_argument("--bootstrap", default=settings().kafka_bootstrap)
    r.add_argument("--db-url", default=None,
                   help="default $BALLAST_DB_URL (how the supervisor passes it: argv is visible to every user "
                        "through ps, so keep a URL with a password out of it) or the repo's SQLite file")
    r.add_argument("--trigger-ms", type=int, default=1000)
    r.add_argument("--max-offsets-per-trigger", type=int, default=None)
    r.add_argument("--output-partitions", type=int, default=2)
    r.add_argument("--output-mode", choices=OUTPUT_MODES, default=TRANSACTIONAL,
                   help="keyed operators: write each task's outputs in a Kafka transaction with a commit marker "
                        "(exactly once for read_committed consumers), or through Spark's Kafka sink (at least "
                        "once: consumers drop seen ballast-ids); stateless queries are always at least once")
    r.add_argument("--no-trace", dest="trace", action="store_false",
                   help="build no epoch trace: no critical-path line, nothing stored for the console, the export "
                        "and the controller (docs/tracing.md; to measure what tracing costs)")
    r.add_argument("--signal-epochs", type=int, default=5,
                   help="wake the rebalance DAG (a record on <job>.signals) when the backlog grows, or the epochs "
                        "stay outside the busy band, for this many epochs in a row (0: never; docs/airflow.md)")
    r.add_argument("--signal-hold-s", type=float, default=60.0, help="at most one signal per this many seconds")
    r.add_argument("--signal-idle-hold-s", type=float, default=600.0,
                   help="at most one `idle` signal per this many seconds (the guards' scale-down delay)")
    r.add_argument("--signal-band", default="0.5,0.9", metavar="LOW,HIGH",
                   help="busy band: batch time / budget below LOW (idle) or above HIGH (busy) signals")
    r.add_argument("--signal-budget-ms", type=float, default=None,
                   help="the batch budget busy is measured against (default: --trigger-ms)")
    r.add_argument("--signal-workers", default=None, metavar="MIN,MAX",
                   help="the job's worker bounds: no idle signal at MIN, no busy one at MAX")
    r.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve the job's Prometheus metrics on 127.0.0.1:PORT/metrics (0: a free port, logged); "
                        "default: no endpoint (docs/operations.md, 'Prometheus metrics')")
    r.add_argument("--spark-ui", action="store_true",
                   help="run Spark's web UI (off by default: it costs every epoch); the heartbeat records its "
                        "address and the console links to it")
    r.add_argument("--max-future-s", type=float, default=86400.0, help="reject steps effective later than this")
    r.add_argument("--max-control-bytes", type=int, default=MAX_MESSAGE_BYTES,
                   help="a control record larger than this is rejected before parsing (default 1 MiB)")
    r.add_argument("--control-keys", default=None, metavar="FILE",
                   help="JSON {key id: secret} of the keys control messages must be signed with (default: "
                        f"${ENV_KEYS}; neither = unsigned mode, for local use only)")
    r.add_argument("--control-max-age-s", type=float, default=DEFAULT_MAX_AGE_S,
                   help="signed mode: reject a message issued longer ago than this")
    r.add_argument("--db-outage-s", type=float, default=600.0,
                   help="how long an epoch waits for an unreachable metrics DB before the job fails")
    r.add_argument("--kafka-outage-s", type=float, default=300.0,
                   help="how long the job's Kafka clients (Spark's included) wait for an unreachable broker")
    r.add_argument("--kafka-config", default=None, metavar="FILE",
                   help="JSON of Kafka client properties (security.protocol, sasl.mechanism, sasl.username, "
                        "sasl.password, ssl.ca.location) as in the Kafka provider's connection extra "
                        f"(default: ${ENV_CONFIG}, else PLAINTEXT)")
    r.add_argument("--master", default=None, help="Spark master (default $SPARK_MASTER or local[2])")
    st = sub.add_parser("stop", help="ask a running job to stop after its current epoch (works under spark-submit)")
    st.add_argument("--checkpoint-dir", required=True)
    return ap


def config_from_args(a: argparse.Namespace) -> RunConfig:
    from ballast.store.schema import default_url

    first = (a.operator or ["keycount"])[0]  # NAME=PATH names a single operator too
    return RunConfig(
        job=a.job, operator=first.partition("=")[0], operator_path=first.partition("=")[2] or None,
        input_topic=a.input_topic, bins=a.bins, workers=a.workers,
        checkpoint_dir=a.checkpoint_dir, state_uri=a.state_uri, cache_dir=a.cache_dir,
        snapshot_every=a.snapshot_every, fail_on_data_loss=not a.allow_data_loss, max_workers=a.max_workers,
        master_ui=a.master_ui, bootstrap=a.bootstrap,
        db_url=a.db_url or default_url(), trigger_ms=a.trigger_ms, max_offsets_per_trigger=a.max_offsets_per_trigger,
        output_partitions=a.output_partitions, output_mode=a.output_mode, trace=a.trace, max_future_s=a.max_future_s,
        max_control_bytes=a.max_control_bytes, metrics_port=a.metrics_port,
        control_keyring=load_keyring(a.control_keys, max_age_s=a.control_max_age_s),
        kafka_security=KafkaSecurity.from_file(a.kafka_config) if a.kafka_config else KafkaSecurity.from_env(),
        db_outage_s=a.db_outage_s, kafka_outage_s=a.kafka_outage_s, signal=signal_from_args(a), spark_ui=a.spark_ui,
    )


def spark_ui_conf(on: bool) -> dict[str, str]:
    """Spark's UI for `--spark-ui` (off otherwise: its listeners cost every epoch); on the driver's
    address (127.0.0.1 in local mode) and the first free port from 4040, which the heartbeat reports."""
    return {"spark.ui.enabled": "true"} if on else {}


def signal_from_args(a: argparse.Namespace) -> SignalConfig:
    """The `--signal-*` flags as thresholds; a malformed pair is a usage error that names the flag."""
    def pair(flag: str, text: str, cast: type) -> tuple[Any, Any]:
        try:
            lo, hi = (cast(x) for x in text.split(","))
        except ValueError:
            raise SystemExit(f"ballast-job: {flag} wants two comma-separated numbers, got {text!r}") from None
        return lo, hi

    low, high = pair("--signal-band", a.signal_band, float)
    wmin, wmax = pair("--signal-workers", a.signal_workers, int) if a.signal_workers else (1, 1 << 16)
    try:
        return SignalConfig(epochs=a.signal_epochs, hold_s=a.signal_hold_s, idle_hold_s=a.signal_idle_hold_s,
                            busy_low=low, busy_high=high, budget_ms=a.signal_budget_ms or float(a.trigger_ms or 1000),
                            min_workers=wmin, max_workers=wmax)
    except ValueError as exc:
        raise SystemExit(f"ballast-job: {exc}") from None


def run(cfg: RunConfig, master: str | None = None, spark=None, chain: list[str] | None = None) -> int:
    """`chain`: the `--operator` values when there are several (a multi-operator job)."""
    from migrations_db.db import migrate
    from spark_jobs.session import build_spark

    # a fresh metrics DB (first start, new BALLAST_DB_URL) works without a separate `make db`;
    # upgrading an up-to-date schema is a no-op
    migrate(cfg.db_url)
    try:
        spark = spark or build_spark(f"ballast-{cfg.job}", master=master,
                                     conf={"spark.ui.showConsoleProgress": "false", **spark_ui_conf(cfg.spark_ui)},
                                     checkpoint=cfg.checkpoint_dir)
    except BallastError as exc:  # e.g. S3A's jars missing for a checkpoint on s3://: say what to do
        logging.getLogger("ballast.cli").error("%s", exc)
        return 2
    runner: JobRunner | ChainRunner = (ChainRunner(spark, cfg, [OperatorSpec.parse(o) for o in chain])
                                       if chain and len(chain) > 1 else JobRunner(spark, cfg))

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("ballast.cli").info("signal %d: stopping after the current epoch", signum)
        runner.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        runner.start()
    except BallastError as exc:  # refused before any epoch (spark_jobs.binding, journal): say why, no traceback
        logging.getLogger("ballast.cli").error("%s", exc)
        return 2
    try:
        runner.await_termination()
    except Fenced as exc:  # a newer driver took over: not a failure to restart from
        logging.getLogger("ballast.cli").error("%s", exc)
        return FENCED_EXIT
    except RuntimeError as exc:
        logging.getLogger("ballast.cli").error("%s", exc)
        return 1
    return 0


def setup_logging() -> None:
    logging.basicConfig(level=settings().log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("kafka").setLevel(logging.WARNING)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # the start-up schema check is not news


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    a = parser().parse_args(argv)
    if a.cmd == "run":
        from spark_jobs.operator_loader import get_operator

        ops = a.operator or ["keycount"]
        try:  # before Spark starts: a wrong import path fails in a second, with what to do
            specs = [OperatorSpec.parse(o) for o in ops] if len(ops) > 1 else []
            check_unique(specs)
            for path in [s.path for s in specs] or [ops[0].partition("=")[2] or ops[0]]:
                get_operator(path)
        except ValueError as exc:
            print(f"ballast-job: error: {exc}", file=sys.stderr)
            return 2
        return run(config_from_args(a), master=a.master, chain=ops)
    if a.cmd == "stop":
        from spark_jobs.storage import Location

        stop = Location.of(a.checkpoint_dir) / "ballast" / "STOP"
        if not (Location.of(a.checkpoint_dir) / "ballast" / "job.json").exists():
            print(f"no Ballast job state in {a.checkpoint_dir}", file=sys.stderr)
            return 1
        stop.write_bytes(b"")
        print(f"stop requested: {stop}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
