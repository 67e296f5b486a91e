"""Engine and session for a metrics DB URL: the only place the rest of the code gets a DB from.

The schema imports nothing of Ballast's, so every function takes the URL from its caller (who has
it from `ballast.options`: BALLAST_DB_URL, else SQLite under the state dir; see
`ballast.store.schema.default_url`). SQLite is opened in WAL mode with a busy timeout because the
Spark driver, Airflow tasks and tests write to it concurrently.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

ALEMBIC_DIR = Path(__file__).resolve().parent / "alembic"
VERSION_TABLE = "ballast_alembic_version"  # Airflow's metadata DB has its own alembic_version


def is_unreachable(exc: BaseException) -> bool:
    """The DB is down or unreachable (worth waiting for), as opposed to a statement that is wrong."""
    from sqlalchemy.exc import DBAPIError, OperationalError

    return isinstance(exc, OperationalError) or (isinstance(exc, DBAPIError) and bool(exc.connection_invalidated))


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # the driver's own implicit BEGIN is turned off: `_sqlite_begin` opens every transaction instead
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _sqlite_begin(conn) -> None:
    """BEGIN IMMEDIATE: take the write lock when the transaction starts, waiting up to the busy timeout.

    A deferred transaction that reads and then writes cannot wait: if another connection committed
    after its read, SQLite fails the upgrade to a writer at once with "database is locked", whatever
    the busy timeout (a supervisor that read a heartbeat and then recorded a restart hit this).
    """
    conn.exec_driver_sql("BEGIN IMMEDIATE")


@lru_cache(maxsize=16)
def get_engine(url: str) -> Engine:
    """One pooled engine per URL and process."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    return engine


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A transaction: commits on success, rolls back on error."""
    maker = sessionmaker(get_engine(url), expire_on_commit=False)
    with maker() as session, session.begin():
        yield session


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(ALEMBIC_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(url: str, revision: str = "head") -> None:
    """Upgrade the metrics DB to `revision` (idempotent)."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)
