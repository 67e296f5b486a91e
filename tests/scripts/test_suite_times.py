"""scripts/suite_times.py: a JUnit report's test times summed per file (a test class's cases count
for its file), and the run's wall time."""

from __future__ import annotations

from scripts import suite_times

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" time="95.5">
<testcase classname="tests.system.test_a" name="test_x" time="40.0"/>
<testcase classname="tests.system.test_a" name="test_y[p]" time="10.5"/>
<testcase classname="tests.store.test_b.TestGroup" name="test_z" time="2.0"/>
</testsuite></testsuites>"""


def test_times_are_summed_per_file(tmp_path):
    report = tmp_path / "r.xml"
    report.write_text(REPORT)
    times, wall = suite_times.per_file(report)
    assert times == {"tests/system/test_a.py": 50.5, "tests/store/test_b.py": 2.0}
    assert wall == 95.5
