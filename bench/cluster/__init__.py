"""Experiment 5, `cluster`: what the cluster-native data plane costs and buys, each figure a ratio
against a baseline measured in the same run.

1. `durable_vs_local` — per-epoch cost of durable state (changelog objects, snapshots, manifests
   under `--state-uri`) against the previous data plane's local-only LMDB stores (git commit
   `255fb5a`, run from a `git worktree` checkout): same key-count job, local[2], same input topic,
   same open-loop load and trigger, one after the other. Median `epoch_metrics.batch_ms` and
   `worker_metrics.useful_ms` per epoch from each run's own metrics DB.
2. `precopy` — the cut-over pause of one step with `"precopy": true` against the same step without:
   one local[2] job with a prefilled state, single-step plans moving the same bins back and forth.
   The receiving tasks' move time (`checkpoints.migration_ms`: `moved_in` ms summed per receiving
   worker, max over workers) and the cut-over epoch's `batch_ms`.
3. `recovery` — SIGKILL of one executor on a loopback standalone cluster (2 workers x 1 core):
   time from the kill to the first epoch committed after it, against Spark's own RocksDB
   `groupBy(key).count()` (bench/native_job.py) on the same cluster, same input, same kill.
4. `scale_out` — the same cluster grown to 4 workers while the job holds 2 executors (W=2);
   under an open-loop load above what W=2 sustains, a batched plan to W=4: throughput before and
   after, and the longest gap between epochs during the change.

`python -m bench.run --full --only cluster`; the profile is CLUSTER_SMOKE / CLUSTER_FULL below,
overridable with `--set 'extra={"cluster": {"keys": 500000}}'`. docs/benchmarks.md explains it.

Modules: `profile` (CLUSTER_SMOKE / CLUSTER_FULL), `procs`, `metrics` (the run's metrics DB),
`local` (1 + 2), `standalone` (3 + 4), `experiment` (exp_cluster, the summary), `writeup` (files).
"""

from bench.cluster.experiment import exp_cluster, summarize
from bench.cluster.profile import CLUSTER_FULL, CLUSTER_SMOKE, OLD_COMMIT, ClusterProfile, profile_for
from bench.cluster.writeup import readme, report_section

__all__ = ["CLUSTER_FULL", "CLUSTER_SMOKE", "OLD_COMMIT", "ClusterProfile", "exp_cluster", "profile_for", "readme",
           "report_section", "summarize"]
