"""Helpers every test area shares, importable as `tests.helpers.<module>` (pytest puts the repo
root on sys.path: pyproject's `pythonpath = ["."]`).

  wait     wait_until: poll a condition until it holds or a deadline passes
  procs    free_port, killpg: ports for a service of one's own, SIGKILL of a process group
  brokers  own_broker: a Kafka broker of the test's own (stopped by fault tests, SASL for security)
  control  send_control: raw control records onto a job's control topic, as the controller does
  race     together: calls started at once in threads (a race made certain)
  jobs     jobs_yaml / write_jobs_file (the jobs file Airflow and the supervisor read) and
           seed_job (the metrics a job writes while it runs)

  airflow_home    a throwaway AIRFLOW_HOME set on import, and the airflow_db / jobs_file fixtures
                  (re-exported by tests/ballast, tests/dags and tests/system conftest.py)
  cluster         the loopback Spark standalone cluster fixtures (spark_cluster, submit_app)
  dialects        any_db: a fresh migrated metrics DB, on SQLite then on PostgreSQL
  dag_bag         the DAG folder parsed for a jobs file of the test's own (no metadata DB): structure, params
  stepapplier     the reference step applier answering control messages as the data plane does
  store_seed      rows the store's tests seed
  dp_helpers      the data plane's oracles: produce, reference_by_epoch, check_state, plans ...
  worker_epochs   Harness: a worker's epochs and the driver's commit without Spark (LMDB, Arrow)
  kill_runs       the CLI job killed and restarted while a plan applies (exactly-once runs)
  window_helpers  the tumbling-window example's events and pure-Python reference
  processor_key   one grouping key of a stateful processor driven as an epoch loop does (no Spark)
  fault_helpers   a batched migration through an outage of the broker or the metrics DB
  fuzz_messages   generated valid, near-valid and hostile control messages (Hypothesis)
  console_stack   the stack's real Airflow and a headless browser for the console tests
  bench_smoke     the benchmark smoke run, started with the session so it overlaps the rest

Test files sit at tests/<dir>/test_x.py (one level below tests/): several compute the repository
root as Path(__file__).parents[2]. User operators that Spark loads by module name (chain_ops,
reminder_processor, poison_operator) stay beside the system tests that ship them.
"""
