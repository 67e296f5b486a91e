"""Q3, local item suggestion: persons in OR/ID/CA joined with their category-10 auctions.

Keyed by person id (a person's `id`, an auction's `seller`: computed before routing), so a person
and all their auctions meet in one key. The selection on both sides runs before routing. An
auction that arrives before its seller (the topics are read batch by batch) waits in a ListState;
the join has no expiry (Beam's model), so a local person's record is kept for good.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spark_jobs.nexmark import AUCTION, KIND, PERSON, fields
from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle, query

STATES = ("OR", "ID", "CA")
CATEGORY = 10


class LocalItems(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.person = handle.get_value_state("person")
        self.waiting = handle.get_list_state("waiting")

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: Any) -> Iterator[Any]:
        out = []
        for r in rows:
            if r.kind == PERSON:
                self.person.update((r.name, r.city, r.state))
                out += [self._row(a) for (a,) in self.waiting.get()]
                self.waiting.clear()
            elif self.person.exists():
                out.append(self._row(r.id))
            else:
                self.waiting.append_value((r.id,))
        return iter(out)

    def _row(self, auction: int) -> dict[str, Any]:
        name, city, state = self.person.get() or (None, None, None)
        return {"name": name, "city": city, "state": state, "id": auction}


_states = ", ".join(f"'{s}'" for s in STATES)
Q3 = query(LocalItems, input_schema=fields("id", "name", "city", "state", "seller", "category"), source_column=KIND,
           grouping_keys=("person_id",),
           where=f"({KIND} = {PERSON} AND state IN ({_states})) OR ({KIND} = {AUCTION} AND category = {CATEGORY})",
           columns=(("person_id", f"CASE WHEN {KIND} = {PERSON} THEN id ELSE seller END"),), sources=(PERSON, AUCTION))
