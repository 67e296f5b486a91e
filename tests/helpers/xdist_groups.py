"""Tests on one expensive fixture run on one pytest-xdist worker (`make test`: `--dist loadgroup`).

A pytest plugin (tests/conftest.py loads it): each test that uses a fixture of `GROUPS` gets the
`xdist_group` mark of its group, so xdist hands the group's tests to one worker as one unit. Why:
the console's Airflow is a session fixture: on two workers it started twice, and both ran on, idle,
to the session's end (only a grouped fixture's worker may stop it after its last test:
tests/conftest.py `stop_after_last_use`); the loopback cluster's tests must not run two clusters at
once on 2 cores; the smoke's checks read one run.

Two things made the marks do nothing, silently, until 2026-11-30 (tests/project/test_xdist_groups.py
now fails if either comes back):
- The hook must run before xdist's own `pytest_collection_modifyitems`, which turns the marks into
  node-id suffixes: a plain conftest hook ran after it (hence `tryfirst`).
- pytest 9.2 builds node ids from a structured id that xdist 3.8 does not rewrite
  (pytest-dev/pytest-xdist#1386), so requirements.txt holds pytest below 9.2 until xdist follows.

`make test` passes `--no-loadscope-reorder`: xdist otherwise hands out the largest groups first, and
the smoke's six checks, which wait for the smoke run, would hold a worker from the start.
"""

from __future__ import annotations

import pytest

#: fixture -> xdist group of every test that uses it
GROUPS = {"console_stack": "console", "spark_cluster": "cluster", "smoke_run": "bench-smoke"}

#: The mark of the modules whose tests mostly wait on a clock (a broker or the metrics DB down 30 s,
#: a paused driver past its heartbeat timeout): they run one at a time, so while one waits the
#: other worker works. In path order they came one after the other and both workers waited at once
#: (two to five minutes of an idle CPU in a fresh clone at bfd8639). A static mark, so xdist sees it.
OUTAGES = pytest.mark.xdist_group("outages")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test on a grouped fixture gets its group's mark (the first fixture of GROUPS it uses)."""
    for item in items:
        group = next((g for f, g in GROUPS.items() if f in getattr(item, "fixturenames", ())), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
