"""What the console shows, as plain JSON-ready dicts (no Airflow import: plugin.py serves it); the
plans view is ballast.console_plans.

Every function takes the metrics DB URL and reads through `repository`; the page (static/console.js)
draws what these return. Times are ISO 8601 UTC strings; sizes are bytes; loads are records per epoch.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ballast import store
from ballast.store.event_log import CACHE_DEGRADED

WINDOWS = {"15m": 900, "1h": 3600, "24h": 86400}
HOT_FACTOR = 2.0  # a bin is hot when it carries at least this many times the mean bin's load
BIN_EPOCHS = 10  # a map version's heat map: the load of the last this-many epochs of its life
DEFAULT_HEARTBEAT_TIMEOUT_S = 120.0


def iso(ts: datetime | None) -> str | None:
    """A time as the page reads it (ISO 8601), None as None."""
    return ts.isoformat() if ts else None


def _now() -> datetime:
    return datetime.now(UTC)


def window_start(window: str, now: datetime | None = None) -> datetime:
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {sorted(WINDOWS)}, not {window!r}")
    return (now or _now()) - timedelta(seconds=WINDOWS[window])


def _configured() -> dict[tuple[str, str], Any]:
    """The jobs file, when it can be read (the console still shows jobs the DB knows without it)."""
    try:
        from ballast.config import load_jobs

        return {(c.job, c.operator): c for c in load_jobs().values()}
    except Exception:  # a broken jobs file is the DAGs' error to report, not the console's
        return {}


# ----------------------------------------------------------------------------------- jobs


def job_status(hb: store.HeartbeatRow | None, timeout_s: float, now: datetime | None = None) -> str:
    """running (fresh heartbeat), stale (says running but silent for longer than the timeout),
    stopped (the job said so), not started (no heartbeat at all)."""
    if hb is None:
        return "not started"
    if hb.status in ("stopping", "stopped"):
        return "stopped"
    age = ((now or _now()) - hb.updated_at).total_seconds()
    return "running" if age <= timeout_s else "stale"


def attention(url: str, job: str, operator: str, status: str, hb: store.HeartbeatRow | None, timeout_s: float,
              now: datetime) -> list[dict[str, str]]:
    """What a person on call should look at first, most serious first (level: error | warning | info)."""
    out: list[dict[str, str]] = []
    if status == "stale" and hb:
        out.append({"level": "error", "text": f"heartbeat {(now - hb.updated_at).total_seconds():.0f} s old "
                    f"(timeout {timeout_s:.0f} s): the driver is stuck or gone; ballast_supervise relaunches it "
                    "(its task log names the driver log)"})
    elif status == "stopped":
        out.append({"level": "warning", "text": "the job reported that it stopped"})
    recent = store.epoch_window(url, job, operator, 10)
    backlogs = [e.backlog for e in recent if e.backlog is not None]
    if len(backlogs) >= 5 and backlogs[-1] > backlogs[0] and all(b <= a for a, b in zip(backlogs[1:], backlogs[:-1])):
        per = (backlogs[-1] - backlogs[0]) / (len(backlogs) - 1)
        out.append({"level": "warning", "text": f"backlog growing: +{per:,.0f} rows per epoch over the last "
                    f"{len(backlogs)} epochs (now {backlogs[-1]:,})"})
    since = now - timedelta(minutes=15)
    for p in store.recent_plans(url, 5, job):
        recent_failure = p.status == "failed" and p.finished_at and p.finished_at >= now - timedelta(hours=1)
        if p.operator == operator and recent_failure:
            out.append({"level": "error", "text": f"plan {p.plan_id} failed: {p.reason[:300]}"})
    _, dead = store.dead_letter_counts(url, job, operator, since)
    if dead:
        out.append({"level": "warning", "text": f"{dead:,} record(s) went to the dead-letter topic {job}.dlq in the "
                    "last 15 min: its headers ballast-reason and ballast-source say why and where from"})
    degraded = cache_degraded(url, job, operator, now)
    if degraded:
        out.append({"level": "warning", "text": f"degraded: {len(degraded)} worker cache(s) rebuilt from the durable "
                    f"state in the last 15 min; the job runs on, slower (latest: {degraded[0].message[:300]})"})
    rejected = store.events_since(url, job, since, kinds=["control_rejected"], limit=1000)
    if rejected:
        out.append({"level": "warning", "text": f"{len(rejected)} control message(s) rejected in the last 15 min "
                    f"(latest: {rejected[0].message[:200]})"})
    return out


def cache_degraded(url: str, job: str, operator: str, now: datetime) -> list[Any]:
    """The operator's `cache_degraded` events of the last 15 min, newest first: a worker's local
    cache failed and was rebuilt (spark_jobs.cache_fallback). Degraded, not down: it runs on."""
    since = now - timedelta(minutes=15)
    return [e for e in store.events_since(url, job, since, kinds=[CACHE_DEGRADED], limit=200) if e.operator == operator]


def jobs(url: str, now: datetime | None = None) -> list[dict[str, Any]]:
    """One row per (job, operator): heartbeat, latest epoch's metrics, the open plan if any."""
    now = now or _now()
    cfgs = _configured()
    keys = {(j.job, j.operator): j.bins for j in store.list_jobs(url)}
    for key, cfg in cfgs.items():
        keys.setdefault(key, cfg.bins)
    out = []
    for (job, op), bins in sorted(keys.items()):
        cfg = cfgs.get((job, op))
        hb = store.heartbeat(url, job, op)
        timeout = float(cfg.heartbeat_timeout_s) if cfg else DEFAULT_HEARTBEAT_TIMEOUT_S
        last = store.epoch_window(url, job, op, 1)
        e = last[-1] if last else None
        open_plans = store.open_plans(url, job, op)
        plan = None
        if open_plans:
            p = open_plans[-1]
            applied = sum(1 for c in store.checkpoints(url, p.plan_id).values() if c.status == "applied")
            plan = {"plan_id": p.plan_id, "status": p.status, "steps": p.steps, "applied": applied,
                    "workers": f"{p.source_workers}->{p.target_workers}"}
        status = job_status(hb, timeout, now)
        cur = store.latest_map(url, job, op)
        bins = cur.bins if cur is not None else bins  # a split raised it since the job's first start
        # as settings and upgrade steps left them (version None: the command line's), in one read
        trigger_ms, max_records, version = store.job_in_force(url, job, op)
        out.append({
            "job": job, "operator": op, "bins": bins, "configured": cfg is not None,
            "status": status, "heartbeat_timeout_s": timeout, "degraded": bool(cache_degraded(url, job, op, now)),
            "attention": attention(url, job, op, status, hb, timeout, now),
            "host": hb.host if hb else None, "pid": hb.pid if hb else None,
            "epoch": hb.last_epoch if hb else None, "workers": hb.workers if hb else None,
            "map_version": hb.map_version if hb else None,
            "executors": hb.executors if hb else None, "capacity": hb.capacity if hb else None,
            "heartbeat_at": iso(hb.updated_at) if hb else None,
            "heartbeat_age_s": round((now - hb.updated_at).total_seconds(), 1) if hb else None,
            "started_at": iso(hb.started_at) if hb else None,
            "input_rate": e.input_rate if e else None, "backlog": e.backlog if e else None,
            "batch_ms": e.batch_ms if e else None, "last_epoch_at": iso(e.ended_at) if e else None,
            "dead_letters": store.dead_letter_counts(url, job, op, now)[0],
            "min_workers": cfg.min_workers if cfg else None, "max_workers": cfg.max_workers if cfg else None,
            "open_plan": plan, "trigger_ms": trigger_ms, "max_records_per_epoch": max_records, "version": version,
            "spark_ui": hb.spark_ui_url if hb and status != "stopped" else None,
            "topics": topic_links(job, cfg.input_topic.split(",") if cfg else []),
            "handover": job_handover(url, job, op, now),
        })
    return out


