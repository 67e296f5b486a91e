"""Hot bins: the split advice, and that placement at the finer bins balances what it could not."""

from __future__ import annotations

import random

import pytest

from ballast.policy.placement import place, placement_stats
from ballast.policy.split import split_advice

pytestmark = pytest.mark.controlplane


def _keys(n: int = 20_000, hot_share: float = 0.2, seed: int = 3) -> list[tuple[int, float]]:
    """(64-bit hash, load) per key: one hot key with `hot_share` of the load, the rest uniform."""
    rng = random.Random(seed)
    rest = (1 - hot_share) / (n - 1)
    return [(rng.getrandbits(64), hot_share if i == 0 else rest) for i in range(n)]


def _bins(keys: list[tuple[int, float]], bits: int) -> tuple[list[float], list[int]]:
    load, count = [0.0] * (1 << bits), [0] * (1 << bits)
    for h, x in keys:
        load[h >> (64 - bits)] += x
        count[h >> (64 - bits)] += 1
    return load, count


def test_a_hot_key_that_placement_cannot_balance_gets_a_split_that_lets_it():
    keys, workers = _keys(), 5  # a worker's fair share is exactly the hot key's 20 %
    load, count = _bins(keys, 4)
    old = [b * workers // 16 for b in range(16)]
    before = placement_stats(old, place(old, workers, load), workers, load).max_over_mean
    assert before > 1.2, "16 bins: the hot key's bin holds a twelfth of the rest too"
    adv = split_advice(load, count, workers, tolerance=0.1)
    assert adv.bins is not None and adv.bins > 16 and adv.hot_bin == max(range(16), key=load.__getitem__)
    assert "split 16 ->" in adv.reason
    # the split moves nothing (each bin's parts stay on its worker); placement at the new k does better
    d = adv.bins.bit_length() - 1 - 4
    split_map = [old[b >> d] for b in range(adv.bins)]
    fine, fcount = _bins(keys, adv.bins.bit_length() - 1)
    after = placement_stats(split_map, place(split_map, workers, fine), workers, fine).max_over_mean
    assert after < before - 0.1 and after <= 1.1
    # at the finer bins the hot bin is (nearly) the hot key alone: no further split is advised
    again = split_advice(fine, fcount, workers, tolerance=0.1)
    assert again.bins is None


def test_no_split_when_placement_can_balance_or_when_one_key_is_the_bin():
    keys = _keys()
    load, count = _bins(keys, 4)
    assert split_advice(load, count, 2, tolerance=0.1).bins is None  # 2 workers: 50 % fair share
    assert split_advice(load, count, 1, tolerance=0.1).bins is None
    one = split_advice([5.0, 1.0, 1.0, 1.0], [1, 9, 9, 9], 4, tolerance=0.1)
    assert one.bins is None and "holds one key" in one.reason
    capped = split_advice(load, count, 5, tolerance=0.1, max_bins=16)
    assert capped.bins is None and "bin limit" in capped.reason
    assert split_advice(load, count, 5, tolerance=0.1, max_bins=32).bins == 32
    with pytest.raises(ValueError):
        split_advice([1.0, 2.0], [1], 2, tolerance=0.1)
