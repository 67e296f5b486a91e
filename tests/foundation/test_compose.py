"""docker/compose.yaml validates against the Compose Specification's JSON schema (no engine here)."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

pytestmark = pytest.mark.foundation
REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / ".cache" / "compose-spec" / "compose-spec.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft201909Validator:
    if not SCHEMA.exists():
        pytest.skip(f"compose schema not fetched to {SCHEMA} (npm unavailable during `make setup`)")
    schema = json.loads(SCHEMA.read_text())
    return jsonschema.Draft201909Validator(schema)


def _load(name: str) -> dict:
    return yaml.safe_load((REPO / "docker" / name).read_text())


def test_compose_file_is_valid(validator):
    doc = _load("compose.yaml")
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_compose_has_every_part_of_the_deployment():
    services = _load("compose.yaml")["services"]
    for name in ("kafka", "spark-master", "spark-worker", "airflow-api-server", "airflow-scheduler",
                 "airflow-dag-processor", "airflow-triggerer", "airflow-db", "metrics-db"):
        assert name in services, name
    for path in ("docker/airflow.Dockerfile", "docker/spark.Dockerfile"):
        assert (REPO / path).exists()


def test_validator_rejects_a_broken_file(validator):
    doc = _load("compose.yaml")
    doc["services"]["kafka"]["ports"] = {"not": "a list"}
    assert list(validator.iter_errors(doc)), "the schema check must be able to fail"
