"""spark_jobs.cli: flags become the run's RunConfig; a bad operator or chain is refused with exit
code 2 before Spark starts; `stop` asks a job with state in its checkpoint dir to stop."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from spark_jobs.cli import config_from_args, main, parser

pytestmark = pytest.mark.dataplane
RUN = ["run", "--job", "j", "--input-topic", "t", "--checkpoint-dir", "/nonexistent/x"]


class _Bad:
    pass


@pytest.fixture
def clean_env(monkeypatch):  # type: ignore[no-untyped-def]
    """No signing keys, no Kafka security, a metrics DB URL of the test's own."""
    for var in ("BALLAST_CONTROL_KEYS", "BALLAST_KAFKA_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("BALLAST_DB_URL", "sqlite:////nonexistent/metrics.db")


def test_cli_refuses_a_bad_operator_path_before_starting_spark(capsys):
    rc = main(["run", "--job", "j", "--input-topic", "t", "--checkpoint-dir", "/nonexistent/x",
               "--operator", "test_cli:_Bad"])
    assert rc == 2 and "nor a stateful processor" in capsys.readouterr().err


def test_cli_refuses_a_chain_whose_operator_does_not_import(tmp_path):
    out = subprocess.run([sys.executable, "-m", "spark_jobs.cli", "run", "--job", "j", "--input-topic", "t",
                          "--operator", "a=keycount", "--operator", "b=nosuch.mod:X",
                          "--checkpoint-dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "nosuch.mod:X" in out.stderr and "does not import" in out.stderr


@pytest.mark.parametrize("operators, why", [
    (["keycont"], "unknown operator 'keycont'"),
    (["a b=keycount", "c=keycount"], "use letters, digits"),
    (["a=keycount", "a=wordcount"], "operator names must be unique"),
    (["spark_jobs.operators:Operator"], "cannot be instantiated"),
])
def test_a_bad_operator_name_or_chain_is_exit_code_2_with_the_reason(operators, why, capsys):
    argv = RUN + [x for o in operators for x in ("--operator", o)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ballast-job: error: ") and why in err


@pytest.mark.parametrize("argv, why", [
    ([], "required: cmd"),
    (["run", "--input-topic", "t", "--checkpoint-dir", "c"], "--job"),
    (["run", "--job", "j", "--checkpoint-dir", "c"], "--input-topic"),
    (RUN + ["--bins", "many"], "invalid int value: 'many'"),
    (["stop"], "--checkpoint-dir"),
    (["start"], "invalid choice: 'start'"),
])
def test_missing_or_malformed_flags_exit_2_naming_them(argv, why, capsys):
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(argv)
    assert exc.value.code == 2 and why in capsys.readouterr().err


def test_flags_become_the_runs_config(clean_env):
    cfg = config_from_args(parser().parse_args(RUN))
    assert (cfg.job, cfg.operator, cfg.operator_path, cfg.path, cfg.input_topic) == ("j", "keycount", None,
                                                                                      "keycount", "t")
    assert (cfg.bins, cfg.workers, cfg.snapshot_every, cfg.trigger_ms, cfg.output_partitions) == (256, 2, 10, 1000, 2)
    assert cfg.fail_on_data_loss and cfg.control_keyring is None and cfg.kafka_security.plaintext and cfg.trace
    assert cfg.db_url == "sqlite:////nonexistent/metrics.db"  # BALLAST_DB_URL: never on the command line
    cfg = config_from_args(parser().parse_args(RUN + [
        "--operator", "counts=mod.sub:Counts", "--operator", "avg=keycount", "--bins", "1024", "--workers", "3",
        "--allow-data-loss", "--db-url", "sqlite:///other.db", "--state-uri", "s3://b/j", "--kafka-outage-s", "45",
        "--no-trace"]))
    assert (cfg.operator, cfg.operator_path, cfg.path) == ("counts", "mod.sub:Counts", "mod.sub:Counts")
    assert (cfg.bins, cfg.workers, cfg.state_location, cfg.kafka_outage_s) == (1024, 3, "s3://b/j", 45.0)
    assert not cfg.fail_on_data_loss and cfg.db_url == "sqlite:///other.db" and not cfg.trace


def test_key_and_kafka_files_are_read_into_the_config(clean_env, tmp_path):
    keys, kafka = tmp_path / "keys.json", tmp_path / "kafka.json"
    keys.write_text(json.dumps({"k1": "s" * 32}))
    kafka.write_text(json.dumps({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                                 "sasl.username": "job", "sasl.password": "pw"}))
    cfg = config_from_args(parser().parse_args(RUN + ["--control-keys", str(keys), "--control-max-age-s", "30",
                                                      "--kafka-config", str(kafka)]))
    assert cfg.control_keyring is not None and cfg.control_keyring.kids == ["k1"]
    assert cfg.control_keyring.max_age_s == 30.0
    assert cfg.kafka_security.describe() == "SASL_PLAINTEXT SCRAM-SHA-512 as job"
    with pytest.raises(ValueError, match="cannot read control keys file"):
        config_from_args(parser().parse_args(RUN + ["--control-keys", str(tmp_path / "missing.json")]))


def test_stop_asks_a_job_to_stop_only_where_a_job_has_state(tmp_path, capsys):
    assert main(["stop", "--checkpoint-dir", str(tmp_path)]) == 1
    assert f"no Ballast job state in {tmp_path}" in capsys.readouterr().err
    assert not (tmp_path / "ballast" / "STOP").exists()
    (tmp_path / "ballast").mkdir()
    (tmp_path / "ballast" / "job.json").write_text("{}")
    assert main(["stop", "--checkpoint-dir", str(tmp_path)]) == 0
    assert (tmp_path / "ballast" / "STOP").exists() and "stop requested" in capsys.readouterr().out
