"""spark_jobs.bins: a bin is one contiguous store-key range for any k, Spark's routing computes the
same bin and worker as the Python layout, and a key of any length has a store key LMDB accepts."""

from __future__ import annotations

import random

import pytest

from spark_jobs import bins as B

pytestmark = pytest.mark.dataplane


def test_bin_is_a_contiguous_key_range_for_any_k():
    rng = random.Random(1)
    keys = [B.store_key(rng.getrandbits(64) - (1 << 63), b"k%d" % i) for i in range(2000)]
    for k in (1, 4, 8, 12):
        for sk in keys:
            b = B.bin_of_store_key(sk, k)
            lo, hi = B.bin_range(b, k)
            assert lo <= sk and (hi is None or sk < hi)
            # raising k by one splits bin b into 2b and 2b+1, which tile the old range
            assert B.bin_of_store_key(sk, k + 1) in (2 * b, 2 * b + 1)
    assert B.bin_of_hash(-1, 8) == 255 and B.bin_of_hash(0, 8) == 0
    with pytest.raises(ValueError):
        B.bits_for(100)


def test_spark_bin_matches_python_layout(spark):

    df = spark.createDataFrame([(b"a",), (b"user-1",), (b"\x00\xff",)], "key binary")
    h, b, _ = B.routing_sql("key", 6, [0] * 64)
    for row in df.selectExpr(f"{h} AS h", f"{b} AS b").collect():
        assert row.b == B.bin_of_hash(row.h, 6)


def test_spark_worker_follows_an_arbitrary_assignment_at_4096_bins(spark):
    import random

    rnd = random.Random(7)
    assignment = [rnd.randrange(5) for _ in range(4096)]
    df = spark.createDataFrame([(f"user-{i}".encode(),) for i in range(3000)], "key binary")
    h, b, w = B.routing_sql("key", 12, assignment)
    rows = df.selectExpr(f"{h} AS h", f"{b} AS b", f"{w} AS w").collect()
    assert len({r.b for r in rows}) > 1000
    assert all(r.w == assignment[B.bin_of_hash(r.h, 12)] for r in rows)


@pytest.mark.parametrize("bad", [[], [0, -1], ["0); drop table x; --"]])
def test_assignment_literal_refuses_what_is_not_a_worker_list(bad):
    with pytest.raises(ValueError):
        B.assignment_literal(bad)


@pytest.mark.parametrize("bins, k", [(1, 0), (2, 1), (256, 8), (4096, 12), (1 << 16, 16)])
def test_bits_for_a_power_of_two(bins, k):
    assert B.bits_for(bins) == k


@pytest.mark.parametrize("bins", [0, -4, 3, 12, 1 << 17])
def test_bits_for_refuses_what_is_not_a_power_of_two_in_range(bins):
    with pytest.raises(ValueError, match=f"got {bins}"):
        B.bits_for(bins)


@pytest.mark.parametrize("k", [0, 1, 3, 12])
def test_bin_ranges_tile_the_key_space_in_order(k):
    ranges = [B.bin_range(b, k) for b in range(1 << k)]
    assert ranges[0][0] == bytes(8) and ranges[-1][1] is None  # the last bin runs to the end of the space
    for (_, hi), (lo, _) in zip(ranges, ranges[1:]):
        assert hi == lo
    assert B.bin_of_hash(-1, k) == (1 << k) - 1 and B.bin_of_store_key(B.store_key(-1, b"k"), k) == (1 << k) - 1


def test_a_short_key_is_stored_under_its_hash_and_itself():
    sk = B.store_key(-2, b"user-1")
    assert sk == (B.MASK64 - 1).to_bytes(8, "big") + b"\x00" + b"user-1"
    assert not B.is_long_key(sk)
    assert B.encode_value(sk, b"user-1", b"state") == b"state"
    assert B.decode_value(sk, b"state", b"user-1") == b"state" and B.decode_entry(sk, b"state") == (b"user-1", b"state")


def test_a_long_key_is_stored_under_its_sha256_with_the_key_in_the_value():
    at_limit, over = b"a" * B.SHORT_KEY_MAX, b"a" * (B.SHORT_KEY_MAX + 1)
    assert not B.is_long_key(B.store_key(7, at_limit)) and len(B.store_key(7, at_limit)) == 9 + B.SHORT_KEY_MAX
    sk = B.store_key(7, over)
    assert B.is_long_key(sk) and len(sk) == 8 + 1 + 32 < 511  # LMDB's key limit
    assert sk[:8] == B.store_key(7, b"x")[:8], "same hash prefix: the same bin as a short key of that hash"
    stored = B.encode_value(sk, over, b"state")
    assert B.decode_value(sk, stored) == b"state" and B.decode_value(sk, stored, over) == b"state"
    assert B.decode_entry(sk, stored) == (over, b"state")
    with pytest.raises(ValueError, match="share a SHA-256 store key"):
        B.decode_value(sk, stored, b"b" * (B.SHORT_KEY_MAX + 1))


def test_no_short_key_equals_a_long_keys_store_key():
    long_key = b"z" * 1000
    sk = B.store_key(5, long_key)
    forged = sk[9:]  # a short key made of the long key's digest
    assert B.store_key(5, forged) != sk and B.store_key(5, forged)[8:9] == b"\x00"


@pytest.mark.parametrize("bins, workers", [(8, 1), (8, 2), (8, 3), (4, 8), (4096, 7)])
def test_uniform_assignment_gives_contiguous_balanced_ranges(bins, workers):
    a = B.uniform_assignment(bins, workers)
    assert len(a) == bins and a == sorted(a) and a[0] == 0 and max(a) < workers
    sizes = [a.count(w) for w in set(a)]
    assert max(sizes) - min(sizes) <= 1


def test_uniform_assignment_needs_a_worker():
    with pytest.raises(ValueError, match="workers must be >= 1"):
        B.uniform_assignment(8, 0)


def test_routing_sql_is_one_expression_per_column():
    h, b, w = B.routing_sql("key", 12, [0, 1, 1, 0])
    assert h == "xxhash64(key)"
    assert b == "CAST(shiftrightunsigned(xxhash64(key), 52) AS INT)"
    assert w == f"element_at(CAST(split('0,1,1,0', ',') AS ARRAY<INT>), {b} + 1)"
    assert B.routing_sql("k", 0, [3])[1:] == ("0", "element_at(CAST(split('3', ',') AS ARRAY<INT>), 0 + 1)")


def test_the_worker_lookup_is_folded_into_one_constant_before_the_job_runs(spark):
    """Nothing is split per row: Spark's optimizer folds the map's text into a literal array."""
    df = spark.createDataFrame([(b"a",), (b"b",)], "key binary")
    _, _, w = B.routing_sql("key", 2, [0, 2, 1, 2])
    plan = df.selectExpr(f"{w} AS w")._jdf.queryExecution().optimizedPlan().toString()
    assert "split(" not in plan and "[0,2,1,2]" in plan, plan
