"""Engine and session from `BALLAST_DB_URL`: the only place the rest of the code gets a DB from.

Default: a SQLite file under the repo's ignored `.state/` directory. SQLite is opened in WAL mode
with a busy timeout because the Spark driver, Airflow tasks and tests write to it concurrently.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from ballast.options import settings

ALEMBIC_DIR = Path(__file__).resolve().parent / "alembic"
VERSION_TABLE = "ballast_alembic_version"  # Airflow's metadata DB has its own alembic_version


def default_url() -> str:
    """BALLAST_DB_URL, else SQLite under BALLAST_STATE_DIR (created: SQLite needs the directory)."""
    s = settings()
    if not s.db_url:
        s.state_dir.mkdir(parents=True, exist_ok=True)
    return s.metrics_db_url()


def is_unreachable(exc: BaseException) -> bool:
    """The DB is down or unreachable (worth waiting for), as opposed to a statement that is wrong."""
    from sqlalchemy.exc import DBAPIError, OperationalError

    return isinstance(exc, OperationalError) or (isinstance(exc, DBAPIError) and bool(exc.connection_invalidated))


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


@lru_cache(maxsize=16)
def get_engine(url: str | None = None) -> Engine:
    """One pooled engine per URL and process."""
    url = url or default_url()
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    return engine


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A transaction: commits on success, rolls back on error."""
    maker = sessionmaker(get_engine(url), expire_on_commit=False)
    with maker() as session, session.begin():
        yield session


def alembic_config(url: str | None = None):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(ALEMBIC_DIR))
    cfg.set_main_option("sqlalchemy.url", (url or default_url()).replace("%", "%%"))
    return cfg


def migrate(url: str | None = None, revision: str = "head") -> None:
    """Upgrade the metrics DB to `revision` (idempotent)."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def downgrade(url: str | None = None, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


def main() -> None:
    """`python -m migrations_db [upgrade|downgrade] [revision]` for the on-call and the Makefile."""
    import sys

    action = sys.argv[1] if len(sys.argv) > 1 else "upgrade"
    rev = sys.argv[2] if len(sys.argv) > 2 else ("head" if action == "upgrade" else "base")
    if action == "upgrade":
        migrate(revision=rev)
    elif action == "downgrade":
        downgrade(revision=rev)
    else:
        raise SystemExit(f"unknown action {action!r}: use upgrade or downgrade")
    print(f"metrics DB {action}d to {rev}: {default_url()}")


if __name__ == "__main__":
    main()
