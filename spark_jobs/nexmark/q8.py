"""Q8, monitor new users: persons who opened an auction in the tumbling window they registered in.

Keyed by person id (a person's `id`, an auction's `seller`), so a person and their auctions meet
in one key whatever order the topics deliver them in. The person's window and the auctions per
window are kept until the window's event-time timer: then the window's pairs are emitted once and
its state dropped, so a key holds nothing after its last window closed.

The windows are declared (`QuerySpec.window`, tumbling 10 s), so its bins can move by handover
(docs/handover.md): a pair is emitted only by the timer at the end of the window that holds both
rows, and the new owner's windows (start >= activation) hold rows from activation on only, which it
folds; the person registered in an earlier window is the old owner's, whose timer emits its pairs.
tests/system/test_nexmark_handover.py checks it against the reference with a handover mid-stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ballast.policy.handover import WindowSpec
from spark_jobs.nexmark import AUCTION, KIND, LATENESS_MS, PERSON, WINDOW_MS, fields
from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle, query


class NewUsers(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.person = handle.get_value_state("person")  # (window start, name)
        self.auctions = handle.get_list_state("auctions")  # (window start, auction id, reserve)

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: Any) -> Iterator[Any]:
        for r in rows:
            if r.kind == PERSON:
                self.person.update((r.window_start, r.name))
            else:
                self.auctions.append_value((r.window_start, r.id, r.reserve))
            self.handle.register_timer(r.window_start + WINDOW_MS)
        return iter(())

    def handle_expired_timer(self, key: tuple, timer_values: Any, expired_timer_info: Any) -> Iterator[Any]:
        start = expired_timer_info.get_expiry_time_in_ms() - WINDOW_MS
        person = self.person.get()
        kept = [a for a in self.auctions.get() if a[0] != start]
        closing = sorted(a for a in self.auctions.get() if a[0] == start)
        self.auctions.put(kept)
        if person is None or person[0] != start:
            return iter(())
        self.person.clear()
        return iter([{"window_start": start, "window_end": start + WINDOW_MS, "id": key[0], "name": person[1],
                      "reserve": reserve, "auction": a} for _, a, reserve in closing])


Q8 = query(NewUsers, input_schema=fields("id", "name", "date_time", "reserve", "seller"), source_column=KIND,
           grouping_keys=("person_id",), time_mode="EventTime",
           event_time_column="date_time", lateness_ms=LATENESS_MS, where=f"{KIND} IN ({PERSON}, {AUCTION})",
           columns=(("person_id", f"CASE WHEN {KIND} = {PERSON} THEN id ELSE seller END"),
                    ("window_start", f"date_time - date_time % {WINDOW_MS}")), sources=(PERSON, AUCTION),
           window=WindowSpec(WINDOW_MS))
