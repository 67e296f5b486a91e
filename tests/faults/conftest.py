"""Faults of the surroundings (marker `faults`): each test runs the real component on its own
instance (a broker, a PostgreSQL cluster, a tmpfs) on free ports or paths, so the other tests keep
the shared plaintext broker and their SQLite DBs. Shared helpers: fault_helpers.py; oracles:
tests/dataplane/dp_helpers.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dataplane"))
