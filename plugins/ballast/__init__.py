"""Ballast control side: the control protocol (shared with the data plane), the pure-Python
policy (`ballast.policy`), and the Airflow glue (hooks, sensors, triggers, plugin)."""
