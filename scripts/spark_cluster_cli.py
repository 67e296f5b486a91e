"""`python scripts/spark_cluster_cli.py up|down|status --dir D [--workers N] [--cores C] [--memory M]`:
a loopback Spark standalone cluster (scripts/spark_cluster.py) for people. `up` starts it and records
it in D/cluster.json, leaving it running; `status` shows workers, apps and executors; `down` stops
every process it started (by pid)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # the modules beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_cluster import STATE_FILE, SparkCluster, start_cluster  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A Spark standalone cluster on 127.0.0.1")
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--dir", type=Path, required=True, help="base dir (logs, worker dirs, cluster.json)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="1g", help="memory per worker")
    args = parser.parse_args(argv)
    state = args.dir / STATE_FILE
    if args.action == "up":
        if state.exists() and SparkCluster.load(args.dir).processes():
            print(f"already running (see {state}); `down` first", file=sys.stderr)
            return 1
        t0 = time.monotonic()
        cluster = start_cluster(args.dir, args.workers, args.cores, args.memory, stop_at_exit=False)
        cluster.save()
        print(f"up in {time.monotonic() - t0:.1f}s: {cluster.master_url}  UI {cluster.ui_url}  ({state})")
        return 0
    if not state.exists():
        print(f"no cluster recorded in {state}", file=sys.stderr)
        return 1
    cluster = SparkCluster.load(args.dir)
    if args.action == "down":
        cluster.stop()
        state.unlink()
        print("stopped")
        return 0
    st = cluster._try_status()
    if st is None:
        print(f"master {cluster.ui_url} not answering; live processes: {cluster.processes()}")
        return 1
    print(f"{cluster.master_url}  UI {cluster.ui_url}  status {st.get('status')}")
    for w in st["workers"]:
        print(f"  {w['id']}  {w['state']}  cores {w['coresused']}/{w['cores']}  mem {w['memoryused']}/{w['memory']}MB")
    for app in st.get("activeapps", []):
        print(f"  app {app['id']} {app['name']} cores {app['cores']} {app['state']}")
    for ex in cluster.executors():
        print(f"  executor {ex.app_id}/{ex.executor_id} pid {ex.pid} on worker-{ex.worker_index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
