"""ballast.options: defaults, environment overrides, refusals with a clear message, and no `BALLAST_*`
variable used anywhere that the module does not declare (the jobs file: test_config.py; the generated
doc tables: test_options_doc.py). Fast: no services."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import get_args

import pytest

from ballast.config import ConfigError, JobConfig, get_job
from ballast.options import (
    DEFAULT_MAX_WORKERS,
    EMIT_MODES,
    ENV_PREFIX,
    ORDERS,
    STRATEGIES,
    EmitMode,
    Order,
    Settings,
    Strategy,
    env_var,
    settings,
)
from ballast.policy.guards import GuardConfig

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]

# `BALLAST_*` tokens in the tree that are not environment variables
NOT_VARIABLES = {
    "BALLAST_KAFKA": "Airflow connection id, set as AIRFLOW_CONN_BALLAST_KAFKA (scripts/stack.py)",
    "BALLAST_KAFKA_JOB": "Airflow connection id, set as AIRFLOW_CONN_BALLAST_KAFKA_JOB (scripts/stack.py)",
    "BALLAST_IMPORT": "a Python constant in tests/system/test_processor_ported.py",
    "BALLAST_SERVICE_TAG": "a marker scripts/stack_procs.py sets on a service's processes, never read as a knob",
    "BALLAST_RUN_TAG": "a marker `make test` sets on its run's processes (scripts/leftovers.py), never a knob",
}
TOKEN = re.compile(r"(?<![A-Za-z0-9_])BALLAST_[A-Z0-9_]*[A-Z0-9]")
SCANNED = re.compile(r"(\.(py|sh|md|ya?ml|toml|ini|cfg)|Makefile|Dockerfile)$")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No Ballast variable set, so the declared defaults show."""
    for name in Settings.model_fields:
        monkeypatch.delenv(env_var(name), raising=False)
    return monkeypatch


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "jobs.yaml"
    p.write_text(text)
    return p


def test_defaults(clean_env: pytest.MonkeyPatch) -> None:
    s = settings()
    assert s.kafka_bootstrap == "127.0.0.1:9092" and s.spark_master == "local[2]"
    assert s.state_dir == REPO / ".state" and s.jobs_file == REPO / "dags" / "ballast_jobs.yaml"
    assert s.metrics_db_url() == f"sqlite:///{REPO / '.state' / 'metrics.db'}"
    assert (s.kafka_port, s.airflow_port, s.faults_kill_group) == (9092, 8080, False)
    cfg = JobConfig(job="j", operator="keycount", input_topic="t")
    assert (cfg.bins, cfg.launcher, cfg.rebalance.strategy, cfg.rebalance.emit_mode) == (
        256,
        "cli",
        "batched",
        "flow-control",
    )
    assert cfg.resolved_checkpoint_dir() == str(REPO / ".state" / "jobs" / "j" / "checkpoint")
    # one default for the worker bound, wherever a worker bound is built
    assert cfg.max_workers == GuardConfig().max_workers == DEFAULT_MAX_WORKERS


