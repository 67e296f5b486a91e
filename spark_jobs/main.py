"""spark-submit entry file: `spark-submit [--packages/--jars ...] spark_jobs/main.py run --job ...`.

Under spark-submit the SparkSession comes from the submit's configuration (master, jars); the
flags are the CLI's (spark_jobs/cli.py).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs.cli import config_from_args, parser, run, setup_logging  # noqa: E402


def main() -> int:
    setup_logging()
    args = parser().parse_args(sys.argv[1:])
    from pyspark.sql import SparkSession

    from spark_jobs.session import SESSION_TIME_ZONE

    spark = (SparkSession.builder.appName(f"ballast-{args.job}")
             .config("spark.sql.session.timeZone", SESSION_TIME_ZONE).getOrCreate())
    return run(config_from_args(args), spark=spark, chain=args.operator)


if __name__ == "__main__":
    sys.exit(main())
