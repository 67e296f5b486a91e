"""Helpers every test area shares, importable as `tests.helpers.<module>` (pytest puts the repo
root on sys.path: pyproject's `pythonpath = ["."]`).

  wait     wait_until: poll a condition until it holds or a deadline passes
  procs    free_port, killpg: ports for a service of one's own, SIGKILL of a process group
  brokers  own_broker: a Kafka broker of the test's own (stopped by fault tests, SASL for security)
  control  send_control: raw control records onto a job's control topic, as the controller does
  jobs     jobs_yaml / write_jobs_file (the jobs file Airflow and the supervisor read) and
           seed_job (the metrics a job writes while it runs)

Area-specific oracles stay with their area (tests/dataplane/dp_helpers.py, tests/faults/fault_helpers.py).
"""
