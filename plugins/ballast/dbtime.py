"""UTC for timestamps read back from the metrics DB (one helper for every reader of it)."""

from __future__ import annotations

from datetime import UTC, datetime


def as_utc(ts: datetime | None) -> datetime | None:
    """SQLite drops tzinfo on the way back; every timestamp the control plane handles is UTC."""
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)