def topic_links(job: str, inputs: list[str]) -> list[dict[str, str | None]]:
    """The job's topics by role, each with its page in the Kafka UI `BALLAST_KAFKA_UI_URL` names
    (`{topic}` in it), if one is configured."""
    from urllib.parse import quote

    from ballast.options import settings
    from ballast.topics import job_topics

    ui = settings().kafka_ui_url
    return [{"role": role, "topic": t, "url": ui.replace("{topic}", quote(t, safe="")) if ui else None}
            for role, t in job_topics(job, inputs)]


# ------------------------------------------------------------------------------- handover


def _event_iso(ms: int | None) -> str | None:
    """An event time (ms) as the page reads it: ISO 8601 UTC, to the millisecond."""
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _hms(ms: int | None) -> str:
    return "not known yet" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]


def handover(rec: store.HandoverRecord) -> dict[str, Any]:
    """A handover step (docs/handover.md) as the console shows it: both owners of each bin, its
    event-time timestamps as UTC times, and while it waits the watermark and the old owner's windows
    still open (per epoch, for the chart) — for session windows the keys still holding it open
    instead; once ended, its checkpoint (an applied one moved 0 bytes).
    `sentence` says it in one line."""
    ho, cp = rec.progress[-1], rec.checkpoint
    moves = [{"bin": int(b), "from": int(a), "to": int(z)} for b, a, z in ho.get("moves", [])]
    owners = ", ".join(f"{a}→{z}" for a, z in sorted({(mv["from"], mv["to"]) for mv in moves}))
    what = f"handover of {len(moves)} bin{'' if len(moves) == 1 else 's'} {owners}"
    # applied: the watermark passed the boundary, so the old owner's windows have all fired
    applied = cp is not None and cp.status == "applied"
    left = 0 if applied else ho.get("windows_left")
    sessions = "gap" in ho  # session windows: the old owner's sessions, held open per key
    keys_open = (0 if applied else ho.get("keys_open")) if sessions else None
    if cp is None and sessions:
        sentence = (f"{what}: the old owner finishes the sessions started before {_hms(ho['boundary'])}"
                    + ("" if keys_open is None else f"; {keys_open} key{'' if keys_open == 1 else 's'} still open")
                    + f"; watermark {_hms(ho.get('watermark'))} (event time, UTC)")
    elif cp is None:
        sentence = (f"{what}: the old owner finishes the windows up to {_hms(ho['boundary'])}"
                    + ("" if left is None else f"; {left} window{'' if left == 1 else 's'} left")
                    + f"; watermark {_hms(ho.get('watermark'))} (event time, UTC)")
    elif applied:
        done = f"the sessions started before {_hms(ho['boundary'])}" if sessions else \
            f"the windows up to {_hms(ho['boundary'])}"
        sentence = (f"{what} complete in epoch {cp.applied_epoch}: the old owner finished {done} (event time, "
                    f"UTC); {cp.bytes_moved:,} bytes of state moved by handover")
    else:
        sentence = f"{what} {cp.status}: {cp.reason}; the old owner keeps the bins"
    return {
        "plan_id": rec.plan_id, "step": rec.step, "status": cp.status if cp else "waiting",
        "since_epoch": ho.get("since"), "epoch": rec.epochs[-1], "moves": moves, "owners": owners,
        "migration_at": _event_iso(ho.get("migration")), "activation_at": _event_iso(ho.get("activation")),
        "boundary_at": _event_iso(ho.get("boundary")), "watermark_at": _event_iso(ho.get("watermark")),
        "windows_left": None if sessions else left, "sessions": sessions, "gap_ms": ho.get("gap"),
        "keys_open": keys_open, "sentence": sentence, "checkpoint": cp.to_dict() if cp else None,
        "history": {"epoch": list(rec.epochs), "watermark_at": [_event_iso(p.get("watermark")) for p in rec.progress]},
    }


