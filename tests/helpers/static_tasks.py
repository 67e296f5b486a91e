"""A task for spark_jobs.routing.map_in_arrow's made-once path, in a module the Python workers can
import (a test module is imported by pytest under a name they cannot)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

#: the local property the task reports back
PROPERTY = "ballast.test"


def told_task(batches: Iterator[Any]) -> Iterator[Any]:
    """Each row's key, with the value of `PROPERTY` as Spark handed it to this task."""
    import pyarrow as pa
    from pyspark import TaskContext

    from spark_jobs.output import kafka_arrow_schema

    ctx = TaskContext.get()
    told = (ctx.getLocalProperty(PROPERTY) if ctx is not None else None) or ""
    rows = [r for b in batches for r in b.to_pylist()]
    yield pa.RecordBatch.from_pylist([{"topic": "t", "key": r["key"], "headers": [], "value": told.encode()}
                                      for r in rows], kafka_arrow_schema())


told_task.static_task = True  # type: ignore[attr-defined]
