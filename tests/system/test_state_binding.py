"""State belongs to its checkpoint, both ways (spark_jobs.binding), on a real key-count job.

One job runs 3 000 records (30 keys, 100 each) and stops; then each test starts it wrongly and
checks the start is refused before any epoch, with both sides named — another state location
(the issue's typo: before, the job started on an empty store and emitted k0 = 10 where 110 was
right), an empty store, another job's store, another checkpoint, a store behind or ahead of the
checkpoint, a changed bin count, operator or key schema, another deployment's job row in the
metrics DB — and that the right start resumes exactly. The relocate command moves the state,
interrupted for real (SIGKILL after a few files) and finished by a re-run. Tests restore what
they change; the relocation runs last.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ballast.errors import BallastError
from spark_jobs.binding import BINDING, BindingMismatch
from spark_jobs.durable import StateGap, read_state
from spark_jobs.journal import JobMismatch
from spark_jobs.offsets import committed_epochs
from spark_jobs.operators import KeyCount
from spark_jobs.output import read_output
from spark_jobs.runner import JobRunner, RunConfig, start_job
from tests.helpers.dp_helpers import produce
from tests.helpers.kill_runs import cli_env
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
KEYS = [b"k%d" % i for i in range(30)]


@dataclass
class Run:
    job: str
    topic: str
    base: Path
    bootstrap: str
    db_url: str
    sent: int = 0  # records per key produced so far
    backups: dict[str, Path] = field(default_factory=dict)

    @property
    def ckpt(self) -> Path:
        return self.base / "ckpt"

    @property
    def state(self) -> Path:
        return self.base / "state-a"

    def config(self, **kw: Any) -> RunConfig:
        args: dict[str, Any] = {"job": self.job, "input_topic": self.topic, "checkpoint_dir": str(self.ckpt),
                                "state_uri": str(self.state), "bootstrap": self.bootstrap, "db_url": self.db_url,
                                "bins": 8, "workers": 1, "trigger_ms": 200, **kw}
        return RunConfig(**args)

    def counts(self) -> dict[bytes, int]:
        """The newest count the job emitted per key (outputs in epoch order)."""
        out: dict[bytes, int] = {}
        for rec in read_output(self.bootstrap, f"{self.job}.output")[0]:
            out[rec.key] = int(rec.value)
        return out

    def feed(self, per_key: int) -> None:
        produce(self.bootstrap, self.topic, [k for _ in range(per_key) for k in KEYS], 2)
        self.sent += per_key

    def run_until_counted(self, spark: Any, **kw: Any) -> None:
        """Start the job, wait until every key's count is what was produced, stop it."""
        runner = start_job(spark, self.config(**kw))
        try:
            wait_until(lambda: set(self.counts().values()) == {self.sent} and len(self.counts()) == len(KEYS), 300,
                       f"every key counted to {self.sent}", check=lambda: _alive(runner))
        finally:
            runner.stop()


def _alive(runner: JobRunner) -> None:
    if runner.query is not None and not runner.query.isActive:
        raise AssertionError(f"the query stopped: {runner.query.exception()}")


@pytest.fixture(scope="module")
def run(spark, kafka_bootstrap, tmp_path_factory) -> Iterator[Run]:
    """Phase 1 of the issue: 3 000 records, 30 keys of 100, counted, stopped; checkpoint and store kept
    as they were then (the 'older backup' of the behind/ahead cases)."""
    from migrations_db.db import migrate
    stack = sys.modules["ballast_stack"]  # loaded by tests/conftest.py

    base = tmp_path_factory.mktemp("binding")
    job = f"bind{uuid.uuid4().hex[:8]}"
    db_url = f"sqlite:///{base / 'metrics.db'}"
    migrate(db_url)
    r = Run(job, f"{job}.in", base, kafka_bootstrap, db_url)
    stack.ensure_topics({r.topic: 2}, kafka_bootstrap)
    r.feed(100)
    r.run_until_counted(spark)
    for name, src in (("ckpt", r.ckpt), ("state", r.state)):
        r.backups[name] = base / f"phase1-{name}"
        shutil.copytree(src, r.backups[name])
    yield r


