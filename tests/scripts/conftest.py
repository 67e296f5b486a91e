"""Tests of scripts/: the cluster script's tests get a real loopback cluster (tests/helpers/cluster.py)."""

from tests.helpers.cluster import spark_cluster as spark_cluster  # noqa: F401 - the fixtures, re-exported
from tests.helpers.cluster import submit_app as submit_app  # noqa: F401
