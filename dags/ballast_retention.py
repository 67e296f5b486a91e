"""ballast_retention: daily pruning of the per-epoch metrics tables (bin, worker and epoch metrics).

Keeps the last `keep_hours` hours and at least the last `keep_epochs` epochs of every job, and
every bin's newest row (ballast.store.retention says why each bound is what the controller and the
console need). Decisions, plans, checkpoints and events are not per-epoch and are not touched.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from ballast import dag_ids
from ballast.store.retention import DEFAULT_KEEP, DEFAULT_KEEP_EPOCHS

with DAG(
    dag_id=dag_ids.RETENTION,
    description="Delete per-epoch metrics older than the retention window",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
    params={
        "keep_hours": Param(DEFAULT_KEEP.total_seconds() / 3600, type="number", minimum=1, title="Keep (hours)",
                            description="Per-epoch rows that ended within this many hours are kept "
                                        "(the console shows at most 24 h)."),
        "keep_epochs": Param(DEFAULT_KEEP_EPOCHS, type="integer", minimum=1, title="Keep at least (epochs)",
                             description="The newest epochs of each job kept whatever their age."),
    },
    tags=["ballast"],
    doc_md=__doc__,
) as dag:

    @task(task_id="prune")
    def prune(params: dict | None = None) -> list[dict]:
        from dataclasses import asdict

        from ballast.hooks import BallastMetricsDbHook
        from ballast.store.retention import prune_epoch_metrics

        assert params is not None
        out = prune_epoch_metrics(BallastMetricsDbHook().url(), keep=timedelta(hours=float(params["keep_hours"])),
                                  keep_epochs=int(params["keep_epochs"]))
        for p in out:
            print(f"{p.job}/{p.operator}: kept from epoch {p.keep_from_epoch}; deleted {p.epoch_rows} epoch, "
                  f"{p.worker_rows} worker, {p.bin_rows} bin row(s)")
        return [asdict(p) for p in out]

    prune()
