"""Only ballast.store (and migrations_db, the schema) queries the metrics DB.

Scans the shipped and runnable code (plugins/, spark_jobs/, dags/, scripts/, bench/) for what a
query needs: SQLAlchemy's statement builders, a session or engine of the metrics DB, a raw DB
driver, or SQL in a string. A new query outside the store fails here; add a store method instead.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.store

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("plugins", "spark_jobs", "dags", "scripts", "bench")
OWNERS = ("plugins/ballast/store/", "migrations_db/")
BUILDERS = {"select", "insert", "update", "delete", "text", "func", "or_", "and_", "exists", "create_engine",
            "Table", "MetaData"}
SESSIONS = {"session_scope", "get_engine"}  # migrations_db.db's handles on the metrics DB
DRIVERS = {"sqlite3", "psycopg", "psycopg2"}
# SQL is written in capitals; prose ("before the delete from the old one") is not
SQL = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|DELETE\s+FROM|UPDATE\s+\w+\s+SET)\b", re.S)
# path -> the names it may use, and why
ALLOWED: dict[str, tuple[set[str], str]] = {
    "plugins/ballast/dag_run_links.py": ({"sqlalchemy.select", "sqlalchemy.or_"},
                                  "Airflow's own metadata DB (DagRun), not the metrics DB"),
    "bench/cluster/metrics.py": ({"sqlite3", "SQL string"},
                                 "reads the DB an OLD_COMMIT job wrote, whose older schema the models do not map "
                                 "(legacy=True); this checkout's jobs go through JobStore"),
}


def violations(path: str, source: str) -> list[str]:
    """What in `source` queries a DB: "<line>: <module>.<name>" or "<line>: SQL string"."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            for alias in node.names:
                if (root == "sqlalchemy" and alias.name in BUILDERS) or \
                        (node.module == "migrations_db.db" and alias.name in SESSIONS) or root in DRIVERS:
                    found.append(f"{node.lineno}: {root}.{alias.name}")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: {a.name}" for a in node.names
                      if a.name.split(".")[0] in DRIVERS or a.name == "migrations_db.db"]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value):
            found.append(f"{node.lineno}: SQL string")
    allowed = ALLOWED.get(path, (set(), ""))[0]
    return [v for v in found if v.split(": ", 1)[1] not in allowed]


def _files() -> list[Path]:
    return sorted(p for d in SCANNED for p in (REPO / d).rglob("*.py")
                  if not str(p.relative_to(REPO)).startswith(OWNERS) and "results" not in p.parts)


def test_no_metrics_db_query_outside_the_store() -> None:
    bad = {}
    for p in _files():
        rel = str(p.relative_to(REPO))
        found = violations(rel, p.read_text())
        if found:
            bad[rel] = found
    assert not bad, f"queries of the metrics DB outside ballast.store (add a store method): {bad}"


def test_the_scan_sees_each_kind_of_query() -> None:
    """The scanner itself: each way of querying is caught, a store call and an error check are not."""
    assert violations("x.py", "from sqlalchemy import select, Integer") == ["1: sqlalchemy.select"]
    assert violations("x.py", "from migrations_db.db import session_scope, is_unreachable") == \
        ["1: migrations_db.session_scope"]
    assert violations("x.py", "import sqlite3") == ["1: sqlite3"]
    assert violations("x.py", "q = 'SELECT epoch FROM epoch_metrics WHERE job = ?'") == ["1: SQL string"]
    assert violations("x.py", "from ballast.store import JobStore\nJobStore('u', 'j', 'o').epoch_metrics()") == []
    assert violations("x.py", "doc = 'a move, before the delete from the old one'") == []
    assert violations("plugins/ballast/dag_run_links.py", "from sqlalchemy import or_, select") == []
    assert _files(), "nothing scanned: the paths above moved"
