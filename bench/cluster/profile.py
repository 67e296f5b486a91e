"""The cluster experiment's profile: sizes, rates and timeouts of its smoke and full runs."""

from __future__ import annotations

from dataclasses import dataclass

from bench.experiments import Ctx
from bench.experiments.common import own_profile

OLD_COMMIT = "255fb5a"  # the last data plane with local-only stores (no --state-uri)


@dataclass
class ClusterProfile:
    # 1 + 2: one local[2] topic; the old and the new data plane read it one after the other
    keys: int = 100_000
    bins: int = 64
    rate: float = 1000.0  # open-loop rows/s during the measured windows
    trigger_ms: int = 500
    max_offsets: int = 50_000  # maxOffsetsPerTrigger (catch-up of the prefill)
    steady_s: float = 8.0  # measured window per data plane
    skip_s: float = 2.0  # dropped at the start of each window (end of the catch-up)
    min_epochs: int = 6  # the window lasts until this many epochs started in it (a loaded machine is slow)
    precopy_fraction: float = 0.25  # of the bins, moved by each single-step plan
    precopy_reps: int = 1  # pairs (without, with); directions and order alternate
    settle_epochs: int = 2  # epochs between two plans
    # 3 + 4: a loopback standalone cluster, 1 core per worker, the job submitted in client mode
    cluster_keys: int = 6_000
    cluster_bins: int = 32
    cluster_trigger_ms: int = 500
    cluster_max_offsets: int = 2_000
    recovery_rate: float = 300.0
    recovery_steady_s: float = 4.0
    kill_delay_s: float = 0.2  # after an observed commit: the kill lands early in the next epoch
    recovery_timeout_s: float = 240.0
    observe_s: float = 12.0  # after the kill, the same window for both systems
    scale_rate: float = 2_500.0  # above what W=2 sustains at cluster_max_offsets per epoch
    scale_warm_s: float = 3.0
    scale_window_s: float = 5.0
    scale_min_epochs: int = 4  # each throughput window lasts at least this many epochs
    scale_steps: int = 2
    scale_settle_s: float = 2.0
    timeout_s: float = 900.0


# smoke: every figure measured on the fewest epochs, rows and seconds that still give it (the test checks
# counts, not times; the full run's windows are below)
CLUSTER_SMOKE = ClusterProfile(
    keys=50_000, steady_s=4.0, min_epochs=4, cluster_keys=3_000, recovery_steady_s=3.0, observe_s=8.0,
    scale_warm_s=2.0,
)
CLUSTER_FULL = ClusterProfile(
    keys=2_000_000, bins=256, rate=2_000.0, max_offsets=200_000, steady_s=40.0, skip_s=4.0, min_epochs=30,
    precopy_reps=3,
    settle_epochs=4, cluster_keys=200_000, cluster_bins=128, cluster_max_offsets=5_000, recovery_rate=500.0,
    recovery_steady_s=15.0, observe_s=90.0, scale_rate=4_000.0, scale_warm_s=10.0, scale_window_s=30.0,
    scale_min_epochs=12,
    scale_steps=4, scale_settle_s=5.0, timeout_s=3600.0,
)


def profile_for(ctx: Ctx) -> ClusterProfile:
    return own_profile(ctx, "cluster", CLUSTER_SMOKE, CLUSTER_FULL)