def refused(spark: Any, cfg: RunConfig, kind: type[BallastError] = BindingMismatch) -> str:
    """Start the job; it must raise `kind` before its query exists and commit nothing."""
    before = committed_epochs(Path(cfg.checkpoint_dir) / "spark")
    runner = JobRunner(spark, cfg)
    try:
        runner.start()
    except kind as exc:
        assert runner.query is None, "refused after the query started"
        assert committed_epochs(Path(cfg.checkpoint_dir) / "spark") == before
        return str(exc)
    runner.stop()
    raise AssertionError(f"the start was not refused ({cfg.state_location})")


def resumed(run: Run, spark: Any) -> None:
    """Phase 2 (once): 10 more records per key, at least 3 epochs (100 records each), all counted."""
    if run.sent < 110:
        run.feed(10)
        run.run_until_counted(spark, max_offsets_per_trigger=100)


@contextmanager
def swapped(target: Path, replacement: Path | None) -> Iterator[None]:
    """`target` replaced by a copy of `replacement` (None: absent) for the block, then restored."""
    aside = target.with_name(target.name + ".aside")
    target.rename(aside)
    try:
        if replacement is not None:
            shutil.copytree(replacement, target)
        yield
    finally:
        shutil.rmtree(target, ignore_errors=True)
        aside.rename(target)


# ----------------------------------------------------------------------------- the issue ------
def test_a_typo_in_the_state_uri_is_refused_and_the_right_one_resumes(run: Run, spark) -> None:
    typo = run.base / "state-aa"
    msg = refused(spark, run.config(state_uri=str(typo)))
    assert str(run.state) in msg and str(typo) in msg, msg
    assert f"--state-uri {run.state}" in msg and "spark_jobs.relocate" in msg
    assert not typo.exists(), "the refused start created an empty store"
    resumed(run, spark)
    counts = run.counts()
    assert counts[b"k0"] == 110 and set(counts.values()) == {110}


# ----------------------------------------------------------------------------- the store side --
def test_an_empty_store_is_refused(run: Run, spark) -> None:
    with swapped(run.state, None):
        msg = refused(spark, run.config())
        assert "empty store" in msg and str(run.state) in msg and str(run.ckpt) in msg, msg
        assert not (run.state / "store.json").exists()


def test_another_jobs_store_is_refused(run: Run, spark, make_topics) -> None:
    other = Run(f"{run.job}o", f"{run.job}o.in", run.base / "other", run.bootstrap, run.db_url)
    make_topics({other.topic: 2})
    other.feed(1)
    other.run_until_counted(spark)
    with swapped(run.state, other.state):
        msg = refused(spark, run.config())
    assert "another job's store" in msg and repr(other.job) in msg and repr(run.job) in msg, msg
    assert str(other.ckpt) in msg, "names the checkpoint the store belongs to"


def test_a_new_checkpoint_cannot_take_over_the_store(run: Run, spark) -> None:
    """Another deployment of the job (same name, a new checkpoint dir, this state URI and metrics DB)."""
    msg = refused(spark, run.config(checkpoint_dir=str(run.base / "ckpt-new")))
    assert "another deployment" in msg and str(run.ckpt) in msg, msg
    other_db = f"sqlite:///{run.base / 'metrics-new.db'}"
    from migrations_db.db import migrate

    migrate(other_db)
    msg = refused(spark, run.config(checkpoint_dir=str(run.base / "ckpt-new2"), db_url=other_db))
    assert "another checkpoint's store" in msg and str(run.ckpt) in msg and str(run.base / "ckpt-new2") in msg, msg


def test_another_deployment_in_the_metrics_db_is_refused(run: Run, spark) -> None:
    msg = refused(spark, run.config(checkpoint_dir=str(run.base / "ckpt-dep"), state_uri=str(run.base / "st-dep")))
    assert "metrics DB already holds job" in msg and str(run.ckpt) in msg and str(run.base / "ckpt-dep") in msg, msg
    assert not (run.base / "st-dep").exists(), "nothing bound for the refused deployment"


