"""Hypothesis strategies of control messages: valid, near-valid and hostile (shared by the pure
fuzz test and the live one)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from ballast.protocol import MAX_INT, MAX_MESSAGE_BYTES, SCHEMA

NOW = datetime(2030, 1, 1, tzinfo=UTC)
FIELDS = ("schema", "job", "operator", "plan_id", "step", "steps", "kind", "moves", "workers", "map_version",
          "issued_at", "effective_at", "reason", "precopy")


def iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def valid_docs(job: str, operator: str, bins: int, now: datetime = NOW) -> st.SearchStrategy[dict[str, Any]]:
    """Shape-valid steps for this job; most fail the job's state checks (that is fine: a reason)."""
    move = st.tuples(st.integers(0, bins - 1), st.integers(0, 3), st.integers(0, 3)).filter(lambda m: m[1] != m[2])

    @st.composite
    def build(draw: Any) -> dict[str, Any]:
        steps = draw(st.integers(1, 4))
        moves = draw(st.lists(move, max_size=6, unique_by=lambda m: m[0]))
        return {
            "schema": SCHEMA, "job": job, "operator": operator,
            "plan_id": draw(st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20)),
            "step": draw(st.integers(1, steps)), "steps": steps,
            "kind": "moves" if moves else draw(st.sampled_from(["noop", "map", "moves"])),
            "moves": [{"bin": b, "from": s, "to": d} for b, s, d in moves],
            "workers": draw(st.integers(1, 4)), "map_version": draw(st.integers(0, 3)),
            "issued_at": iso(now),
            "effective_at": iso(now + timedelta(seconds=draw(st.sampled_from([0, 0, 5, 10**6])))),
            "reason": draw(st.text(max_size=30)), **({"precopy": True} if draw(st.booleans()) else {}),
        }

    return build()


JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                      st.text(max_size=40))
JSON_ANY = st.recursive(JSON_LEAF,
                        lambda c: st.one_of(st.lists(c, max_size=4),
                                            st.dictionaries(st.text(max_size=8), c, max_size=4)),
                        max_leaves=20)
WEIRD_VALUE = st.one_of(
    JSON_ANY,
    st.sampled_from([-1, 0, MAX_INT, MAX_INT + 1, 2**63, -(2**63), 10**30, math.nan, math.inf, -math.inf, 1.5, True,
                     "", "\x00", "\ud800", "é" * 300, "1", "2030-01-01", "9999-12-31T23:59:59-05:00",
                     "0001-01-01T00:00:00+05:00", [], {}, [[[[]]]]]),
)


def near_valid(base: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """A valid document with one to three fields dropped, retyped or set to edge values."""

    @st.composite
    def mutate(draw: Any) -> dict[str, Any]:
        doc = dict(draw(base))
        for _ in range(draw(st.integers(1, 3))):
            f = draw(st.sampled_from(FIELDS + ("sig", "extra")))
            op = draw(st.sampled_from(["drop", "set", "set"]))
            if op == "drop":
                doc.pop(f, None)
            else:
                doc[f] = draw(WEIRD_VALUE)
        if draw(st.booleans()) and doc.get("moves") and isinstance(doc["moves"], list):
            doc["moves"] = [dict(m, **{draw(st.sampled_from(["bin", "from", "to"])): draw(WEIRD_VALUE)})
                            if isinstance(m, dict) else m for m in doc["moves"]]
        return doc

    return mutate()


def _huge(kind: str, n: int) -> bytes:
    if kind == "deep-list":
        return b"[" * n + b"]" * n
    if kind == "deep-object":
        return b'{"a":' * n + b"0" + b"}" * n
    if kind == "huge-array":
        return json.dumps({"schema": SCHEMA, "moves": [{"bin": i, "from": 0, "to": 1} for i in range(n)]}).encode()
    if kind == "huge-value":
        return b'{"schema": "' + SCHEMA.encode() + b'", "reason": "' + b"v" * n + b'"}'
    if kind == "huge-number":
        return b'{"step": ' + b"7" * min(n, 20000) + b"}"
    return b"\xff" * n


def hostile_bytes() -> st.SearchStrategy[bytes]:
    sized = st.tuples(st.sampled_from(["deep-list", "deep-object", "huge-array", "huge-value", "huge-number",
                                       "binary"]),
                      st.sampled_from([10, 1000, 5000, 100_000, 60_000, MAX_MESSAGE_BYTES // 20 + 1]))
    ten_mb = st.just(b'{"schema": "ballast.control/v1", "plan_id": "' + b"x" * 10_000_000 + b'"}')
    return st.one_of(
        sized.map(lambda t: _huge(*t)),
        st.binary(max_size=300),
        st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
        JSON_ANY.map(lambda v: json.dumps(v).encode()),
        ten_mb,
    )


def encode(doc: dict[str, Any]) -> bytes:
    """JSON bytes of a (possibly hostile) document: NaN stays NaN, lone surrogates stay escaped."""
    return json.dumps(doc, allow_nan=True).encode()
