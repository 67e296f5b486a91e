"""The policy must stay importable without the frameworks it is kept apart from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.controlplane

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def test_importing_ballast_policy_pulls_in_no_framework() -> None:
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); import ballast.policy as p; "
        "print(json.dumps([sorted(sys.modules), p.__all__]))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(PLUGINS)], capture_output=True, text=True, check=True)
    modules, exported = json.loads(out.stdout)
    roots = {m.split(".")[0] for m in modules}
    assert not roots & {"airflow", "pyspark", "kafka", "sqlalchemy"}
    assert "ballast.policy.ds2" in modules and "plan_migration" in exported and "evaluate_guards" in exported
