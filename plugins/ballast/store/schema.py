"""The metrics DB's URL from the options, and its schema upgrade for the on-call and the Makefile.

Here rather than in migrations_db: the schema package imports nothing of Ballast's, so the default
URL (BALLAST_DB_URL, else SQLite under BALLAST_STATE_DIR; `ballast.options`) is resolved by its
callers, and this is the caller every other one uses.

`python -m ballast.store upgrade|downgrade [revision]` (`make db`).
"""

from __future__ import annotations

import sys

from ballast.options import settings
from migrations_db.db import downgrade, migrate


def default_url() -> str:
    """BALLAST_DB_URL, else SQLite under BALLAST_STATE_DIR (created: SQLite needs the directory)."""
    s = settings()
    if not s.db_url:
        s.state_dir.mkdir(parents=True, exist_ok=True)
    return s.metrics_db_url()


def main(argv: list[str] | None = None) -> None:
    """`python -m ballast.store [upgrade|downgrade] [revision]` on the metrics DB at `default_url()`."""
    args = sys.argv[1:] if argv is None else argv
    action = args[0] if args else "upgrade"
    rev = args[1] if len(args) > 1 else ("head" if action == "upgrade" else "base")
    url = default_url()
    if action == "upgrade":
        migrate(url, revision=rev)
    elif action == "downgrade":
        downgrade(url, revision=rev)
    else:
        raise SystemExit(f"unknown action {action!r}: use upgrade or downgrade")
    print(f"metrics DB {action}d to {rev}: {url}")
