"""The store's tests run every case on SQLite and on PostgreSQL (the two dialects Ballast supports)."""

from tests.helpers.dialects import any_db as any_db  # noqa: F401 - the fixture, re-exported
