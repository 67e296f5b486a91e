"""ballast.store.schema: the metrics DB's default URL from the options, and `python -m ballast.store`
(what `make db` and the compose init run) migrating a real SQLite DB up and down."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from ballast.store.schema import default_url
from migrations_db.db import VERSION_TABLE
from migrations_db.models import Base

pytestmark = pytest.mark.store


def test_default_url_is_the_variable_else_sqlite_under_the_state_dir(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BALLAST_DB_URL", raising=False)
    monkeypatch.setenv("BALLAST_STATE_DIR", str(tmp_path / "state"))
    assert default_url() == f"sqlite:///{tmp_path / 'state' / 'metrics.db'}"
    assert (tmp_path / "state").is_dir()  # SQLite needs the directory
    monkeypatch.setenv("BALLAST_DB_URL", "postgresql+psycopg2://u@h/db")
    assert default_url() == "postgresql+psycopg2://u@h/db"


def _cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BALLAST_DB_URL": url}
    return subprocess.run([sys.executable, "-m", "ballast.store", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_command_migrates_the_db_at_the_variable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    up = _cli("upgrade", url=url)
    assert up.returncode == 0 and f"metrics DB upgraded to head: {url}" in up.stdout, up.stderr
    engine = create_engine(url)
    assert {t.name for t in Base.metadata.sorted_tables} | {VERSION_TABLE} <= set(inspect(engine).get_table_names())
    down = _cli("downgrade", url=url)
    assert down.returncode == 0, down.stderr
    assert set(inspect(engine).get_table_names()) == {VERSION_TABLE}
    engine.dispose()
    bad = _cli("sideways", url=url)
    assert bad.returncode != 0 and "unknown action 'sideways': use upgrade or downgrade" in bad.stderr
