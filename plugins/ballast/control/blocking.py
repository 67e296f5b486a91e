"""Emit → await → verify in one blocking call, for tests and shells (the DAG does the same with a
deferrable operator and sensor). Outages of the broker or the metrics DB are waited out until the
deadline; anything else fails the plan with advice (ballast.control.verify.fail_plan)."""

from __future__ import annotations

import logging
import time
from typing import Any

from ballast import store
from ballast.control.plan import PlanFailed
from ballast.control.verify import fail_plan, progress, verify

log = logging.getLogger(__name__)


def db_unreachable(exc: BaseException) -> bool:
    """The metrics DB is down or unreachable (worth retrying), as opposed to a query that is wrong."""
    from migrations_db.db import is_unreachable

    return is_unreachable(exc)


def run_plan_blocking(url: str, bootstrap: str, plan_id: str, timeout_s: float, poll_s: float = 0.5,
                      mode: str | None = None, signing_key: Any = None, security: Any = None,
                      on_db_outage: Any = None) -> dict[str, Any]:
    """Emit + await + verify in one blocking call (tests, shells); the DAG does the same deferrably.

    The metrics DB or the broker being unreachable is reported (log warning, `on_db_outage(exc)`
    for the DB) and retried until the deadline: emission is idempotent per (plan, step) (a step
    the broker did not acknowledge is not recorded as emitted; one sent twice is a duplicate the
    job ignores).
    """
    from ballast.emitter import ControlEmitter, EmitError

    plan = store.get_plan(url, plan_id)
    if plan is None:
        raise PlanFailed(f"plan {plan_id} is not in the metrics DB")
    mode = mode or plan.params.get("emit_mode", "flow-control")
    deadline = time.monotonic() + timeout_s
    with ControlEmitter(bootstrap, url, signing_key=signing_key, security=security) as em:
        while True:
            try:
                out = em.emit(plan_id, mode)  # type: ignore[arg-type]
                if out.failed_step is not None:
                    raise PlanFailed(fail_plan(url, plan_id, f"plan {plan_id} failed: {out.failed_reason}",
                                               "plan_rejected"))
                pr = progress(url, plan_id, range(1, plan.steps + 1))
            except Exception as exc:
                broker = isinstance(exc, EmitError) and exc.transient
                if not (broker or db_unreachable(exc)) or time.monotonic() > deadline:
                    raise
                log.warning("plan %s: %s unreachable (%s); retrying in %.0fs", plan_id,
                            "broker" if broker else "metrics DB", str(exc).splitlines()[0][:200], max(poll_s, 2.0))
                if on_db_outage is not None and not broker:
                    on_db_outage(exc)
                time.sleep(max(poll_s, 2.0))
                continue
            if pr.done:
                break
            if time.monotonic() > deadline:
                raise PlanFailed(fail_plan(url, plan_id, f"plan {plan_id}: no checkpoint for step(s) "
                                                         f"{list(pr.missing)} within {timeout_s:.0f}s", "plan_timeout"))
            time.sleep(poll_s)
    return verify(url, plan_id).to_dict()
