"""Where the suite's time went: per test file (setup, call and teardown summed) from the JUnit report
`make test` writes to .state/test-report.xml.

`python scripts/suite_times.py [report.xml] [--top N]`. Why a report file and not pytest's
`--durations`: the durations print once at the end of a run and only the slowest tests; the report
keeps every test of the last run, so a long run can be read afterwards, per file.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def per_file(report: Path) -> tuple[Counter[str], float]:
    """Seconds per test file, and the run's wall time as pytest recorded it."""
    root = ET.parse(report).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        raise SystemExit(f"{report}: no <testsuite> element")
    times: Counter[str] = Counter()
    for case in suite.iter("testcase"):
        name = case.get("classname", "").split(".")
        path = "/".join(p for p in name if not p[:1].isupper()) + ".py"  # drop a test class
        times[path] += float(case.get("time", 0))
    return times, float(suite.get("time", 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", nargs="?", default=str(REPO / ".state" / "test-report.xml"))
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    times, wall = per_file(Path(a.report))
    print(f"{len(times)} files, {sum(times.values()) / 60:.1f} min in tests, run {wall / 60:.1f} min")
    for path, t in times.most_common(a.top):
        print(f"{t:8.1f} s  {path}")


if __name__ == "__main__":
    main()
