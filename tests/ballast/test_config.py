"""ballast.config: the jobs file is read into validated jobs, and anything wrong in it (an unknown
or misspelt key, a bad value, a duplicate job, an operator that does not import) is refused with
a message naming the file, the job and the key. Fast: no services."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ballast.config import DEFAULT_SCHEDULES, ConfigError, JobConfig, OperatorEntry, get_job, load_jobs, schedules

pytestmark = pytest.mark.controlplane

# a two-operator chain (each operator reads the previous one's output)
JOBS = """jobs:
  - job: {job}
    input_topic: {job}.in
    bins: 16
    max_workers: 8
    operators:
      - {{name: split, operator: wordcount}}
      - {{name: counts, operator: keycount}}
    rebalance: {{window_epochs: 5, warmup_s: 0, warmup_epochs: 0}}
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "jobs.yaml"
    p.write_text(text)
    return p


def test_unknown_key_is_refused_naming_file_job_and_key(tmp_path: Path) -> None:
    p = _write(tmp_path, "jobs:\n  - {job: clicks, operator: keycount, input_topic: c, max_wrkers: 4}\n")
    with pytest.raises(ConfigError) as exc:
        load_jobs(p)
    msg = str(exc.value)
    assert f"{p}: jobs[0] (job 'clicks'): max_wrkers: unknown key; did you mean 'max_workers'?" in msg
    assert "allowed: job, operator, input_topic" in msg
    p = _write(tmp_path, "jobs:\n  - {job: clicks, operator: k, input_topic: c, rebalance: {stratgy: fluid}}\n")
    with pytest.raises(ConfigError, match=r"rebalance\.stratgy: unknown key; did you mean 'strategy'\?"):
        load_jobs(p)


@pytest.mark.parametrize(
    "body,expected",
    [
        ("bins: many", r"bins: Input should be a valid integer"),
        ("bins: 100", r"bins: bins must be a power of two"),
        (
            "rebalance: {strategy: fast}",
            r"rebalance\.strategy: Input should be 'all-at-once', 'fluid', 'batched' or 'auto'",
        ),
        ("rebalance: {emit_mode: eager}", r"rebalance\.emit_mode: Input should be 'flow-control' or 'prepared-ahead'"),
        ("launcher: yarn", r"launcher: Input should be 'cli' or 'spark-submit'"),
        (
            "min_workers: 3, max_workers: 2",
            r"need 1 <= min_workers \(3\) <= initial_workers \(1\) <= max_workers \(2\)",
        ),
    ],
)
def test_bad_value_is_refused_with_what_is_allowed(tmp_path: Path, body: str, expected: str) -> None:
    p = _write(tmp_path, f"jobs:\n  - {{job: clicks, operator: keycount, input_topic: c, {body}}}\n")
    with pytest.raises(ConfigError, match=re.escape(f"{p}: jobs[0] (job 'clicks'): ") + expected):
        load_jobs(p)


