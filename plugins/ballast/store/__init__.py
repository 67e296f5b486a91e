"""The metrics DB's one store: every read and write of it goes through this package.

One module per concern (maps and heartbeats, per-epoch metrics, step checkpoints, DS2's
decisions, events, the step decision log, plans/steps/claims, console reads, retention, the data
plane's epoch writer and its drivers' fencing tokens), each returning frozen dataclasses, never
ORM objects. `JobStore` binds the DB url, job and operator for callers that work on one
operator; the functions below are the same reads with the url (and job, operator) passed in.
Framework-free: SQLAlchemy only, no Airflow or Spark, because the data plane's driver imports it too.
"""

from __future__ import annotations

from ballast.store.console import (
    BinRange as BinRange,
)
from ballast.store.console import (
    EventRecord as EventRecord,
)
from ballast.store.console import (
    JobRow as JobRow,
)
from ballast.store.console import (
    SeriesPoint as SeriesPoint,
)
from ballast.store.console import (
    WorkerLoad as WorkerLoad,
)
from ballast.store.console import (
    bin_range as bin_range,
)
from ballast.store.console import (
    dead_letter_counts as dead_letter_counts,
)
from ballast.store.console import (
    decisions_since as decisions_since,
)
from ballast.store.console import (
    epoch_at_or_after as epoch_at_or_after,
)
from ballast.store.console import (
    epoch_series as epoch_series,
)
from ballast.store.console import (
    event_kinds as event_kinds,
)
from ballast.store.console import (
    events_since as events_since,
)
from ballast.store.console import (
    latest_epoch as latest_epoch,
)
from ballast.store.console import (
    list_jobs as list_jobs,
)
from ballast.store.console import (
    map_versions as map_versions,
)
from ballast.store.console import (
    rejected_checkpoints as rejected_checkpoints,
)
from ballast.store.console import (
    worker_load as worker_load,
)
from ballast.store.decisions import (
    DecisionRecord as DecisionRecord,
)
from ballast.store.decisions import (
    latest_decision as latest_decision,
)
from ballast.store.decisions import (
    link_decision as link_decision,
)
from ballast.store.decisions import (
    save_decision as save_decision,
)
from ballast.store.event_log import (
    EventRow as EventRow,
)
from ballast.store.event_log import (
    add_event as add_event,
)
from ballast.store.event_log import (
    events as events,
)
from ballast.store.fencing import (
    Fence as Fence,
)
from ballast.store.fencing import (
    Fenced as Fenced,
)
from ballast.store.fencing import (
    TokenRow as TokenRow,
)
from ballast.store.fencing import (
    take_token as take_token,
)
from ballast.store.fencing import (
    token_row as token_row,
)
from ballast.store.job_store import JobStore as JobStore
from ballast.store.maps import (
    HeartbeatRow as HeartbeatRow,
)
from ballast.store.maps import (
    MapSnapshot as MapSnapshot,
)
from ballast.store.maps import (
    heartbeat as heartbeat,
)
from ballast.store.maps import (
    latest_map as latest_map,
)
from ballast.store.maps import (
    map_at as map_at,
)
from ballast.store.metrics import (
    BinStats as BinStats,
)
from ballast.store.metrics import (
    EpochRow as EpochRow,
)
from ballast.store.metrics import (
    WorkerRow as WorkerRow,
)
from ballast.store.metrics import (
    bin_stats as bin_stats,
)
from ballast.store.metrics import (
    epoch_rows as epoch_rows,
)
from ballast.store.metrics import (
    epoch_window as epoch_window,
)
from ballast.store.metrics import (
    worker_rows as worker_rows,
)
from ballast.store.metrics import (
    worker_window as worker_window,
)
from ballast.store.plans import (
    CLAIM_TIMEOUT_S as CLAIM_TIMEOUT_S,
)
from ballast.store.plans import (
    OPEN_STATUSES as OPEN_STATUSES,
)
from ballast.store.plans import (
    OWNER_LEASE_S as OWNER_LEASE_S,
)
from ballast.store.plans import (
    PlanConflict as PlanConflict,
)
from ballast.store.plans import (
    PlanRecord as PlanRecord,
)
from ballast.store.plans import (
    StepRecord as StepRecord,
)
from ballast.store.plans import (
    claim_step_emission as claim_step_emission,
)
from ballast.store.plans import (
    conflict_message as conflict_message,
)
from ballast.store.plans import (
    current_owner as current_owner,
)
from ballast.store.plans import (
    get_plan as get_plan,
)
from ballast.store.plans import (
    last_finished_plan as last_finished_plan,
)
from ballast.store.plans import (
    latest_plan as latest_plan,
)
from ballast.store.plans import (
    mark_step_emitted as mark_step_emitted,
)
from ballast.store.plans import (
    new_claimant as new_claimant,
)
from ballast.store.plans import (
    open_plans as open_plans,
)
from ballast.store.plans import (
    plan_steps as plan_steps,
)
from ballast.store.plans import (
    recent_plans as recent_plans,
)
from ballast.store.plans import (
    release_step_claim as release_step_claim,
)
from ballast.store.plans import (
    save_plan as save_plan,
)
from ballast.store.plans import (
    set_plan_status as set_plan_status,
)
from ballast.store.plans import (
    take_over_plan as take_over_plan,
)
from ballast.store.plans import (
    touch_owner as touch_owner,
)
from ballast.store.plans import (
    what_to_do as what_to_do,
)
from ballast.store.retention import (
    CHUNK_EPOCHS as CHUNK_EPOCHS,
)
from ballast.store.retention import (
    DEFAULT_KEEP as DEFAULT_KEEP,
)
from ballast.store.retention import (
    DEFAULT_KEEP_EPOCHS as DEFAULT_KEEP_EPOCHS,
)
from ballast.store.retention import (
    Pruned as Pruned,
)
from ballast.store.retention import (
    prune_epoch_metrics as prune_epoch_metrics,
)
from ballast.store.retention import (
    prune_job as prune_job,
)
from ballast.store.retention import (
    retention_cutoff as retention_cutoff,
)
from ballast.store.step_checkpoints import (
    CheckpointRow as CheckpointRow,
)
from ballast.store.step_checkpoints import (
    checkpoint_row as checkpoint_row,
)
from ballast.store.step_checkpoints import (
    checkpoints as checkpoints,
)
from ballast.store.step_checkpoints import (
    job_in_force as job_in_force,
)
from ballast.store.step_checkpoints import (
    job_settings as job_settings,
)
from ballast.store.step_checkpoints import (
    recent_checkpoints as recent_checkpoints,
)
from ballast.store.step_log import (
    HandoverRecord as HandoverRecord,
)
from ballast.store.step_log import (
    first_decision_epoch as first_decision_epoch,
)
from ballast.store.step_log import (
    handover_record as handover_record,
)
from ballast.store.step_log import (
    latest_handover as latest_handover,
)
from ballast.store.step_log import (
    latest_step_note as latest_step_note,
)
