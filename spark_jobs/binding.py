"""State belongs to its checkpoint, both ways: the binding between a checkpoint dir and its store.

Why: Spark's checkpoint says which Kafka offsets are done, the store (spark_jobs.durable) holds
what those offsets folded into. Started on a checkpoint with the wrong store — a `--state-uri`
with a typo, an emptied location, another job's state, a backup older or newer than the
checkpoint — a job used to run on without a word and emit wrong answers (k0 = 10 where 110 was
right). So each side names the other, and a start compares them before any epoch runs:

    <checkpoint-dir>/ballast/binding.json   checkpoint id, store id, state URI, job, operator, bins, key schema
    <state>/store.json                      job, bins, store id, operator, key schema, checkpoint id and URI
    metrics DB, jobs.config["binding"]      the checkpoint id and store id of the job row's deployment

The checkpoint side is written at the first start (before its first epoch) and changes only by
`python -m spark_jobs.relocate` (moving state on purpose); `<checkpoint-dir>/ballast/relocate.json`
marks a relocation under way, and a start refuses until it is finished.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ballast.errors import BallastError
from ballast.policy.handover import WindowSpec
from ballast.policy.movemodes import DeclaredWindow
from spark_jobs.durable import DurableState
from spark_jobs.journal import Journal
from spark_jobs.offsets import committed_epochs, epoch_ranges
from spark_jobs.operators import Operator
from spark_jobs.run_config import RunConfig
from spark_jobs.storage import Location

BINDING = "binding.json"
RELOCATION = "relocate.json"
BEHIND_SCAN = 50  # committed epochs looked at (newest first) for the last one that had input


class BindingMismatch(BallastError, RuntimeError):
    """The checkpoint, the state location and the metrics DB do not belong to one another."""


@dataclass(frozen=True)
class Expected:
    """What a start asks for: its job, operator, first `--bins`, key schema and both locations."""

    job: str
    operator: str
    bins: int
    key_schema: str
    checkpoint: str
    state_uri: str


def key_schema(op: Operator) -> str:
    """How the operator turns records into store keys. A processor's keys are the JSON of its grouping
    columns; an operator may declare `key_schema` (a string it changes when its `keyed` changes
    what a key means); otherwise its class's `keyed` is the schema."""
    spec = getattr(op, "spec", None)
    if spec is not None and hasattr(spec, "grouping_keys"):
        return "grouping:" + json.dumps(list(spec.grouping_keys))
    declared = getattr(op, "key_schema", None)
    if declared:
        return str(declared)
    owner = next(c for c in type(op).__mro__ if "keyed" in vars(c))
    return "kafka-key" if owner is Operator else f"keyed:{owner.__module__}.{owner.__qualname__}"


def same_location(a: str, b: str) -> bool:
    """One place, however written (`/x/state/`, `file:///x/state`, `/x/./state`)."""
    la, lb = Location.of(a), Location.of(b)
    return bool(la.fs.type_name == lb.fs.type_name and _norm(la.path) == _norm(lb.path))


def _norm(path: str) -> str:
    import posixpath

    return posixpath.normpath(path) if path.startswith("/") else path


def relocate_command(checkpoint: str, to: str) -> str:
    return f"python -m spark_jobs.relocate --checkpoint-dir {checkpoint} --to {to}"