def test_a_store_behind_the_checkpoint_is_refused(run: Run, spark) -> None:
    resumed(run, spark)
    with swapped(run.state, run.backups["state"]):
        msg = refused(spark, run.config())
    assert "store behind the checkpoint" in msg and str(run.state) in msg, msg


def test_a_store_ahead_of_the_checkpoint_is_refused(run: Run, spark) -> None:
    resumed(run, spark)
    with swapped(run.ckpt, run.backups["ckpt"]):
        msg = refused(spark, run.config(), StateGap)
    assert "beyond Spark's last committed epoch" in msg and str(run.state) in msg, msg


# ----------------------------------------------------------------------------- fixed settings --
def test_a_changed_bin_count_or_operator_is_refused(run: Run, spark) -> None:
    msg = refused(spark, run.config(bins=16), JobMismatch)
    assert "bins: checkpoint has 8, start asked for 16" in msg, msg
    msg = refused(spark, run.config(operator="wordcount"), JobMismatch)
    assert "'keycount'" in msg and "'wordcount'" in msg, msg


def test_a_changed_key_schema_is_refused(run: Run, spark, monkeypatch) -> None:
    monkeypatch.setattr(KeyCount, "key_schema", "by-value", raising=False)
    msg = refused(spark, run.config())
    assert "key_schema" in msg and "'kafka-key'" in msg and "'by-value'" in msg, msg


def test_the_cli_refuses_with_exit_code_2_and_the_reason(run: Run) -> None:
    """What an operator sees: the reason on stderr, no traceback, nothing created at the typo."""
    typo = run.base / "state-cli"
    p = subprocess.run([sys.executable, "-m", "spark_jobs.cli", "run", "--job", run.job, "--input-topic", run.topic,
                        "--bins", "8", "--workers", "1", "--checkpoint-dir", str(run.ckpt), "--state-uri", str(typo),
                        "--bootstrap", run.bootstrap, "--db-url", run.db_url], cwd=REPO, capture_output=True,
                       text=True, timeout=300, start_new_session=True)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "Traceback" not in p.stderr and f"--state-uri {run.state}" in p.stderr and str(typo) in p.stderr
    assert not typo.exists()


# ----------------------------------------------------------------------------- relocation ------
def _relocate(run: Run, to: Path, faults: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spark_jobs.relocate", "--checkpoint-dir", str(run.ckpt),
                           "--to", str(to)], cwd=REPO, env=cli_env(faults), capture_output=True, text=True,
                          timeout=300, start_new_session=True)  # the fault kills the process group


def test_relocate_interrupted_then_resumed_moves_the_state(run: Run, spark, tmp_path) -> None:
    resumed(run, spark)
    new = run.base / "state-b"
    faults = tmp_path / "faults"
    faults.write_text("relocate_copied 3\n")
    first = _relocate(run, new, faults)
    assert first.returncode == -9, f"the relocation was not killed: {first.returncode} {first.stderr[-2000:]}"
    assert "killing pid" in first.stdout
    assert (new / "store.json").exists() is False and new.exists(), "a partial copy, the store's file not yet"
    assert json.loads((run.ckpt / "ballast" / BINDING).read_text())["state_uri"] == str(run.state)
    for where in (run.state, new):  # neither location runs while the move is unfinished
        msg = refused(spark, run.config(state_uri=str(where)))
        assert "unfinished" in msg and str(new) in msg, msg

    second = _relocate(run, new, faults)
    assert second.returncode == 0, second.stderr[-3000:]
    done = json.loads(second.stdout.strip().splitlines()[-1])
    assert done["skipped"] == 3 and done["copied"] == done["files"] - 3 > 0, done
    assert read_state(str(new)) == read_state(str(run.state)), "the copy reads as the same state"
    msg = refused(spark, run.config())  # the old location is no longer the job's
    assert f"--state-uri {new}" in msg, msg

    run.feed(10)
    run.run_until_counted(spark, state_uri=str(new))
    assert run.counts()[b"k0"] == 120
