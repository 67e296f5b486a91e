"""NEXMark's winning-bid stage (spark_jobs/nexmark/winning.py) on the processor handle, without
Spark: the winner is emitted once at the auction's end, and no key keeps state after it (bids that
come before their auction, after it closed, or for an auction that never comes)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from spark_jobs.nexmark import AUCTION, BID
from spark_jobs.nexmark.winning import WinningBidProcessor
from spark_jobs.processor import ExpiredTimerInfo, KeyState, StatefulProcessorHandle, TimerValues


def _bid(price: int, at: int, bidder: int = 1) -> Any:
    return SimpleNamespace(kind=BID, price=price, date_time=at, bidder=bidder)


def _auction(at: int, expires: int, reserve: int = 10) -> Any:
    return SimpleNamespace(kind=AUCTION, date_time=at, expires=expires, reserve=reserve, seller=3, category=4)


class _Key:
    """One auction's key: its state, its processor, and its timers fired as the epoch loop does."""

    def __init__(self) -> None:
        self.handle = StatefulProcessorHandle("EventTime", TimerValues(0, 0))
        self.state = KeyState()
        self.handle._current = self.state
        self.proc = WinningBidProcessor()
        self.proc.init(self.handle)

    def rows(self, *rows: Any) -> list[Any]:
        return list(self.proc.handle_input_rows((7,), iter(rows), self.handle.timer_values))

    def fire(self, watermark: int) -> list[Any]:
        out: list[Any] = []
        for ts in sorted(t for t in self.state.timers if t <= watermark):
            self.state.timers.discard(ts)
            out += self.proc.handle_expired_timer((7,), TimerValues(0, watermark), ExpiredTimerInfo(ts))
        return out


def test_early_bids_count_and_the_winner_is_emitted_once_at_expiry() -> None:
    k = _Key()
    assert k.rows(_bid(50, 1000)) == [] and k.state.timers == {1001}
    k.rows(_auction(900, 5000), _bid(40, 1100, bidder=2))
    assert k.state.timers == {5000}  # the early bid's clean-up timer went with its wait
    assert k.fire(4999) == []
    assert k.fire(5000) == [{"auction": 7, "seller": 3, "category": 4, "expires": 5000, "price": 50,
                             "bidder": 1, "date_time": 1000}]
    assert k.state.empty() and k.fire(10_000) == []


def test_no_state_outlives_its_auction() -> None:
    k = _Key()
    k.rows(_auction(900, 5000))
    k.fire(5000)
    assert k.state.empty()
    k.rows(_bid(99, 5200))  # after the close: waits like an early bid, until the watermark passes it
    assert not k.state.empty()
    assert k.fire(5201) == [] and k.state.empty()

    never = _Key()
    never.rows(_bid(99, 300), _bid(98, 310))  # an auction that never comes
    assert never.fire(305) == [] and not never.state.empty()
    assert never.fire(311) == [] and never.state.empty()
