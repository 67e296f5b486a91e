"""A live code upgrade a person asked for (ballast_upgrade): check the request's form against the job,
then store the one-step upgrade plan the emitter sends.

The control side cannot judge the code itself (the user's module lives with the job, not
necessarily with Airflow): the job imports it on its driver and executors before it applies the
step, and rejects it there with the reason in the step's checkpoint (spark_jobs.live_code).
"""

from __future__ import annotations

import logging
from typing import Any

from ballast.code_version import CodeVersion, CodeVersionError, ShadowSpec
from ballast.config import JobConfig
from ballast.control.manual import InvalidRequest, live_map, one_step
from ballast.control.plan import store_upgrade

log = logging.getLogger(__name__)

# direct: the new version takes over at the step's epoch; shadow: it runs beside the version in force
# on a copy of the state for some epochs, its outputs compared, and takes over only if they agree
STRATEGIES = ("direct", "shadow")


def plan_upgrade(url: str, cfg: JobConfig, params: dict[str, Any]) -> dict[str, Any]:
    """Validate an upgrade request (job, operator, code ref, version, py_files, strategy); store its
    one-step plan unless dry_run. InvalidRequest says what is wrong; nothing is stored then."""
    strategy = params.get("strategy") or "direct"
    if strategy not in STRATEGIES:
        raise InvalidRequest(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if ":" not in cfg.operator_path:
        raise InvalidRequest(f"job {cfg.job} runs the shipped operator {cfg.operator_path!r}; only a stateful "
                             "processor (package.module:Class) upgrades live")
    try:
        epochs, tolerance = params.get("shadow_epochs"), params.get("tolerance")  # 0 is a value, None is unset
        shadow = ShadowSpec(epochs=3 if epochs is None else epochs, tolerance=0.0 if tolerance is None else tolerance,
                            fields=tuple(params.get("compare_fields") or ())) if strategy == "shadow" else None
        code = CodeVersion(ref=str(params.get("code") or ""), version=str(params.get("version") or ""),
                           py_files=tuple(params.get("py_files") or ()), shadow=shadow)
    except CodeVersionError as exc:
        raise InvalidRequest(str(exc)) from exc
    current, _ = live_map(url, cfg, "this upgrade")
    rendered = (f"upgrade at map v{current.version}: {code.describe()}"
                + (f", shipping {', '.join(code.py_files)}" if code.py_files else "")
                + "; the job imports it on its driver and executors first and rejects it if it does not import, "
                "says another version or declares no StateUpgrade from the version in force"
                + (f"; shadow: it runs beside the version in force for {shadow.epochs} epochs with input, its outputs "
                   f"({', '.join(shadow.fields) or 'whole rows'}) compared and held back, and takes over only if at "
                   f"most {shadow.tolerance:g} of the calls differ" if shadow else "; it takes over at once")
                + "; each key's state is carried over the first time the new version handles it, nothing moves")
    return one_step(cfg, params, rendered, f"upgrade to version {code.version}",
                    lambda req: store_upgrade(url, cfg, current, code, req).to_dict())