# ------------------------------------------------------------------------- the comparison ------
def problems(want: Expected, binding: dict[str, Any] | None, store: dict[str, Any] | None, committed: int,
             relocation: dict[str, Any] | None = None) -> list[str]:
    """Why this start must be refused (empty: it may run). `binding` is the checkpoint's record,
    `store` the store.json at the asked-for location, `committed` Spark's last committed epoch
    (-1: none). Each message names both sides and says what to do."""
    ck = want.checkpoint
    if relocation is not None:
        return [f"a relocation of this job's state from {relocation.get('from')} to {relocation.get('to')} is "
                f"unfinished (checkpoint {ck}): finish it with `{relocate_command(ck, relocation.get('to', '?'))}` "
                "(it resumes where it stopped), then start with --state-uri set to the new location"]
    if binding is not None:
        bound = str(binding["state_uri"])
        if not same_location(bound, want.state_uri):
            return [f"state location: checkpoint {ck} keeps its state (store {binding['store_id']}) at {bound}, "
                    f"this start asked for {want.state_uri}. Start with --state-uri {bound}; to move the state on "
                    f"purpose, stop the job and run `{relocate_command(ck, want.state_uri)}` first"]
        fixed = [(f, binding.get(f), getattr(want, f)) for f in ("job", "operator", "bins", "key_schema")]
        out = [f"{f}: checkpoint {ck} was started with {a!r}, this start has {b!r}. Start it with the original "
               f"{f}, or start the new one with a new checkpoint dir and a new --state-uri"
               for f, a, b in fixed if a is not None and a != b]
        if out:
            return out
    if store is None:
        if committed < 0:
            return []  # a new job, or a first start that stopped before its store was written
        sid = f" (store {binding['store_id']})" if binding else ""
        return [f"empty store: checkpoint {ck} has committed epochs up to {committed}{sid}, but {want.state_uri} "
                "holds no state (no store.json): starting would forget every key's state. Restore the state "
                "there, or point --state-uri at where it is; a new job needs a new checkpoint dir as well"]
    out = []
    s_job, s_bins = store.get("job"), store.get("bins")
    if s_job != want.job or (s_bins is not None and int(s_bins) != want.bins):
        out.append(f"another job's store: {want.state_uri} holds job {s_job!r} with {s_bins} bins (checkpoint "
                   f"{store.get('checkpoint', '?')}), this start is job {want.job!r} with {want.bins} bins from "
                   f"checkpoint {ck}. Point --state-uri at this job's own state, or use a new, empty location "
                   "together with a new checkpoint dir for a new job")
    elif binding is not None and store.get("store_id") != binding["store_id"]:
        out.append(f"another store: checkpoint {ck} belongs to store {binding['store_id']}, but {want.state_uri} "
                   f"holds store {store.get('store_id')} (checkpoint {store.get('checkpoint', '?')}). Point "
                   "--state-uri at this checkpoint's store, or start with the store's own checkpoint dir")
    elif store.get("checkpoint_id") and store["checkpoint_id"] != (binding or {}).get("checkpoint_id"):
        mine = f"checkpoint {binding['checkpoint_id']}" if binding else "a new checkpoint"
        out.append(f"another checkpoint's store: {want.state_uri} belongs to checkpoint {store['checkpoint_id']} "
                   f"at {store.get('checkpoint', '?')}, this start has {mine} at {ck}. Start with that checkpoint "
                   "dir, or give this checkpoint a new, empty --state-uri (a new job)")
    for f in ("operator", "key_schema"):
        if store.get(f) is not None and store.get(f) != getattr(want, f):
            out.append(f"{f}: the store at {want.state_uri} holds state of {f} {store[f]!r}, this start has "
                       f"{getattr(want, f)!r}. Start with the original {f}, or use a new checkpoint dir and a new "
                       "--state-uri for the changed one")
    return out


def behind_problem(state_uri: str, store_last: int, input_epoch: int | None, retained_from: int = 0) -> str | None:
    """The store is behind when Spark committed an epoch with input records whose manifest it lacks
    (an epoch with input always writes one): a restored backup older than the checkpoint."""
    if input_epoch is None or input_epoch <= store_last or input_epoch < retained_from:
        return None
    return (f"store behind the checkpoint: Spark committed epoch {input_epoch} with input records, but the store "
            f"at {state_uri} ends at epoch {store_last}: the state of the epochs between would be lost. Restore the "
            "store that matches the checkpoint (or the checkpoint that matches the store)")


def db_problem(want: Expected, ids: Mapping[str, str | None], row: dict[str, Any] | None) -> str | None:
    """The metrics DB's job row belongs to another deployment of a job of the same name."""
    theirs = (row or {}).get("binding")
    if not theirs or theirs.get("checkpoint_id") == ids["checkpoint_id"]:
        return None
    return (f"metrics DB already holds job {want.job!r} operator {want.operator!r} of another deployment: checkpoint "
            f"{theirs.get('checkpoint_id')} at {(row or {}).get('checkpoint_dir')}, store {theirs.get('store_id')} at "
            f"{(row or {}).get('state_uri')}; this start has checkpoint {ids['checkpoint_id']} at {want.checkpoint}. "
            "Give this deployment another job name or another metrics DB (--db-url / BALLAST_DB_URL), start the "
            "other deployment's checkpoint dir, or, if that deployment is gone for good, delete its row from the "
            "metrics DB's jobs table")


# ------------------------------------------------------------------------- the start-up path ----
def expected(cfg: RunConfig, op: Operator) -> Expected:
    return Expected(cfg.job, cfg.path, cfg.bins, key_schema(op), Location.of(cfg.checkpoint_dir).uri,
                    Location.of(cfg.state_location).uri)


