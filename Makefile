# Ballast — every target installs what it needs and is safe to re-run.
#   make demo   run the main job end to end on the embedded defaults
#   make lint   ruff, mypy and the import layers (run by .ci/run before the suite)
#   make test   the whole test suite (starts the services it needs itself)
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
STACK := $(PY) scripts/stack.py
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (0: one process). 2 on this 2-core machine. Three were tried on
# 2026-11-30: fresh clones took 37.9 and 41.5 min at 3 workers against 41.8 at 2 (CPU idle 4 % / 2.5 % against
# 13 %), and the second lost a test to the contention (a Python worker of Spark's transformWithState did not
# connect back in time): docs/suite.md. Again on 2026-12-01: 32.9 min at 3 against 25.8 at 2 (the waits burn CPU
# for longer: 60 CPU-min against 44). One process took 55.4 min (2026-11-28). make test-fast runs on FAST_WORKERS
TEST_WORKERS ?= 2
FAST_WORKERS ?= 3

.PHONY: setup up down status lint test test-fast demo bench bench-smoke lock db wheel clean help

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

setup: ## venv + pinned packages, Maven jars into .cache/ (idempotent)
	@bash scripts/setup.sh

up: setup ## start Kafka (KRaft) and Airflow standalone on 127.0.0.1, migrate the metrics DB; secure by default: SASL/SCRAM + ACLs, signed control (BALLAST_KAFKA_AUTH=none, BALLAST_CONTROL_SIGNING=none opt out)
	@$(STACK) up kafka airflow
	@$(PY) -m ballast.store upgrade

down: ## stop every local service this project started
	@$(STACK) down

status: ## which local services are up
	@$(STACK) status

db: setup ## upgrade the metrics DB at BALLAST_DB_URL (default: SQLite under .state/)
	@$(PY) -m ballast.store upgrade

lint: setup ## ruff (style, imports, bugbear, pyupgrade), mypy (strict on the framework-free core), the layer contracts (lint-imports; docs/architecture.md)
	@$(VENV)/bin/ruff check .
	@$(PY) -m mypy
	@$(VENV)/bin/lint-imports

test: setup ## the whole suite, against real Kafka, Spark, SQLite, PostgreSQL and Airflow (TEST_WORKERS=N: on N xdist workers); then nothing it started may still run (scripts/leftovers.py)
	@mkdir -p .state && tag=$$(date +%s%N) && rc=0 && \
	  BALLAST_RUN_TAG=$$tag $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=30 \
	  --junitxml=.state/test-report.xml $(PYTEST_ARGS) || rc=$$?; \
	  $(PY) scripts/leftovers.py --tag $$tag || { [ $$rc -ne 0 ] || rc=1; }; exit $$rc

test-fast: setup ## every test that needs no service and is not slow (the inner loop; a few minutes)
	@$(PY) -m pytest -n $(FAST_WORKERS) -m "not services and not slow" $(PYTEST_ARGS)

demo: up ## end to end: key-count job, load, a live 1->2 worker migration driven by Airflow
	@$(PY) scripts/demo.py

bench: setup ## the full benchmark set (~130 min on 2 cores: cluster 20-30, latency ~20, NEXMark ~30); results under bench/results/; BENCH_ARGS="--publish" updates bench/report/
	@$(PY) -m bench.run --full $(BENCH_ARGS)

bench-smoke: setup ## a ~13-minute benchmark run that checks shapes, not absolute numbers
	@$(PY) -m bench.run --smoke

wheel: setup ## build the project's wheel (ballast, spark_jobs, migrations_db) into dist/
	@$(PY) -m spark_jobs.ship wheel dist

lock: ## regenerate constraints.txt from a fresh resolve of requirements.txt + requirements-dev.txt
	@rm -rf .lock-venv && python3 -m venv .lock-venv \
	  && .lock-venv/bin/pip install -q -r requirements.txt -r requirements-dev.txt \
	  && { echo "# Exact versions of the full dependency set (pip freeze of a working venv). Regenerate with"; \
	       echo "# \`make lock\` after changing requirements.txt or requirements-dev.txt."; .lock-venv/bin/pip freeze; } > constraints.txt \
	  && rm -rf .lock-venv

clean: ## stop the services, remove their data, checkpoints and logs (keeps the venv and jar cache)
	@$(STACK) clean
	rm -rf .state
