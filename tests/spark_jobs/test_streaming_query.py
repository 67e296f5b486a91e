"""spark_jobs.streaming_query: the values a query runs with are the configuration's where no
settings step changed them, a step's 0 lifts the cap, and a step's values win over the command line
(the restart itself, on real Spark and Kafka: tests/system/test_settings_job.py). Fast: no services."""

from __future__ import annotations

import pytest

from ballast.protocol import Settings
from spark_jobs.run_config import RunConfig
from spark_jobs.streaming_query import Effective

pytestmark = pytest.mark.dataplane


def _cfg(trigger_ms: int = 1000, cap: int | None = None) -> RunConfig:
    return RunConfig(job="j", input_topic="j.in", checkpoint_dir="/tmp/unused", bootstrap="127.0.0.1:1",
                     db_url="sqlite://", trigger_ms=trigger_ms, max_offsets_per_trigger=cap)


def test_without_settings_steps_the_command_line_holds() -> None:
    assert Effective.of(_cfg(500, 2000), Settings()) == Effective(500, 2000)
    assert Effective.of(_cfg(500, None), Settings()) == Effective(500, None)


def test_a_settings_steps_values_win_and_leave_the_others_alone() -> None:
    assert Effective.of(_cfg(500, 2000), Settings(trigger_ms=0)) == Effective(0, 2000), "0 ms: no wait"
    assert Effective.of(_cfg(500, 2000), Settings(max_records_per_epoch=300)) == Effective(500, 300)
    assert Effective.of(_cfg(500, 2000), Settings(max_records_per_epoch=0)) == Effective(500, None), "0: no cap"
    assert Effective.of(_cfg(500, None), Settings(250, 40)) == Effective(250, 40)
