"""The ids of the DAGs Ballast's DAG files create, in one place: the DAG files name their DAGs with
these and the console links to them, so a renamed DAG cannot leave the console pointing at nothing.
Framework-free (the console's process imports no DAG file)."""

from __future__ import annotations

__all__ = ["MIGRATE", "RETENTION", "UPGRADE", "rebalance", "supervise"]

MIGRATE = "ballast_migrate"  # manual migrations: the console's trigger form
RETENTION = "ballast_retention"  # prunes the metrics DB
UPGRADE = "ballast_upgrade"  # live code upgrades of a job's processor


def rebalance(job: str) -> str:
    """The job's rebalance DAG (DS2 -> placement -> plan -> emit -> await -> verify)."""
    return f"ballast_rebalance__{job}"


def supervise(job: str) -> str:
    """The job's supervise DAG (keeps its driver running)."""
    return f"ballast_supervise__{job}"