def job_handover(url: str, job: str, operator: str, now: datetime) -> dict[str, Any] | None:
    """The job's newest handover, whether a stored plan or a person sent it: while it waits, and for
    an hour after it ended."""
    key = store.latest_handover(url, job, operator)
    rec = store.handover_record(url, job, operator, *key) if key else None
    if rec is None or (rec.checkpoint is not None and rec.checkpoint.completed_at < now - timedelta(hours=1)):
        return None
    return handover(rec)


# --------------------------------------------------------------------------------- series


def series(url: str, job: str, operator: str, window: str, now: datetime | None = None) -> dict[str, Any]:
    """Input rate, processed rate, backlog, batch time and W over the window, plus the plans in it."""
    now = now or _now()
    since = window_start(window, now)
    pts = store.epoch_series(url, job, operator, since)
    plans = []
    for p in store.recent_plans(url, 200, job):
        if p.operator != operator or (p.finished_at and p.finished_at < since):
            continue
        plans.append({"plan_id": p.plan_id, "status": p.status, "start": iso(p.created_at),
                      "end": iso(p.finished_at) or iso(now), "workers": f"{p.source_workers}->{p.target_workers}"})
    return {
        "window": window, "since": iso(since), "now": iso(now),
        "t": [iso(p.at) for p in pts], "first_epoch": [p.first_epoch for p in pts],
        "last_epoch": [p.last_epoch for p in pts], "epochs": [p.epochs for p in pts],
        "input_rate": [p.input_rate for p in pts], "processed_rate": [p.processed_rate for p in pts],
        "backlog": [p.backlog for p in pts], "batch_ms": [p.batch_ms for p in pts],
        "batch_ms_max": [p.batch_ms_max for p in pts], "migration_ms": [p.migration_ms for p in pts],
        "workers": [p.workers for p in pts], "plans": plans,
    }


