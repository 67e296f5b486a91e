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


def _services() -> dict:
    return _load("compose.yaml")["services"]


def test_every_dependency_is_waited_for_by_health_or_completion():
    """As in Airflow's own compose file: a service starts only once what it needs is healthy (a
    health check) or has finished (an init service that does not restart)."""
    services = _services()
    for name, svc in services.items():
        deps = svc.get("depends_on", {})
        assert isinstance(deps, dict), f"{name}: depends_on as a list waits for nothing; give each a condition"
        for dep, how in deps.items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            cond = how.get("condition")
            if cond == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy, which has no healthcheck"
            else:
                assert cond == "service_completed_successfully", f"{name} -> {dep}: condition {cond!r}"
                assert services[dep].get("restart") == "no", f"{dep} is an init service: restart must be 'no'"
    long_running = [n for n, s in services.items() if s.get("restart") != "no"]
    assert all("healthcheck" in services[n] for n in long_running), \
        [n for n in long_running if "healthcheck" not in services[n]]


def test_init_order_topic_login_and_fernet_key():
    services = _services()
    init = services["airflow-init"]
    assert "airflow db migrate" in init["command"][0] and "python -m ballast.store upgrade" in init["command"][0]
    for name in ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        deps = services[name]["depends_on"]
        assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
        assert deps["kafka-init"]["condition"] == "service_completed_successfully", name
    jobs = yaml.safe_load((REPO / "docker" / "jobs.yaml").read_text())["jobs"]
    kafka_init = services["kafka-init"]["environment"]  # docker/kafka-init.sh creates it and grants the ACLs
    assert '--topic "$INPUT"' in (REPO / "docker" / "kafka-init.sh").read_text()
    for job in jobs:
        assert (kafka_init["INIT_JOB"], kafka_init["INIT_INPUT_TOPIC"]) == (job["job"], job["input_topic"]), \
            f"kafka-init does not create {job['input_topic']}"
    env = services["airflow-api-server"]["environment"]
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == "admin:admin"
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] in init["command"][0]  # airflow-init writes it
    assert env["AIRFLOW__CORE__FERNET_KEY"].startswith("${AIRFLOW_FERNET_KEY:?")  # required, never a default
    readme = (REPO / "docker" / "README.md").read_text()
    assert "admin" in readme and "BALLAST_AIRFLOW_PASSWORD" in readme and "AIRFLOW_FERNET_KEY" in readme


def test_driver_reaches_connector_state_and_executors():
    """The driver runs in airflow-scheduler (client mode): it needs the connector jars, a name the
    executors can reach, and the state volume at the path the workers mount."""
    services = _services()
    sched, worker = services["airflow-scheduler"], services["spark-worker"]
    env = sched["environment"]
    assert env["SPARK_LOCAL_HOSTNAME"] == sched["hostname"] == "airflow-scheduler"
    state = env["BALLAST_STATE_DIR"]
    assert f"ballast-state:{state}" in sched["volumes"] and f"ballast-state:{state}" in worker["volumes"]
    assert "ballast-state" in _load("compose.yaml")["volumes"]
    dockerfile = (REPO / "docker" / "airflow.Dockerfile").read_text()
    assert "COPY --from=jars /jars/ /opt/ballast-cache/jars/spark-kafka/" in dockerfile
    # Ballast's Kafka writer where spark_jobs/session.py's SINK_JARS looks, on the driver and the executors
    assert "COPY --from=sink /ballast-sink.jar /opt/ballast-cache/jars/ballast-sink/" in dockerfile
    assert "COPY --from=sink /ballast-sink.jar /opt/spark/jars/" in (REPO / "docker" / "spark.Dockerfile").read_text()
    assert "BALLAST_CACHE_DIR=/opt/ballast-cache" in dockerfile  # spark_jobs/session.py's CONNECTOR_JARS
    mounted = {v.split(":")[1]: v.split(":")[0] for v in sched["volumes"]}
    assert env["BALLAST_JOBS_FILE"] in mounted


def test_jobs_file_of_the_deployment_is_valid_and_submits_to_the_cluster():
    from ballast.config import load_jobs

    jobs = load_jobs(REPO / "docker" / "jobs.yaml")
    assert jobs and all(j.launcher == "spark-submit" for j in jobs.values())
    env = _services()["airflow-scheduler"]["environment"]
    assert all(f"AIRFLOW_CONN_{j.spark_conn_id.upper()}" in env for j in jobs.values())


