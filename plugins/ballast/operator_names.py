"""How a job names its operator: a shipped name, or an import path `package.module:Class`.

Both sides check a name: the jobs file when it loads (`ballast.config`, on the control side, where
Spark and the data plane are not imported) and the data plane before Spark starts
(`spark_jobs.operators.get_operator`, which also checks what kind of class it got). The names and
the import live here, in the framework-free core, so the control side never imports the data plane.
"""

from __future__ import annotations

import importlib

__all__ = ["SHIPPED_OPERATORS", "check_operator_name", "import_operator_class"]

# the operators spark_jobs.operators ships (tests/ballast/test_operator_names.py keeps the two equal)
SHIPPED_OPERATORS: tuple[str, ...] = ("keycount", "wordcount")


def import_operator_class(name: str) -> object:
    """What the import path `package.module:Class` names (a user's operator or processor).

    A user's module must reach the executors the way the job's own code does (spark-submit
    `--py-files`, or `spark.submit.pyFiles`), so a path that does not import here will not there."""
    mod_name, _, cls_name = name.partition(":")
    if not mod_name or not cls_name:
        raise ValueError(f"operator {name!r}: write an import path as package.module:Class")
    try:
        return getattr(importlib.import_module(mod_name), cls_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"operator {name!r} does not import: {exc}. Ship its module with --py-files "
                         "(it must be importable on the driver and on every executor)") from None


def check_operator_name(name: str) -> None:
    """A shipped name, or an import path that imports; ValueError says what is wrong and what to do."""
    if ":" in name:
        import_operator_class(name)
    elif name not in SHIPPED_OPERATORS:
        raise ValueError(f"unknown operator {name!r}; known: {sorted(SHIPPED_OPERATORS)}, or package.module:Class")
