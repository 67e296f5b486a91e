"""ballast.operator_names: the jobs file checks an operator's name on the control side, without the
data plane; the shipped names are the data plane's. Fast: no services."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ballast.operator_names import SHIPPED_OPERATORS, check_operator_name, import_operator_class
from spark_jobs.operators import OPERATORS, KeyCount

pytestmark = pytest.mark.controlplane


def test_shipped_names_are_the_data_planes_operators() -> None:
    assert set(SHIPPED_OPERATORS) == set(OPERATORS)


def test_a_name_is_shipped_or_an_import_path_that_imports() -> None:
    for name in SHIPPED_OPERATORS:
        check_operator_name(name)
    check_operator_name("spark_jobs.operators:KeyCount")
    assert import_operator_class("spark_jobs.operators:KeyCount") is KeyCount
    with pytest.raises(ValueError, match=r"unknown operator 'keycont'; known: \['keycount', 'wordcount'\]"):
        check_operator_name("keycont")
    with pytest.raises(ValueError, match=r"'no_such_module:Op' does not import.*--py-files"):
        check_operator_name("no_such_module:Op")
    with pytest.raises(ValueError, match="does not import"):
        check_operator_name("spark_jobs.operators:Nope")
    with pytest.raises(ValueError, match="write an import path as package.module:Class"):
        check_operator_name("spark_jobs.operators:")


def test_loading_the_jobs_file_imports_neither_the_data_plane_nor_spark() -> None:
    """The config validator used to import spark_jobs.operators (and, through it, Spark's API)."""
    code = ("import sys, json; from ballast.config import OperatorEntry; "
            "OperatorEntry(name='a', operator='keycount'); OperatorEntry(name='b', operator='json:JSONDecoder'); "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    roots = set(json.loads(out.stdout))
    assert "ballast" in roots and not roots & {"spark_jobs", "pyspark", "airflow", "migrations_db", "sqlalchemy"}
