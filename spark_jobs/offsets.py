"""Which Kafka offsets an epoch covered, read from Spark's own offset log (no Spark job needed).

Spark writes `<spark-checkpoint>/offsets/<epoch>` (the end offsets of every topic-partition of the
batch) before running the batch; the start offsets are the previous epoch's end offsets. The
runner uses this to count input/control rows without a Spark job; tests use it to rebuild
exactly which records each epoch saw.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

Ranges = dict[str, dict[int, tuple[int, int]]]


def read_end_offsets(spark_checkpoint: str | Path, epoch: int) -> dict[str, dict[str, int]] | None:
    return read_offset_file(Path(spark_checkpoint) / "offsets" / str(epoch))


def read_offset_file(p: Path) -> dict[str, dict[str, int]] | None:
    """{topic: {partition: end offset}} from one file of Spark's offset log (or a copy of one)."""
    try:
        lines = p.read_text().splitlines()
    except OSError:
        return None
    for line in lines[1:]:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc and all(
            isinstance(v, dict) and all(isinstance(o, int) for o in v.values()) for v in doc.values()
        ):
            return doc
    return None


def epoch_ranges(spark_checkpoint: str | Path, epoch: int,
                 earliest: Callable[[str, int], int] = lambda t, p: 0) -> Ranges | None:
    """{topic: {partition: (start, end)}} of `epoch`; None when the log cannot tell."""
    end = read_end_offsets(spark_checkpoint, epoch)
    if end is None:
        return None
    start = read_end_offsets(spark_checkpoint, epoch - 1) if epoch > 0 else {}
    if start is None:
        return None
    out: Ranges = {}
    for topic, parts in end.items():
        for p, e in parts.items():
            s = start.get(topic, {}).get(p)
            out.setdefault(topic, {})[int(p)] = (int(s) if s is not None else earliest(topic, int(p)), int(e))
    return out


def committed_epochs(spark_checkpoint: str | Path) -> list[int]:
    d = Path(spark_checkpoint) / "commits"
    if not d.exists():
        return []
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())
