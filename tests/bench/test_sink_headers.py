"""bench.sink_headers on a few records against the test broker, in the session's Spark: every variant
is timed and its ratio given, and what each variant wrote is what it claims to carry (the data
plane's id header from Ballast's writer, the topic an option or a column, and from Spark's sink, a
constant one, a binary one, none, or the id as the key or in the value)."""

from __future__ import annotations

import json

import pytest

from bench.sink_headers import VARIANTS, measure
from spark_jobs.output import record_id, scan_topic

pytestmark = [pytest.mark.bench, pytest.mark.services, pytest.mark.slow]


def test_every_variant_is_timed_and_writes_what_it_claims(spark, kafka_bootstrap):
    lines: list[str] = []
    res = measure(spark, kafka_bootstrap, 2000, 2, list(VARIANTS), lines.append)
    assert [json.loads(x)["round"] for x in lines] == [0, 1]
    assert set(res["median"]) == set(VARIANTS) and res["median"]["value"]["ratio"] == 1.0
    assert all(v["cpu_s"] > 0 and v["ratio"] > 0 and v["wall_s"] > 0 for v in res["median"].values())
    written = {n: list(scan_topic(kafka_bootstrap, t, 60.0)) for n, t in res["topics"].items()}
    assert {n: len(ms) for n, ms in written.items()} == dict.fromkeys(VARIANTS, 2000)
    first = {n: min(ms, key=lambda m: (m.partition, m.offset)) for n, ms in written.items()}
    assert record_id(first["value"]) is None and first["value"].key is None
    ids = {record_id(m) for m in written["ballast"]}
    assert len(ids) == 2000 and all(i is not None and i.startswith(b"7:") and i.count(b":") == 2 for i in ids)
    # Ballast's writer and Spark's sink with the SQL projection write the same ids and values
    same = [{(record_id(m), m.value) for m in written[n]}
            for n in ("ballast", "ballast_topic", "ballast_unbatched", "spark_sink")]
    assert same[0] == same[1] == same[2] == same[3]
    assert {m.value for m in written["value_batched"]} == {m.value for m in written["value"]}
    assert record_id(first["const"]) == b"7:0:0"
    assert len({record_id(m) for m in written["binary"]}) == 2000 and len(record_id(first["binary"]) or b"") == 20
    assert record_id(first["in_key"]) is None and first["in_key"].key.startswith(b"7:")
    assert first["in_value"].value.startswith(b"7:") and first["in_value"].value.endswith(b"}")
