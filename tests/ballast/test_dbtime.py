"""ballast.dbtime: a timestamp read back from the metrics DB is always timezone-aware UTC, the same
instant whether the DB kept its offset (PostgreSQL) or dropped it (SQLite). Fast: no services."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from ballast.dbtime import as_utc

pytestmark = pytest.mark.store


def test_none_stays_none() -> None:
    assert as_utc(None) is None


def test_a_naive_timestamp_is_read_as_utc() -> None:
    got = as_utc(datetime(2026, 1, 1, 12, 30))
    assert got == datetime(2026, 1, 1, 12, 30, tzinfo=UTC) and got is not None and got.tzinfo is UTC


def test_an_aware_timestamp_keeps_its_instant_and_is_given_in_utc() -> None:
    cet = datetime(2026, 1, 1, 13, 30, tzinfo=timezone(timedelta(hours=1)))
    got = as_utc(cet)
    assert got == cet and got is not None and got.tzinfo is UTC and (got.hour, got.minute) == (12, 30)
    utc = datetime(2026, 1, 1, 12, 30, tzinfo=UTC)
    assert as_utc(utc) == utc
