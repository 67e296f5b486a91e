"""A shadow upgrade inside a task: the new version handles the same calls as the version in force, on
a copy of each key's state, and only its outputs are kept, to be compared (Gloss's concurrent
execution of the old and the new program before the cut-over).

For every handler call of the epoch (a key's rows, an expired timer) the task first runs the
version in force as always; then `Shadow.observe` carries a copy of the key's state as the call
found it over to the new version (spark_jobs.state_upgrade), runs the new version's handler on it
and compares its output rows with the old version's, as multisets, on the declared fields. The
copy is dropped after the call: nothing of the shadow is written, sent or kept, so the epoch's
state, outputs and exactly-once are the version in force's alone, and a replay compares again.
Each call is judged against the state the old version left, so a shadow finds a wrong handler, an
upgrade function that raises and outputs that differ; a new version whose own state drifts over
many epochs shows only once it runs (docs/operators.md, "Shadow, then cut over").

The tally (calls, differ, errors, the first difference) goes into the worker's metrics; the
driver adds the tasks' tallies up (spark_jobs.live_code) and the decision cuts over or rejects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spark_jobs.key_state import KeyState
from spark_jobs.processor import StatefulProcessorHandle, TimerValues, bound_methods
from spark_jobs.records import encode_output, output_rows

EXAMPLE_CHARS = 300


class Shadow:
    """The new version's processor in one task, and what it compared."""

    def __init__(self, op: Any, time_mode: str, tv: TimerValues, fields: tuple[str, ...]) -> None:
        self.chain = op.chain  # the job's versions with the new one last (spark_jobs.operator_loader)
        self.tv = tv
        self.handle = StatefulProcessorHandle(time_mode, tv)
        self.proc = op.cls()
        self.proc.init(self.handle)
        self.on_rows, self.on_timer = bound_methods(self.proc)
        self.fields = fields
        self.calls = self.differ = self.errors = 0
        self.example = ""

    def observe(self, key: bytes, raw: bytes | None, run: Callable[[Any], Any], real: list[dict[str, Any]] | None,
                real_error: str = "") -> None:
        """Run `run(self)` (the handler call the task just made with the old version) on a copy of the
        key's state as it was before that call (`raw`), and compare with `real` (the old version's rows;
        None when its handler raised, `real_error`)."""
        self.calls += 1  # every call counts; those that raise are its errors, those that disagree its differ
        ks = KeyState(raw)
        self.handle._current = ks
        try:
            if self.chain is not None:
                self.chain.carry(ks)
            new = self._rows([r for item in (run(self) or ()) for r in output_rows(item)])  # a row it cannot
        except Exception as exc:  # write is its error too, never the task's
            self.errors += 1
            self._note(key, f"the new version raised {type(exc).__name__}: {exc}")
            return
        finally:
            self.handle._current = None
        if real is None:
            self.differ += 1
            self._note(key, f"the version in force raised ({real_error}), the new one did not")
        elif (old := self._rows(real)) != new:
            self.differ += 1
            self._note(key, f"in force {_brief(old)}, new {_brief(new)}")

    def _rows(self, rows: list[dict[str, Any]]) -> list[bytes]:
        """The rows as compared: the declared fields only (else every field, in name order), as a
        sorted list (a multiset)."""
        if self.fields:
            return sorted(encode_output({f: r.get(f) for f in self.fields}) for r in rows)
        return sorted(encode_output(dict(sorted(r.items()))) for r in rows)

    def _note(self, key: bytes, what: str) -> None:
        if not self.example:
            self.example = f"key {key.decode('utf-8', 'replace')[:80]}: {what}"[:EXAMPLE_CHARS]

    def tally(self) -> dict[str, Any]:
        """What the worker reports (its metrics' `shadow`)."""
        return {"calls": self.calls, "differ": self.differ, "errors": self.errors, "example": self.example}


def _brief(rows: list[bytes]) -> str:
    text = "[" + ", ".join(r.decode("utf-8", "replace") for r in rows[:3]) + (", ..." if len(rows) > 3 else "") + "]"
    return text[:120]
