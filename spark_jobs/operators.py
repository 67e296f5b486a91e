"""The operator API: what a user writes to get a migratable stateful operator.

An operator has two halves, one on each side of the routing shuffle:

* `keyed(df)` (JVM side, before routing) turns the raw input rows (Kafka `key`, `value` as
  binary, plus `partition`/`offset`) into rows `(key: binary, value: binary, partition, offset)`.
  It may flatMap (word count explodes a sentence into words). It is a Spark expression, not a
  Python UDF, so the pre-shuffle stage stays in the JVM.
* `fold(key, state, values)` (Python side, per worker, per key, per epoch) gets the key's current
  state (bytes, or None when absent) and the key's records of this epoch in a deterministic order
  (Kafka partition, offset), and returns `(new_state | None, outputs)`. `None` deletes the key.
  Outputs are `(key, value)` byte pairs written to `<job>.output`.

State is bytes because it lives in an on-disk store and moves between workers as bytes; an
operator chooses its own encoding. A fold must be deterministic: a replayed epoch whose store did
not commit is re-folded and must produce the same outputs (their ids are (epoch, worker, seq)).

Operators that need typed state variables, timers, TTL or event time are stateful processors
(spark_jobs.processor, Spark's transformWithState API; docs/operators.md): they are stored in
the same per-key state bytes, plus a per-bin timer index (spark_jobs.timers).
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

Output = tuple[bytes, bytes]


class Operator(ABC):
    """A keyed stateful operator: key extractor + fold."""

    name: ClassVar[str]

    def keyed(self, df):
        """Default: the Kafka message key (the value when the key is null) is the key."""
        from pyspark.sql import functions as F

        return df.select(
            F.coalesce(F.col("key"), F.col("value")).alias("key"), F.col("value"),
            F.col("partition"), F.col("offset"),
        )

    def sources(self) -> tuple[int, ...] | None:
        """The positions in the job's input topics this operator reads (None: every topic)."""
        return None

    @abstractmethod
    def fold(self, key: bytes, state: bytes | None, values: Sequence[bytes]) -> tuple[bytes | None, list[Output]]:
        """Apply this epoch's records of one key; return the new state and the outputs."""


class KeyCount(Operator):
    """Megaphone's micro-benchmark: count per key; output (key, count) once per key per epoch."""

    name = "keycount"

    def fold(self, key: bytes, state: bytes | None, values: Sequence[bytes]) -> tuple[bytes | None, list[Output]]:
        count = (struct.unpack(">q", state)[0] if state else 0) + len(values)
        return struct.pack(">q", count), [(key, b"%d" % count)]


class WordCount(KeyCount):
    """DS2's word count: the value is a sentence, every lower-cased word is a key; count per word."""

    name = "wordcount"

    def keyed(self, df):
        from pyspark.sql import functions as F

        words = F.explode(F.split(F.lower(F.col("value").cast("string")), r"[^\p{L}\p{N}']+"))
        out = df.select(words.alias("word"), F.col("partition"), F.col("offset"))
        return out.where(F.length("word") > 0).select(
            F.col("word").cast("binary").alias("key"), F.lit(b"").cast("binary").alias("value"),
            F.col("partition"), F.col("offset"),
        )


def decode_count(state: bytes) -> int:
    return struct.unpack(">q", state)[0]


OPERATORS: dict[str, type[Operator]] = {KeyCount.name: KeyCount, WordCount.name: WordCount}
