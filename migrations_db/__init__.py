"""The Ballast metrics DB: models, Alembic migrations and the one engine factory (given a URL)."""

from migrations_db.db import get_engine, migrate, session_scope

__all__ = ["get_engine", "migrate", "session_scope"]
