"""NEXMark query tests reuse the data-plane tests' kill-and-restart loop and plan builders."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dataplane"))
