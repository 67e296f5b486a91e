"""spark_jobs.history: a manifest's `handed_over` round-trips, and `History.fresh_since` finds where
a handed-over bin's history restarts — the newest completion by the epoch asked for, through a
later split, never after it (the bins' reads themselves: tests/spark_jobs/test_handover_bins.py)."""

from __future__ import annotations

from spark_jobs.history import FreshSince, History, ManifestEntry


def _entry(epoch: int, version: int, handed_over: dict[int, tuple[int, int]] | None = None) -> ManifestEntry:
    return ManifestEntry(epoch, version, {0: "w0", 1: "w1"}, {}, None, handed_over or {})


def test_a_manifest_keeps_its_handed_over_bins() -> None:
    e = _entry(7, 1, {3: (4, 1)})
    assert ManifestEntry.from_dict(e.to_dict()) == e
    assert "handed_over" not in _entry(7, 1).to_dict(), "manifests without a handover are unchanged"
    assert ManifestEntry.from_dict({"epoch": 2, "map_version": 0, "changelog": {"0": "w0"}}).handed_over == {}


def test_the_newest_completed_handover_by_the_epoch_asked_for_wins() -> None:
    maps = {0: (0, 0, 1, 1), 1: (0, 1, 1, 1), 2: (1, 1, 1, 1)}  # 4 bins: k = 2
    h = History("mem://", (_entry(3, 0), _entry(5, 1, {1: (4, 1)}), _entry(9, 2, {0: (7, 1)}), _entry(12, 2)), maps)
    assert h.fresh_since(1, 2, 12) == FreshSince(4, 1, 5)
    assert h.fresh_since(1, 2, 4) is None, "not completed by epoch 4: the bin is still the old owner's"
    assert h.fresh_since(0, 2, 12) == FreshSince(7, 1, 9) and h.fresh_since(2, 2, 12) is None
    h2 = History("mem://", h.entries + (_entry(15, 2, {1: (13, 0)}),), maps)
    assert h2.fresh_since(1, 2, 20) == FreshSince(13, 0, 15), "a second handover of the bin restarts it again"


def test_the_halves_of_a_split_bin_inherit_its_handover() -> None:
    maps = {0: (0, 1), 1: (0, 0, 1, 1)}  # 2 bins, then split to 4
    h = History("mem://", (_entry(5, 0, {1: (3, 1)}), _entry(6, 1)), maps)
    assert h.fresh_since(2, 2, 6) == FreshSince(3, 1, 5) == h.fresh_since(3, 2, 6)
    assert h.fresh_since(1, 2, 6) is None


def test_a_fresh_bin_is_read_from_the_new_owner_from_since_through_the_completion() -> None:
    f = FreshSince(4, 1, 9)
    assert [e for e in range(12) if f.reads(e)] == [4, 5, 6, 7, 8, 9]
    assert FreshSince(4, 1).reads(100), "an open handover: the new owner's objects from since on"