def test_missing_required_key_and_duplicate_job(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown top-level key\(s\) \['job'\]; allowed: \['jobs', 'schedules'\]"):
        load_jobs(_write(tmp_path, "job: [{job: a, operator: k, input_topic: t}]\njobs: []\n"))
    with pytest.raises(ConfigError, match=r"jobs\[0\] \(job 'a'\): input_topic: required key is missing"):
        load_jobs(_write(tmp_path, "jobs: [{job: a, operator: k}]\n"))
    with pytest.raises(ConfigError, match=r"job 'a' appears twice"):
        load_jobs(
            _write(tmp_path, "jobs: [{job: a, operator: k, input_topic: t}, {job: a, operator: k, input_topic: u}]\n")
        )


def test_operators_are_checked_when_the_jobs_file_loads(tmp_path):
    bad = JOBS.format(job="j").replace("operator: keycount", "operator: nosuch.module:Counts")
    with pytest.raises(ConfigError, match="nosuch.module:Counts.*does not import"):
        load_jobs(_write(tmp_path, bad))
    twice = JOBS.format(job="j").replace("name: counts", "name: split")
    with pytest.raises(ConfigError, match="names must be unique"):
        load_jobs(_write(tmp_path, twice))
    unknown = JOBS.format(job="j").replace("{name: split, operator: wordcount}", "{name: split, operatr: wordcount}")
    with pytest.raises(ConfigError, match="did you mean 'operator'"):
        load_jobs(_write(tmp_path, unknown))


def test_a_missing_or_empty_file_means_no_jobs(tmp_path: Path) -> None:
    assert load_jobs(tmp_path / "absent.yaml") == {}
    assert load_jobs(_write(tmp_path, "")) == {}
    assert load_jobs(_write(tmp_path, "jobs:\n")) == {}


@pytest.mark.parametrize("text,expected", [
    ("- {job: a}\n", r"expected a top-level 'jobs:' list"),
    ("jobs: {a: 1}\n", r"expected a top-level 'jobs:' list"),
    ("jobs: [just-a-name]\n", r"jobs\[0\]: each job must be a mapping of keys"),
    ("jobs: [{job: a, input_topic: t}]\n", r"jobs\[0\] \(job 'a'\): operator: required key is missing"),
])
def test_a_file_of_the_wrong_shape_is_refused_with_what_it_should_be(tmp_path: Path, text: str,
                                                                      expected: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=re.escape(f"{p}: ") + expected):
        load_jobs(p)


def test_get_job_names_the_configured_jobs_when_one_is_missing(tmp_path: Path) -> None:
    p = _write(tmp_path, "jobs: [{job: b, operator: keycount, input_topic: t}, "
                         "{job: a, operator: keycount, input_topic: u}]\n")
    assert get_job("a", p).input_topic == "u"
    with pytest.raises(ConfigError, match=re.escape(f"job 'c' is not in {p}; configured: ['a', 'b']")):
        get_job("c", p)


def test_a_chain_defaults_its_operator_to_the_first_and_is_seen_as_each_operator(tmp_path: Path) -> None:
    cfg = load_jobs(_write(tmp_path, JOBS.format(job="j")))["j"]
    assert cfg.operator == "split" and cfg.operator_names() == ["split", "counts"]
    counts = cfg.for_operator("counts")
    assert counts.operator == "counts" and counts.job == "j" and counts.operators == cfg.operators
    assert cfg.operator == "split"  # the view is a copy
    with pytest.raises(ConfigError, match=r"job 'j' has no operator 'join'; it has \['split', 'counts'\]"):
        cfg.for_operator("join")
    named = JOBS.format(job="j").replace("    bins: 16\n", "    bins: 16\n    operator: counts\n")
    assert load_jobs(_write(tmp_path, named))["j"].operator == "counts"
    stranger = JOBS.format(job="j").replace("    bins: 16\n", "    bins: 16\n    operator: join\n")
    with pytest.raises(ConfigError, match=r"operator 'join' is not one of the job's operators"):
        load_jobs(_write(tmp_path, stranger))


def test_a_single_operator_job_is_its_own_only_operator() -> None:
    cfg = JobConfig(job="j", operator="keycount", input_topic="t", extra_args=["--x", 3])  # type: ignore[list-item]
    assert cfg.operator_names() == ["keycount"] and cfg.operator_args() == ["--operator", "keycount"]
    assert cfg.extra_args == ("--x", "3")  # YAML numbers become command-line strings
    assert cfg.for_operator("keycount") == cfg
    assert JobConfig(job="j", operator="keycount", input_topic="t", checkpoint_dir="/cp").resolved_checkpoint_dir() \
        == "/cp"


@pytest.mark.parametrize("bins,ok", [(1, True), (2, True), (65536, True), (0, False), (3, False), (96, False)])
def test_bins_is_a_power_of_two(bins: int, ok: bool) -> None:
    if ok:
        assert JobConfig(job="j", operator="k", input_topic="t", bins=bins).bins == bins
    else:
        with pytest.raises(ValueError, match="bins must be a power of two"):
            JobConfig(job="j", operator="k", input_topic="t", bins=bins)


def test_an_operator_name_must_be_topic_safe() -> None:
    assert OperatorEntry(name="counts_2-b", operator="keycount").name == "counts_2-b"
    for name in ("", "a b", "a.b", "x" * 101):
        with pytest.raises(ValueError, match="name"):
            OperatorEntry(name=name, operator="keycount")


def test_schedules_default_and_may_be_overridden_or_switched_off(tmp_path: Path) -> None:
    assert schedules(tmp_path / "absent.yaml") == DEFAULT_SCHEDULES
    assert schedules(_write(tmp_path, "jobs: []\n")) == DEFAULT_SCHEDULES
    got = schedules(_write(tmp_path, "schedules: {rebalance: null, supervise: '*/5 * * * *'}\njobs: []\n"))
    assert got == {"supervise": "*/5 * * * *", "rebalance": None}
    assert DEFAULT_SCHEDULES["rebalance"] is not None  # the defaults are not changed by a file
    p = _write(tmp_path, "schedules: {retention: '@daily'}\njobs: []\n")
    with pytest.raises(ConfigError, match=re.escape(f"{p}: schedules.retention is unknown; known: "
                                                    "['rebalance', 'supervise']")):
        schedules(p)
