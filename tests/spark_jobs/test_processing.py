"""What a processor's handlers see and emit does not depend on the machine (spark_jobs.processing):
timestamps are aware UTC datetimes under any TZ, sets in output rows are written sorted. The
end-to-end check, a replay under another TZ, is tests/system/test_replay_bytes.py."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from spark_jobs.records import _json_default, encode_output, utc_datetime

pytestmark = pytest.mark.dataplane


@pytest.mark.parametrize("tz", ["UTC", "Asia/Kolkata", "America/New_York", "Pacific/Chatham"])
def test_timestamps_are_utc_whatever_the_zone(tz, monkeypatch):
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        for ms, want in [(0, datetime(1970, 1, 1, tzinfo=UTC)),
                         (1_772_958_153_123, datetime(2026, 3, 8, 8, 22, 33, 123000, tzinfo=UTC)),
                         (-1, datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)),
                         (253_402_300_799_999, datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC))]:
            got = utc_datetime(ms)
            assert got == want and got.utcoffset().total_seconds() == 0 and str(got) == str(want)
            assert round(got.timestamp() * 1000) == ms  # the instant, not a wall clock in the host's zone
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_output_rows_are_the_same_bytes_in_any_process():
    """Two interpreters with different hash seeds and zones encode the same row identically."""
    code = ("from spark_jobs.records import encode_output; from spark_jobs.records import utc_datetime;"
            "import sys; sys.stdout.write(encode_output({'ts': utc_datetime(1772958153123), "
            "'tags': {'alpha', 'beta', 'gamma', 'delta', 'x1', 'x2', 'x3'}}).decode())")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(seed), "TZ": tz, "PATH": "/usr/bin:/bin",
                                "PYTHONPATH": ":".join(sys.path)}).stdout
            for seed, tz in [(1, "UTC"), (2, "Asia/Kolkata"), (3, "America/New_York"), (4, "Australia/Sydney")]}
    assert outs == {'{"ts":"2026-03-08 08:22:33.123000+00:00",'
                    '"tags":["alpha","beta","delta","gamma","x1","x2","x3"]}'}, outs
    assert _json_default(frozenset({3, 1, 2})) == [1, 2, 3]
    assert encode_output({"n": 1}) == b'{"n":1}'