def test_environment_overrides(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("BALLAST_KAFKA_BOOTSTRAP", "broker-a:9094")
    clean_env.setenv("BALLAST_STATE_DIR", str(tmp_path / "state"))
    clean_env.setenv("BALLAST_FAULTS_KILL_GROUP", "1")
    clean_env.setenv("SPARK_MASTER", "spark://m:7077")
    clean_env.setenv("BALLAST_DRIVER_HOST", "")  # empty counts as unset
    s = settings()
    assert (s.kafka_bootstrap, s.spark_master, s.faults_kill_group, s.driver_host) == (
        "broker-a:9094",
        "spark://m:7077",
        True,
        None,
    )
    assert s.metrics_db_url() == f"sqlite:///{tmp_path / 'state' / 'metrics.db'}"
    cfg = JobConfig(job="j", operator="keycount", input_topic="t")
    assert cfg.state_dir() == tmp_path / "state" / "jobs" / "j"  # read at call time, not import time
    clean_env.setenv("BALLAST_DB_URL", "postgresql+psycopg2://u@h/db")
    assert settings().metrics_db_url() == "postgresql+psycopg2://u@h/db"
    jobs = _write(tmp_path, "jobs: [{job: a, operator: keycount, input_topic: t}]\n")
    clean_env.setenv("BALLAST_JOBS_FILE", str(jobs))
    assert get_job("a").input_topic == "t"


def test_bad_environment_value_names_the_variable(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("BALLAST_PG_PORT", "fifty")
    with pytest.raises(ConfigError, match=r"BALLAST_PG_PORT='fifty'.*integer.*unset the variable"):
        settings()
    clean_env.delenv("BALLAST_PG_PORT")
    clean_env.setenv("BALLAST_KAFKA_AUTH", "kerberos")
    with pytest.raises(ConfigError, match=r"BALLAST_KAFKA_AUTH='kerberos'.*'none' or 'scram'"):
        settings()


def test_names_are_single_literals() -> None:
    assert get_args(Strategy) == STRATEGIES and get_args(Order) == ORDERS and get_args(EmitMode) == EMIT_MODES
    fields = JobConfig.model_fields["rebalance"].annotation.model_fields  # type: ignore[union-attr]
    assert (fields["strategy"].annotation, fields["order"].annotation, fields["emit_mode"].annotation) == (
        Strategy,
        Order,
        EmitMode,
    )


def test_every_ballast_variable_in_the_tree_is_declared() -> None:
    """Code, scripts and docs may only use variables the options module declares."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    declared = {env_var(n) for n in Settings.model_fields}
    used: dict[str, set[str]] = {}
    for rel in files:
        path = REPO / rel
        if not SCANNED.search(rel) or rel.startswith((".venv/", ".state/", ".cache/")) or not path.is_file():
            continue
        for token in TOKEN.findall(path.read_text(errors="replace")):
            used.setdefault(token, set()).add(rel)
    assert used, "the scan found nothing: the tree layout changed"
    undeclared = {t: sorted(fs) for t, fs in used.items() if t not in declared and t not in NOT_VARIABLES}
    assert not undeclared, f"declare these in plugins/ballast/options.py (Settings): {undeclared}"
    assert all(v.startswith(ENV_PREFIX) or v == "SPARK_MASTER" for v in declared)


NAME = r"(?:BALLAST_[A-Z0-9_]+|SPARK_MASTER)"
# a variable named in a string, or through a module constant (`ENV_KEYS = env_var(...)`; signing and
# kafka_security once read theirs that way, around ballast.options)
VAR = rf"""["']{NAME}["']|ENV_[A-Z0-9_]+"""
DIRECT_READ = re.compile(rf"""(?:environ\)?\.get|getenv)\(\s*(?:{VAR})|environ\[\s*(?:{VAR})\s*\](?!\s*=[^=])""")


def test_code_reads_knobs_through_the_module() -> None:
    """No second default: outside ballast.options, code gets a knob from `settings()`, not os.environ."""
    offenders = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for top in ("plugins", "spark_jobs", "migrations_db", "dags", "scripts", "bench")
        for path in sorted((REPO / top).rglob("*.py"))
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if DIRECT_READ.search(line)
    ]
    assert not offenders, "read these through ballast.options.settings():\n" + "\n".join(offenders)


def test_the_direct_read_pattern() -> None:
    """Reads by name or by an ENV_ constant are caught; a write and a read of another variable are not."""
    for line in ('os.environ.get("BALLAST_DB_URL")', 'os.getenv("SPARK_MASTER", "x")',
                 'os.environ["BALLAST_STATE_DIR"]', "(env if env is not None else os.environ).get(ENV_SIGNING_KEY)",
                 "os.environ[ENV_CONFIG]"):
        assert DIRECT_READ.search(line), line
    for line in ('os.environ["BALLAST_STATE_DIR"] = "1"', 'os.environ.get("PYSPARK_PYTHON")', "env.get(ENV_KEYS)"):
        assert not DIRECT_READ.search(line), line