def test_env_the_code_reads_is_set():
    """Every variable the Airflow side reads without a usable default inside a container is set."""
    env = _services()["airflow-scheduler"]["environment"]
    for var in ("BALLAST_DB_URL", "BALLAST_KAFKA_BOOTSTRAP", "BALLAST_STATE_DIR", "BALLAST_JOBS_FILE",
                "PYSPARK_PYTHON", "AIRFLOW__SECRETS__BACKEND_KWARGS", "AIRFLOW_CONN_BALLAST_METRICS_DB",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        assert env.get(var), var
    assert env["BALLAST_KAFKA_BOOTSTRAP"] == "kafka:9092" and "metrics-db:5432" in env["BALLAST_DB_URL"]


def _copied_sources(dockerfile: str) -> list[str]:
    out = []
    for line in dockerfile.splitlines():
        parts = line.split()
        if parts[:1] == ["COPY"] and not any(p.startswith("--from") for p in parts):
            out += parts[1:-1]
    return out


@pytest.mark.parametrize("name", ["airflow.Dockerfile", "spark.Dockerfile"])
def test_every_file_a_dockerfile_copies_exists(name):
    sources = _copied_sources((REPO / "docker" / name).read_text())
    assert sources, "no COPY found: the parser is broken"
    for src in sources:
        assert (REPO / src).exists(), f"docker/{name} copies {src}, which the build context (repo root) lacks"
    for svc in _services().values():  # and every bind mount's source
        base = REPO / "docker"
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                assert (base / src).resolve().exists(), f"bind mount {vol}: {src} is missing"


def test_compose_cli_renders_the_file(tmp_path):
    """`docker compose config` (no engine needed) when a compose CLI is installed here."""
    import shutil
    import subprocess

    cli: list[str] | None = None
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        cli = ["docker", "compose"]
    elif shutil.which("docker-compose"):
        cli = ["docker-compose"]
    if cli is None:
        pytest.skip("no docker compose CLI here (docker has no compose plugin); the schema tests above still ran")
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "AIRFLOW_FERNET_KEY": "x" * 43 + "=", "HOME": str(tmp_path)}
    res = subprocess.run([*cli, "-f", str(REPO / "docker" / "compose.yaml"), "config"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    missing = subprocess.run([*cli, "-f", str(REPO / "docker" / "compose.yaml"), "config"], capture_output=True,
                             text=True, env={k: v for k, v in env.items() if k != "AIRFLOW_FERNET_KEY"}, timeout=120)
    assert missing.returncode != 0 and "AIRFLOW_FERNET_KEY" in missing.stderr


# ------------------------------------------------------------ secure by default (issue 28) --
def _script(name: str) -> str:
    return (REPO / "docker" / name).read_text()


def test_the_broker_runs_sasl_scram_with_acls_and_no_plaintext_listener():
    """As `make up`'s broker (scripts/stack_kafka.py): SCRAM-SHA-256 on the client listener, the
    StandardAuthorizer, nothing allowed without an ACL, the same three principals."""
    import ballast_stack as stack  # scripts/stack.py, loaded by tests/conftest.py

    services = _services()
    kafka = services["kafka"]
    assert "kafka-secure.sh" in " ".join(kafka["entrypoint"]) and "environment" not in kafka
    assert "ballast-secrets:/run/ballast-secrets:ro" in kafka["volumes"]
    assert kafka["depends_on"]["secrets-init"]["condition"] == "service_completed_successfully"
    assert "--command-config /run/ballast-secrets/kafka/admin.properties" in kafka["healthcheck"]["test"][1]
    props = _script("kafka-secure.sh")
    for line in ("listeners=SASL_PLAINTEXT://:9092,CONTROLLER://:9093", "sasl.enabled.mechanisms=SCRAM-SHA-256",
                 "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "super.users=User:admin", "allow.everyone.if.no.acl.found=false"):
        assert f"\n{line}\n" in props, line
    assert "PLAINTEXT://" not in props.replace("SASL_PLAINTEXT://", "")
    for user in stack.SCRAM_USERS:
        assert f"--add-scram \"SCRAM-SHA-256=[name={user},password=${{{user.upper()}_PASSWORD}}]\"" in props
    init = services["kafka-init"]
    assert "kafka-init.sh" in " ".join(init["entrypoint"])
    acls = _script("kafka-init.sh")
    assert '--allow-principal User:controller --operation Write --operation Create --topic "$JOB.control"' in acls
    assert '--deny-principal User:job --operation Write --operation Alter --topic "$JOB.control"' in acls
    assert '--allow-principal User:job --operation Read --topic "$INPUT"' in acls


def test_airflow_and_the_jobs_get_credentials_and_the_key_from_the_secrets_volume_only():
    services = _services()
    env = services["airflow-scheduler"]["environment"]
    assert not [k for k in env if k.startswith(("AIRFLOW_CONN_BALLAST_KAFKA", "AIRFLOW_CONN_BALLAST_CONTROL"))
                or k in ("BALLAST_KAFKA_CONFIG", "BALLAST_CONTROL_KEYS", "BALLAST_CONTROL_SIGNING_KEY")], \
        "Kafka credentials and control keys come from the secrets volume, never from the compose file"
    assert env["AIRFLOW__SECRETS__BACKEND"] == "airflow.secrets.local_filesystem.LocalFilesystemBackend"
    conns = json.loads(env["AIRFLOW__SECRETS__BACKEND_KWARGS"])["connections_file_path"]
    assert conns == "/run/ballast-secrets/airflow/connections.json"
    for name in ("airflow-init", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor",
                 "airflow-triggerer"):
        svc = services[name]
        assert "ballast-secrets:/run/ballast-secrets:ro" in svc["volumes"], name
        assert svc["depends_on"]["secrets-init"]["condition"] == "service_completed_successfully", name
    secrets_init = services["secrets-init"]
    assert secrets_init["restart"] == "no" and "ballast-secrets:/run/ballast-secrets" in secrets_init["volumes"]
    assert secrets_init["entrypoint"][-4:] == ["--kafka-owner", "1000:1000", "--airflow-owner", "50000:0"]
    for job in yaml.safe_load(_script("jobs.yaml"))["jobs"]:
        args = job["extra_args"]
        assert args[args.index("--control-keys") + 1] == "/run/ballast-secrets/airflow/control-keys.json"
    assert "ballast-secrets" in _load("compose.yaml")["volumes"]


def test_secrets_init_makes_private_consistent_secrets_once(tmp_path):
    """docker/secrets_init.py: what it writes is 0600 in 0700 directories, kept on a re-run, and
    consistent with what the Python side reads — the connections parse (Airflow's own file loader)
    into the principals' SCRAM settings with the broker's passwords, and the controller's signing
    key authenticates against the jobs' keys file."""
    import importlib.util
    import stat

    from airflow.secrets.local_filesystem import load_connections_dict

    from ballast.kafka_security import KafkaSecurity
    from ballast.signing import SigningKey, load_keyring, sign

    spec = importlib.util.spec_from_file_location("secrets_init", REPO / "docker" / "secrets_init.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    root = tmp_path / "secrets"
    assert len(mod.make(root)) == 4
    before = {p: p.read_text() for p in root.rglob("*") if p.is_file()}
    assert mod.make(root) == [] and {p: p.read_text() for p in root.rglob("*") if p.is_file()} == before
    for p in before:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600 and stat.S_IMODE(p.parent.stat().st_mode) == 0o700, p
    pw = dict(line.split("=", 1) for line in (root / "kafka" / "users.env").read_text().split())
    conns = load_connections_dict(str(root / "airflow" / "connections.json"))
    for conn_id, user in (("ballast_kafka", "controller"), ("ballast_kafka_job", "job")):
        sec = KafkaSecurity.from_config(conns[conn_id].extra_dejson)
        assert (sec.protocol, sec.mechanism, sec.username) == ("SASL_PLAINTEXT", "SCRAM-SHA-256", user)
        assert sec.password == pw[f"{user.upper()}_PASSWORD"]
        assert conns[conn_id].extra_dejson["bootstrap.servers"] == "kafka:9092"
    assert f'password="{pw["ADMIN_PASSWORD"]}"' in (root / "kafka" / "admin.properties").read_text()
    # the signals watchers' connection: the controller, in the group kafka-init.sh grants
    watch = conns["ballast_kafka_watch"].extra_dejson
    assert (watch["sasl.username"], watch["group.id"], watch["auto.offset.reset"]) == ("controller", "ballast-watch",
                                                                                       "latest")
    assert "--group ballast-watch" in (REPO / "docker" / "kafka-init.sh").read_text()
    # a deployment made before the watchers existed gets their connection, keeping its own secrets
    path = root / "airflow" / "connections.json"
    old = json.loads(path.read_text())
    del old["ballast_kafka_watch"]
    path.write_text(json.dumps(old))
    assert mod.make(root) == [str(path)]
    assert json.loads(path.read_text())["ballast_kafka"] == old["ballast_kafka"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "ballast_kafka_watch" in load_connections_dict(str(path))
    signing = conns["ballast_control_signing"]
    key = SigningKey.of(signing.login, signing.password)
    ring = load_keyring(str(root / "airflow" / "control-keys.json"))
    assert ring is not None and ring.authenticate(sign({"job": "clicks"}, key)) == key.kid
    again = tmp_path / "another-deployment"
    mod.make(again)
    theirs = json.loads((again / "airflow" / "control-keys.json").read_text())
    assert not set(theirs) & set(json.loads(before[root / "airflow" / "control-keys.json"])), "kids differ too"


def test_no_secret_is_committed_in_docker():
    """Passwords and keys are made by secrets-init: none is written in the compose or jobs file."""
    for name in ("compose.yaml", "jobs.yaml", "kafka-secure.sh", "kafka-init.sh"):
        text = _script(name)
        assert "sasl.password" not in text and "base64:" not in text, name
    assert 'user_admin="${ADMIN_PASSWORD}"' in _script("kafka-secure.sh")  # read from the volume at start
