"""The Ballast metrics DB: models, Alembic migrations and the one engine factory."""

from migrations_db.db import default_url, get_engine, migrate, session_scope

__all__ = ["default_url", "get_engine", "migrate", "session_scope"]
