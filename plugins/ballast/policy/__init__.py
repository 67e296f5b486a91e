"""Ballast policy: the pure-Python brain of the control plane.

collect (DAG) -> `evaluate` (DS2) -> `evaluate_guards` -> `critical_path_check` -> `place` ->
`choose_bin_modes` (transfer, pre-copy or handover per bin) -> `plan_migration` -> emit (DAG).
Module imports run one way: plan (the shapes) <- costmodel <- planner; dataflow (DS2's inputs)
<- rates (its measurement) <- ds2; guards, placement, split, critical stand alone
(tests/policy/test_imports.py imports each one alone).
No Airflow, Spark, Kafka or SQLAlchemy import here, on purpose: the policy is unit-tested in
milliseconds and the DAGs stay thin. Formulas and their tests: docs/policy.md.
"""

from ballast.policy import autotune
from ballast.policy.costmodel import (
    CheckpointSample,
    CostModel,
    fit_cost_model,
    render_plan,
)
from ballast.policy.critical import (
    BinWeights,
    UsefulTime,
    bin_weights,
    critical_path_check,
    folds_ms,
    folds_share,
    scale_up_gain,
    useful_time,
    workers_share,
)
from ballast.policy.ds2 import (
    Dataflow,
    DS2Result,
    EpochMetrics,
    OperatorNode,
    OperatorRates,
    OperatorTarget,
    SourceLoad,
    WorkerEpochMetrics,
    backlog_growth,
    bottleneck_outside_operators,
    ds2_microbatch,
    ds2_pipelined,
    estimate_overhead_s,
    evaluate,
    microbatch_duration_s,
    microbatch_max_rate,
    operator_rates,
    source_load,
)
from ballast.policy.guards import (
    GuardConfig,
    GuardState,
    GuardVerdict,
    Observation,
    evaluate_guards,
    record_change,
)
from ballast.policy.movemodes import (
    MOVE_MODES,
    DeclaredWindow,
    ModeBudgets,
    MoveMode,
    MoveModes,
    choose_bin_modes,
)
from ballast.policy.placement import (
    PlacementStats,
    moved_bins,
    place,
    placement_stats,
    uniform_map,
    worker_loads,
)
from ballast.policy.plan import (
    ORDERS,
    STRATEGIES,
    MigrationPlan,
    MigrationStep,
    apply_moves,
    merge_plan,
    settings_plan,
    split_plan,
    upgrade_plan,
)
from ballast.policy.planner import choose_plan, plan_migration
from ballast.policy.split import SplitAdvice, split_advice

__all__ = [
    "SplitAdvice", "split_advice", "split_plan", "merge_plan", "settings_plan", "upgrade_plan", "autotune",
    "critical_path_check", "scale_up_gain", "workers_share", "BinWeights", "bin_weights", "folds_share",
    "UsefulTime", "folds_ms", "useful_time",
    "CheckpointSample", "CostModel", "choose_plan", "fit_cost_model", "render_plan",
    "Dataflow", "DS2Result", "EpochMetrics", "OperatorNode", "OperatorRates", "OperatorTarget",
    "SourceLoad", "WorkerEpochMetrics", "backlog_growth", "bottleneck_outside_operators", "ds2_microbatch",
    "ds2_pipelined", "estimate_overhead_s",
    "evaluate", "microbatch_duration_s", "microbatch_max_rate", "operator_rates", "source_load",
    "GuardVerdict", "GuardConfig", "GuardState", "Observation", "evaluate_guards", "record_change",
    "PlacementStats", "moved_bins", "place", "placement_stats", "uniform_map", "worker_loads",
    "ORDERS", "STRATEGIES", "MigrationPlan", "MigrationStep", "apply_moves", "plan_migration",
    "MOVE_MODES", "DeclaredWindow", "ModeBudgets", "MoveMode", "MoveModes", "choose_bin_modes",
]
