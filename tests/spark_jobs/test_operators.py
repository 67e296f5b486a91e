"""spark_jobs.operators: the shipped operators' folds count per key in big-endian 8-byte state and
output the new count once per key and epoch; an Operator must define its fold; the registry
names every shipped operator. (WordCount's JVM-side keying runs in tests/system/test_wordcount.py.)"""

from __future__ import annotations

import struct

import pytest

from spark_jobs.operators import OPERATORS, KeyCount, Operator, WordCount, decode_count

pytestmark = pytest.mark.dataplane


@pytest.mark.parametrize("op", [KeyCount(), WordCount()])
def test_a_count_starts_at_the_epochs_records_and_adds_up(op):
    state, outs = op.fold(b"k", None, [b"x", b"y", b""])
    assert state == struct.pack(">q", 3) and outs == [(b"k", b"3")]
    state, outs = op.fold(b"k", state, [b"z"])
    assert decode_count(state) == 4 and outs == [(b"k", b"4")]
    assert op.fold(b"k", state, [])[0] == state, "an empty epoch keeps the count"


def test_counts_past_32_bits_round_trip():
    state = struct.pack(">q", (1 << 40) - 1)
    new, outs = KeyCount().fold(b"k", state, [b"1"])
    assert decode_count(new) == 1 << 40 and outs == [(b"k", str(1 << 40).encode())]


def test_the_registry_names_every_shipped_operator():
    assert OPERATORS == {"keycount": KeyCount, "wordcount": WordCount}
    assert all(cls.name == name for name, cls in OPERATORS.items())
    assert KeyCount().sources() is None, "a fold operator reads every input topic"


def test_an_operator_without_a_fold_cannot_be_made():
    class NoFold(Operator):
        name = "nofold"

    with pytest.raises(TypeError, match="fold"):
        NoFold()  # type: ignore[abstract]
