"""A first operator for chain tests: per user, number each record and re-key it by its category.

`fold` emits one output per input record, `(category, user:n)`, so what the second operator
(keycount over the category) must end with does not depend on where epochs were cut: the number
of input records of each category.
"""

from __future__ import annotations

from collections.abc import Sequence

from spark_jobs.operators import Operator


class Tag(Operator):
    name = "tag"

    def fold(self, key: bytes, state: bytes | None, values: Sequence[bytes]) -> tuple[bytes | None, list]:
        n = int(state or b"0")
        outs = []
        for v in values:
            n += 1
            outs.append((v, key + b":%d" % n))
        return b"%d" % n, outs
