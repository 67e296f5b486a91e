"""`python -m ballast.launch --job J`: run one `SparkSubmitHook.submit()` for the life of a driver.

Why a process of its own: in client mode (the only mode Spark standalone offers Python apps)
`submit()` blocks until the driver exits, and an Airflow task must return within minutes. The
supervisor starts this launcher detached (own session, pid file) and returns; the launcher holds
the spark-submit, whose output goes to the job's driver.log.

Input comes from the environment, never argv (argv is readable by every user through `ps`):
BALLAST_SUBMIT (JSON: the hook's keyword arguments and the application file, no secrets),
AIRFLOW_CONN_<ID> (the Spark connection the task resolved), and the job's own secrets
(BALLAST_DB_URL, BALLAST_KAFKA_CONFIG, BALLAST_CONTROL_KEYS), which spark-submit and the Python
driver inherit. `--job` only names the process, so the supervisor can tell it is ours.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from ballast.options import settings

ENV_SUBMIT = "BALLAST_SUBMIT"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ballast-launch", description=__doc__.splitlines()[0])
    ap.add_argument("--job", required=True, help="the job this launcher runs (names the process)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    raw = settings().submit
    if not raw:
        print(f"${ENV_SUBMIT} is not set: this launcher is started by ballast.supervisor.launch, not by hand",
              file=sys.stderr)
        return 2
    spec = json.loads(raw)
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    hook = SparkSubmitHook(**spec["hook"])
    logging.getLogger("ballast.launch").info("job %s: spark-submit %s", a.job, spec["application"])
    try:
        hook.submit(spec["application"])
    except Exception as exc:  # the hook's message carries the masked command and the log tail
        logging.getLogger("ballast.launch").error("job %s: spark-submit failed: %s", a.job, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