# -------------------------------------------------------------------------------- bin map


def _pending_moves(url: str, job: str, operator: str) -> dict[int, dict[str, Any]]:
    """Bins an open plan will still move: bin -> {to, step, plan_id}."""
    out: dict[int, dict[str, Any]] = {}
    for p in store.open_plans(url, job, operator):
        done = {s for s, c in store.checkpoints(url, p.plan_id).items() if c.status == "applied"}
        for st in store.plan_steps(url, p.plan_id):
            if st.step in done:
                continue
            for mv in st.payload.get("moves", []):
                out.setdefault(int(mv["bin"]), {"to": int(mv["to"]), "step": st.step, "plan_id": p.plan_id,
                                                "emitted": st.emitted})
    return out


def binmap(url: str, job: str, operator: str, version: int | None = None) -> dict[str, Any]:
    """The bin -> worker map of `version` (default: the current one) with each bin's load and size
    over the last BIN_EPOCHS epochs of that version's life, per-worker totals and the hot bins."""
    versions = store.map_versions(url, job, operator)
    if not versions:
        return {"job": job, "operator": operator, "versions": [], "map": None}
    by_v = {v.map_version: v for v in versions}
    cur = versions[0]
    snap = by_v.get(version, cur) if version is not None else cur
    newer = [v for v in versions if v.map_version > snap.map_version]
    end = (min(v.epoch for v in newer) - 1) if newer else (store.latest_epoch(url, job, operator) or snap.epoch)
    end = max(end, snap.epoch)
    # a bin's load belongs to the bin, not to its worker: the last BIN_EPOCHS epochs up to the end of
    # this version's life, even when the version itself is younger (mid-migration, one per step)
    lo = max(0, end - BIN_EPOCHS + 1)
    bins = snap.bins
    br = store.bin_range(url, job, operator, bins, lo, end)
    workers = max(snap.workers, max(snap.assignment, default=-1) + 1)
    total = sum(br.load)
    mean = total / bins if bins else 0.0
    per_worker: list[dict[str, Any]] = [
        {"worker": w, "bins": 0, "load": 0.0, "bytes": 0, "keys": 0} for w in range(workers)]
    for b, w in enumerate(snap.assignment):
        pw = per_worker[w]
        pw["bins"] += 1
        pw["load"] += br.load[b]
        pw["bytes"] += br.bytes[b]
        pw["keys"] += br.keys[b]
    measured = {wl.worker: wl for wl in store.worker_load(url, job, operator, lo, end)}
    for pw in per_worker:
        wl = measured.get(pw["worker"])
        pw["busy"] = wl.busy if wl else None
        pw["records_per_epoch"] = wl.records_per_epoch if wl else None
    loads = [pw["load"] for pw in per_worker]
    wmean = sum(loads) / len(loads) if loads else 0.0
    hot = sorted(
        ({"bin": b, "worker": snap.assignment[b], "load": br.load[b], "bytes": br.bytes[b],
          "share": br.load[b] / total if total else 0.0, "x_mean": br.load[b] / mean if mean else 0.0}
         for b in range(bins) if mean > 0 and br.load[b] >= HOT_FACTOR * mean),
        key=lambda h: -h["load"],
    )[:12]
    pending = _pending_moves(url, job, operator) if snap.map_version == cur.map_version else {}
    return {
        "job": job, "operator": operator,
        "versions": [{"version": v.map_version, "epoch": v.epoch, "workers": v.workers, "plan_id": v.plan_id,
                      "step": v.step} for v in versions],
        "map": {"version": snap.map_version, "current": snap.map_version == cur.map_version,
                "from_epoch": snap.epoch, "workers": workers, "bins": bins, "plan_id": snap.plan_id, "step": snap.step,
                "assignment": list(snap.assignment)},
        "window": {"lo_epoch": lo, "hi_epoch": end, "epochs": br.epochs},
        "load": list(br.load), "bytes": list(br.bytes), "keys": list(br.keys),
        "per_worker": per_worker,
        "skew": (max(loads) / wmean) if wmean > 0 else None,
        "hot": hot, "hot_factor": HOT_FACTOR,
        "pending": {str(b): v for b, v in sorted(pending.items())},
    }


