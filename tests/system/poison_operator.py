"""A user operator for the cluster test, shipped to the executors with --py-files: key count whose
fold raises on a record with the value b"poison" (the dead-letter path)."""

from __future__ import annotations

from collections.abc import Sequence

from spark_jobs.operators import KeyCount, Output


class PoisonCount(KeyCount):
    name = "poisoncount"

    def fold(self, key: bytes, state: bytes | None, values: Sequence[bytes]) -> tuple[bytes | None, list[Output]]:
        if b"poison" in values:
            raise ValueError("this record is poison")
        return super().fold(key, state, values)
