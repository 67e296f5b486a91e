"""Security tests (marker `security`): hostile control input, signed messages, Kafka SASL/ACLs.

The pure ones (parser, decide, signing, fuzzing) run in milliseconds to seconds; the live ones
reuse the data-plane helpers (tests/dataplane/dp_helpers.py) and fixtures.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dataplane"))
