"""From an operator's name to the object the workers fold with.

Apart from spark_jobs.operators (the operator API) because a name may also give a stateful
processor, run through spark_jobs.processing, which itself builds on the operator API: the loader
sits above both, so neither imports the other back. The name's form and the import of a user's
class are ballast.operator_names (the jobs file checks a name with it too).
"""

from __future__ import annotations

from ballast.operator_names import import_operator_class
from spark_jobs.operators import OPERATORS, Operator
from spark_jobs.processing import ProcessorOperator
from spark_jobs.processor import is_processor
from spark_jobs.state_upgrade import chain_of
from spark_jobs.stateless import StatelessOperator, StatelessQuery


def get_operator(name: str) -> Operator:
    """A shipped operator by name, or a user's by import path `package.module:Class`: an
    `Operator` subclass, or a stateful processor (spark_jobs.processor: Ballast's or PySpark's
    `StatefulProcessor`), which runs through spark_jobs.processing, or a `StatelessQuery`
    (spark_jobs.stateless), which runs in Spark's JVM only.

    A user's module must reach the executors the way the job's own code does (spark-submit
    `--py-files`, or `spark.submit.pyFiles`)."""
    if ":" in name:
        cls = import_operator_class(name)
        if isinstance(cls, type) and issubclass(cls, Operator):
            try:
                return cls()
            except TypeError as exc:  # abstract (fold not implemented) or an __init__ that needs arguments
                raise ValueError(f"operator {name!r} cannot be instantiated without arguments: {exc}; implement "
                                 "every abstract method and keep __init__ argument-free") from None
        if isinstance(cls, type) and is_processor(cls):
            return ProcessorOperator(cls)
        if isinstance(cls, StatelessQuery):
            return StatelessOperator(cls)
        raise ValueError(f"operator {name!r} is not a subclass of spark_jobs.operators.Operator nor a "
                         "stateful processor (a class with init(handle) and handleInputRows / handle_input_rows, "
                         "e.g. a subclass of spark_jobs.processor.StatefulProcessor), nor a "
                         "spark_jobs.stateless.StatelessQuery")
    try:
        return OPERATORS[name]()
    except KeyError:
        raise ValueError(f"unknown operator {name!r}; known: {sorted(OPERATORS)}, or package.module:Class") from None


def live_operator(name: str, code: tuple[tuple[str, str], ...] = ()) -> Operator:
    """The operator a task runs: `get_operator(name)`, or after an upgrade step the processor version
    in force (the last of `code`, the job's (version, ref) pairs from the command line's on) with
    every version's class loaded, so a key's state can be carried over from whichever wrote it
    (spark_jobs.state_upgrade)."""
    if not code:
        return get_operator(name)
    classes = []
    for version, ref in code:
        cls = import_operator_class(ref)
        if not (isinstance(cls, type) and is_processor(cls)):
            raise ValueError(f"version {version} ({ref}) is not a stateful processor: only processors upgrade live")
        classes.append((version, cls))
    return ProcessorOperator(classes[-1][1], chain_of(classes))


def probe(name: str, code: tuple[tuple[str, str], ...]) -> str:
    """A task's answer to an upgrade's check (spark_jobs.live_code): "" when `code`'s versions load here,
    else why not. Never raises: a version that does not import must not fail the epoch that checks it."""
    try:
        live_operator(name, code)
    except Exception as exc:  # noqa: BLE001 - ImportError, a broken module's own error: all the same answer
        return f"{type(exc).__name__}: {exc}"[:500]
    return ""
