"""Epoch traces in the metrics DB: the data plane writes one per epoch (with its next epoch's
commit), readers take a window of them as one `ballast.tracing.Trace`, and
`python -m ballast.store.traces export` writes that window as Chrome/Perfetto JSON with its
critical participation.

An epoch's trace ends with its own DB commit and acks, so it is whole only after them: the epoch's
tail writes it in a token-checked transaction of its own, off the critical path (docs/tracing.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ballast.tracing import Activity, Message, Trace, chrome_trace, epochs_participation
from migrations_db import models as m
from migrations_db.db import session_scope


def trace_row(job: str, operator: str, epoch: int, trace: Trace) -> m.EpochTrace:
    """The compact row of one epoch's trace (the epoch is the row's, not each activity's)."""
    return m.EpochTrace(
        job=job, operator=operator, epoch=epoch, started_us=trace.window()[0],
        activities=[[a.timeline, a.kind, a.start_us, a.end_us] for a in trace.activities],
        messages=[[x.src, x.dst, x.kind] for x in trace.messages])


def replace_trace(s: Session, row: m.EpochTrace) -> None:
    """Insert or replace (a replayed epoch rewrites its predecessor's trace)."""
    s.execute(delete(m.EpochTrace).where(m.EpochTrace.job == row.job, m.EpochTrace.operator == row.operator,
                                         m.EpochTrace.epoch == row.epoch))
    s.flush()
    s.add(row)


def read_trace(url: str, job: str, operator: str, first: int | None = None, last: int | None = None) -> Trace:
    """The epochs [first, last] (all stored when None) as one trace; each epoch's activities keep
    their epoch, and consecutive epochs join where the driver's timeline touches."""
    t = m.EpochTrace
    q = select(t).where(t.job == job, t.operator == operator).order_by(t.epoch)
    if first is not None:
        q = q.where(t.epoch >= first)
    if last is not None:
        q = q.where(t.epoch <= last)
    acts: list[Activity] = []
    msgs: list[Message] = []
    with session_scope(url) as s:
        for row in s.scalars(q):
            base = len(acts)
            acts += [Activity(str(tl), str(kind), int(a), int(b), int(row.epoch)) for tl, kind, a, b in row.activities]
            msgs += [Message(base + int(i), base + int(j), str(kind)) for i, j, kind in row.messages]
    return Trace(tuple(acts), tuple(msgs))


def traced_operators(url: str) -> list[tuple[str, str]]:
    """(job, operator) of every stored trace, sorted (a bench run's jobs: bench.cp_summary)."""
    t = m.EpochTrace
    with session_scope(url) as s:
        q = select(t.job, t.operator).distinct().order_by(t.job, t.operator)
        return [(str(j), str(o)) for j, o in s.execute(q)]


def last_epochs(url: str, job: str, operator: str, n: int) -> tuple[int, int] | None:
    """The first and last of the newest `n` stored epochs (None: no trace stored)."""
    t = m.EpochTrace
    with session_scope(url) as s:
        eps = list(s.scalars(select(t.epoch).where(t.job == job, t.operator == operator)
                             .order_by(t.epoch.desc()).limit(n)))
    return (min(eps), max(eps)) if eps else None


def main(argv: list[str] | None = None) -> int:
    """`export --job J [--operator O] [--last N | --first E --last-epoch E] -o FILE [--db-url U]`."""
    from ballast.store.schema import default_url

    ap = argparse.ArgumentParser(prog="python -m ballast.store.traces",
                                 description="Write a window of a job's epoch traces as Chrome/Perfetto JSON "
                                             "(open it in ui.perfetto.dev or speedscope).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="a window of epochs, with each activity's critical participation")
    ex.add_argument("--job", required=True)
    ex.add_argument("--operator", default=None, help="the operator (default: the job's only one)")
    ex.add_argument("--last", type=int, default=20, help="the newest N stored epochs (default 20)")
    ex.add_argument("--first", type=int, default=None, help="first epoch (with --last-epoch)")
    ex.add_argument("--last-epoch", type=int, default=None)
    ex.add_argument("-o", "--out", required=True, type=Path)
    ex.add_argument("--db-url", default=None, help="default: BALLAST_DB_URL, else the state dir's SQLite")
    a = ap.parse_args(argv)
    url = a.db_url or default_url()
    operator = a.operator or _only_operator(url, a.job)
    if a.first is not None or a.last_epoch is not None:
        window: tuple[int, int] | None = (a.first if a.first is not None else 0,
                                          a.last_epoch if a.last_epoch is not None else 1 << 62)
    else:
        window = last_epochs(url, a.job, operator, a.last)
    if window is None:
        print(f"no trace stored for job {a.job} operator {operator}: has it run an epoch since the upgrade "
              "to schema 0005 (python -m ballast.store upgrade)?", file=sys.stderr)
        return 2
    trace = read_trace(url, a.job, operator, *window)
    if not trace.activities:
        print(f"no trace of job {a.job} operator {operator} in epochs {window[0]}..{window[1]}", file=sys.stderr)
        return 2
    cp = epochs_participation(trace)
    a.out.write_text(json.dumps(chrome_trace(trace, a.job, cp)))
    print(f"wrote {len(trace.activities)} activities of epochs {window[0]}..{window[1]} to {a.out}; "
          f"{cp.bottleneck()}")
    return 0


def _only_operator(url: str, job: str) -> str:
    """The job's one operator; a job with several must name it."""
    with session_scope(url) as s:
        ops = sorted(set(s.scalars(select(m.Job.operator).where(m.Job.job == job))))
    if len(ops) != 1:
        raise SystemExit(f"job {job} has operators {ops or 'none'}: give --operator")
    return ops[0]


if __name__ == "__main__":
    raise SystemExit(main())
