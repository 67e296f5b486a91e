"""Which Kafka offsets an epoch covered, read from Spark's own offset log (no Spark job needed).

Spark writes `<spark-checkpoint>/offsets/<epoch>` (the end offsets of every topic-partition of the
batch) before running the batch; the start offsets are the previous epoch's end offsets (epoch 0's:
the offsets the query started from, `<spark-checkpoint>/sources/0/0`; a partition first seen later
starts at its earliest offset). The runner uses this to count input rows and to read the control
records without a Spark job; tests use it to rebuild exactly which records each epoch saw. A start
clears what a driver killed during its first offset write left, which Spark would refuse.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

from spark_jobs.storage import Location

log = logging.getLogger("ballast.runner")
Ranges = dict[str, dict[int, tuple[int, int]]]

# what Spark's atomic write of log file N leaves when its process dies before the rename: the
# temporary `.N.<uuid>.tmp` and, on a checksummed local filesystem, its `..N.<uuid>.tmp.crc` (or an
# orphaned `.N.crc`)
_SPARK_TEMP = re.compile(r"^\.\.?\d+\.(?:[0-9a-fA-F-]{36}\.tmp(?:\.crc)?|crc)$")


def _loc(spark_checkpoint: str | Path | Location) -> Location:
    return spark_checkpoint if isinstance(spark_checkpoint, Location) else Location.of(str(spark_checkpoint))


def read_end_offsets(spark_checkpoint: str | Path | Location, epoch: int) -> dict[str, dict[str, int]] | None:
    return read_offset_file(_loc(spark_checkpoint) / "offsets" / str(epoch))


def read_offset_file(p: Path | Location) -> dict[str, dict[str, int]] | None:
    """{topic: {partition: end offset}} from one file of Spark's offset log (or a copy of one)."""
    try:
        text = p.read_text() if isinstance(p, Location) else p.read_text()
    except OSError:
        return None
    if text is None:
        return None
    lines = text.splitlines()
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


def epoch_ranges(spark_checkpoint: str | Path | Location, epoch: int,
                 earliest: Callable[[str, int], int] = lambda t, p: 0) -> Ranges | None:
    """{topic: {partition: (start, end)}} of `epoch`; None when the log cannot tell."""
    end = read_end_offsets(spark_checkpoint, epoch)
    if end is None:
        return None
    if epoch > 0:
        start = read_end_offsets(spark_checkpoint, epoch - 1)
        if start is None:
            return None
    else:  # the offsets the query started from (`startingOffsets`), which Kafka's source logs apart
        start = read_offset_file(_loc(spark_checkpoint) / "sources" / "0" / "0") or {}
    out: Ranges = {}
    for topic, parts in end.items():
        for p, e in parts.items():
            s = start.get(topic, {}).get(p)
            out.setdefault(topic, {})[int(p)] = (int(s) if s is not None else earliest(topic, int(p)), int(e))
    return out


def committed_epochs(spark_checkpoint: str | Path | Location) -> list[int]:
    return sorted(int(n) for n in (_loc(spark_checkpoint) / "commits").list() if n.isdigit())


def clear_interrupted_start(spark_checkpoint: str | Path | Location) -> list[str]:
    """Remove what a driver killed while writing its query's very first offset file left behind;
    returns the removed paths (relative to the checkpoint).

    Why: a query with no batch in its offset log is new to Spark, and Spark refuses to start a new
    query on a checkpoint whose `offsets/` or `commits/` is not empty
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY), counting the hidden temporaries its own interrupted
    write left there: a job SIGKILLed at that moment could never start again. Only Spark's own
    temporaries go, and only while no batch is logged; anything else stays for Spark to refuse.
    Call it with no other driver of the checkpoint running (after the fence is taken).
    """
    root = _loc(spark_checkpoint)
    if any(n.isdigit() for n in (root / "offsets").list()):
        return []
    removed = []
    for sub in ("offsets", "commits"):
        for name in (root / sub).list():
            if _SPARK_TEMP.match(name):
                (root / sub / name).delete()
                removed.append(f"{sub}/{name}")
                log.warning("removed %s/%s from Spark's checkpoint %s: left by a driver that died writing its "
                            "first offset file (Spark refuses to start a new query on it)", sub, name, root)
    return removed