def _refuse(want: Expected, errs: list[str]) -> BindingMismatch:
    return BindingMismatch(f"job {want.job} refused to start (checkpoint {want.checkpoint}, state "
                           f"{want.state_uri}); nothing was run or changed:\n - " + "\n - ".join(errs))


def bind_state(cfg: RunConfig, op: Operator, journal: Journal) -> DurableState:
    """Check checkpoint <-> store, bind them at the first start, and return the durable state;
    raises BindingMismatch (or durable.StateGap) before any epoch runs."""
    want = expected(cfg, op)
    state = Location.of(cfg.state_location)
    binding = (journal.dir / BINDING).read_json()
    store = (state / "store.json").read_json()
    committed = max(committed_epochs(journal.spark_checkpoint), default=-1)
    errs = problems(want, binding, store, committed, (journal.dir / RELOCATION).read_json())
    if errs:
        raise _refuse(want, errs)
    if binding is None:  # first start (or a checkpoint from before bindings): the checkpoint side first
        binding = {"checkpoint_id": uuid.uuid4().hex, "store_id": (store or {}).get("store_id") or uuid.uuid4().hex,
                   "state_uri": want.state_uri, "job": want.job, "operator": want.operator, "bins": want.bins,
                   "key_schema": want.key_schema}
        (journal.dir / BINDING).write_json(binding)
    full = {"job": want.job, "bins": want.bins, "store_id": binding["store_id"], "operator": want.operator,
            "key_schema": want.key_schema, "checkpoint_id": binding["checkpoint_id"], "checkpoint": want.checkpoint}
    if store is None or any(store.get(k) != v for k, v in full.items() if k != "checkpoint"):
        from spark_jobs.objects import FORMAT

        (state / "store.json").write_json({"format": FORMAT, **(store or {}), **full})
    durable = DurableState(cfg.state_location, cfg.job, cfg.bins, cfg.snapshot_every)
    durable.check_against(committed)
    behind = behind_problem(durable.uri, durable.last_epoch,
                            newest_input_epoch(journal.spark_checkpoint, cfg.input_topics, committed),
                            int(((state / "store.json").read_json() or {}).get("retained_from", 0)))
    if behind:
        raise _refuse(want, [behind])
    return durable


def newest_input_epoch(spark_checkpoint: Location, topics: list[str], committed: int) -> int | None:
    """The newest committed epoch (of the last BEHIND_SCAN) that read input records, from Spark's offset log."""
    for e in range(committed, max(-1, committed - BEHIND_SCAN), -1):
        r = epoch_ranges(spark_checkpoint, e)
        if r is None:
            return None  # the log no longer tells
        if any(end > start for t in topics for start, end in r.get(t, {}).values()):
            return e
    return None


def binding_ids(journal: Journal) -> dict[str, str | None]:
    """This checkpoint's identity and its store's (None before the first start binds them)."""
    doc = (journal.dir / BINDING).read_json() or {}
    return {"checkpoint_id": doc.get("checkpoint_id"), "store_id": doc.get("store_id")}


def check_job_row(cfg: RunConfig, op: Operator, journal: Journal) -> None:
    """Refuse when the metrics DB's job row belongs to another deployment (before anything is bound)."""
    from ballast.store import writer as mx

    want = expected(cfg, op)
    err = db_problem(want, binding_ids(journal), mx.job_row_config(cfg.db_url, cfg.job, cfg.operator))
    if err:
        raise _refuse(want, [err])


def job_row_config(cfg: RunConfig, durable: DurableState, journal: Journal,
                   op: Operator | None = None) -> dict[str, Any]:
    """The job row's config: the run's configuration, where its state is, the deployment's binding and
    the windows its operator declares (a processor's `QuerySpec.window` with the watermark's lateness;
    None otherwise): the control plane chooses a handover per bin from them (docs/handover.md)."""
    return {**cfg.to_dict(), "state_uri": durable.uri, "binding": binding_ids(journal), "window": window_config(op)}


def window_config(op: Operator | None) -> dict[str, Any] | None:
    """The job row's `window`, as `ballast.policy.DeclaredWindow.from_config` reads it back."""
    spec = getattr(op, "spec", None)
    window = getattr(spec, "window", None)
    if not isinstance(window, WindowSpec):
        return None
    return DeclaredWindow(window, int(getattr(spec, "lateness_ms", 0) or 0)).to_config()