# ------------------------------------------------------------------------------ decisions

_GUARDS = (  # (text in the reason, label): the reasons written by ballast.policy.guards, in its order
    ("warm-up", "warm-up"),
    ("is outside [", "bounds"),
    ("±", "utilization band"),
    ("blocked:", "ineffective scale-up"),
    ("activation ", "activation"),
    ("pending: lower target held", "scale-down delay"),
    (": the current worker count", "DS2 = current"),
    ("scale up ", "scale up"),
    ("scale down ", "scale down"),
)


def guard_of(action: str, reason: str) -> str:
    """Which guard decided, read from the decision's reason (the guards write one sentence each)."""
    if action == "rebalance":
        return "skew"
    for needle, label in _GUARDS:
        if needle in reason:
            return label
    return action


def decisions(url: str, job: str, operator: str, window: str, now: datetime | None = None) -> list[dict[str, Any]]:
    out = []
    for d in store.decisions_since(url, job, operator, window_start(window, now)):
        util = d.inputs.get("utilization")
        out.append({
            "id": d.id, "at": iso(d.decided_at), "action": d.action, "current_workers": d.current_workers,
            "proposed_workers": d.proposed_workers, "target_workers": d.target_workers,
            "utilization": util, "target_utilization": d.inputs.get("target_utilization"),
            "utilization_band": d.inputs.get("utilization_band"), "guard": guard_of(d.action, d.reason),
            "reason": d.reason, "plan_id": d.plan_id, "diagnosis": d.inputs.get("diagnosis"),
            "true_rate": d.inputs.get("true_rate"),
        })
    return out


# --------------------------------------------------------------------------------- events


def events(url: str, job: str, window: str, *, level: str = "", kind: str = "", text: str = "",
           now: datetime | None = None, limit: int = 500) -> dict[str, Any]:
    """Events (rejected control messages among them) and refused steps, newest first, filtered."""
    since = window_start(window, now)
    rows: list[dict[str, Any]] = []
    if kind != "step_rejected":
        for e in store.events_since(url, job, since, levels=[level] if level else [], kinds=[kind] if kind else [],
                                   text=text, limit=limit):
            rows.append({"at": iso(e.at), "level": e.level, "kind": e.kind, "message": e.message,
                         "epoch": e.epoch, "operator": e.operator, "plan_id": e.details.get("plan_id"),
                         "step": e.details.get("step"), "details": e.details})
    if kind in ("", "step_rejected") and level in ("", "warning"):
        for c in store.rejected_checkpoints(url, job, since):
            msg = f"step {c.step} of plan {c.plan_id} {c.status}: {c.reason}"
            if text and text.lower() not in msg.lower():
                continue
            rows.append({"at": iso(c.completed_at), "level": "warning", "kind": "step_rejected", "message": msg,
                         "epoch": c.applied_epoch, "operator": "", "plan_id": c.plan_id, "step": c.step,
                         "details": {}})
    rows.sort(key=lambda r: r["at"] or "", reverse=True)
    kinds = sorted(set(store.event_kinds(url, job)) | {"control_rejected", "step_rejected", CACHE_DEGRADED})
    return {"events": rows[:limit], "kinds": kinds}
