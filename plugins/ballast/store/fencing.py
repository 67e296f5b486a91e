"""One driver at a time: the fencing token (ownership epoch) of an operator's driver.

Every driver start takes a new token (`take_token`: the operator's counter + 1) before its first
epoch. Each write the driver makes to the metrics DB — the epoch commit with its step
checkpoints, the decision log, its status — checks the token *in the same transaction*
(`check_token`): an UPDATE of the token row that matches only while the token is still ours. A
heartbeat proves nothing (a paused driver's last heartbeat looks like a live one's); the compare
is what decides. On PostgreSQL the UPDATE locks the row until the transaction ends, so a newer
start's bump waits for a commit already under way, then every later check of the older token
finds 0 rows; on SQLite the database's one writer does the same. A stale driver gets `Fenced`,
naming its token and the newer one, and its transaction rolls back whole.

Destructive durable-state actions (the manifest, retention) are files, outside any DB
transaction: `guard` checks the token in a transaction of its own right before them
(docs/dataplane.md, "One driver at a time", says what is left to that window and why it is safe).
Transactional output (Kafka transactions, a later change) can put the same check beside its
commit. Framework-free: SQLAlchemy only.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ballast.dbtime import as_utc
from ballast.errors import BallastError
from migrations_db import models as m
from migrations_db.db import session_scope

__all__ = ["Fence", "Fenced", "TokenRow", "check_token", "guard", "take_token", "token_row"]


class Fenced(BallastError, RuntimeError):
    """A newer driver of the same operator took over: this driver's commit was refused."""

    def __init__(self, job: str, operator: str, mine: int, current: int | None, what: str) -> None:
        self.job, self.operator, self.mine, self.current = job, operator, mine, current
        newer = f"token {current}" if current is not None else "no token (the token row is gone)"
        super().__init__(
            f"driver fenced: job {job} operator {operator} holds driver token {mine}, but the metrics DB has "
            f"{newer}: a newer driver took over (a relaunch while this one was paused or cut off), so {what} "
            "was refused and nothing of it was committed. This driver exits; the newer one owns the job. "
            "Nothing to do unless no newer driver runs (then relaunch the job: it takes a new token).")


@dataclass(frozen=True)
class Fence:
    """What a driver's writes compare against: its operator and the token its start took."""

    job: str
    operator: str
    token: int


@dataclass(frozen=True)
class TokenRow:
    """The current token of an operator and who took it."""

    job: str
    operator: str
    token: int
    taken_at: datetime
    pid: int
    host: str
    outage_s: float
    checked_at: datetime | None


def take_token(url: str, job: str, operator: str, now: datetime, outage_s: float = 0.0) -> Fence:
    """A new token for a driver start (previous + 1; 1 for the first start): every earlier
    driver of the operator is fenced from this commit on. `outage_s`: the longest this driver may
    wait out an outage without a heartbeat (the supervisor's allowance)."""
    fields = {"taken_at": now, "pid": os.getpid(), "host": socket.gethostname()[:200], "outage_s": outage_s,
              "checked_at": None}
    for _ in range(3):  # two first starts at once: the loser of the INSERT bumps the winner's row
        try:
            with session_scope(url) as s:
                bumped = s.execute(update(m.DriverToken).where(
                    m.DriverToken.job == job, m.DriverToken.operator == operator,
                ).values(token=m.DriverToken.token + 1, **fields))
                if bumped.rowcount == 0:  # type: ignore[attr-defined]
                    s.add(m.DriverToken(job=job, operator=operator, token=1, **fields))
                    s.flush()
                token = s.scalar(select(m.DriverToken.token).where(
                    m.DriverToken.job == job, m.DriverToken.operator == operator))
                assert token is not None
                return Fence(job, operator, int(token))
        except IntegrityError:
            continue
    raise RuntimeError(f"could not take a driver token for {job}/{operator}: the token row keeps changing")


def check_token(s: Session, fence: Fence, now: datetime, what: str) -> None:
    """Compare-and-write inside the caller's transaction: raises `Fenced` (the caller's
    transaction then rolls back) unless `fence.token` is still the operator's token."""
    hit = s.execute(update(m.DriverToken).where(
        m.DriverToken.job == fence.job, m.DriverToken.operator == fence.operator, m.DriverToken.token == fence.token,
    ).values(checked_at=now))
    if hit.rowcount == 1:  # type: ignore[attr-defined]
        return
    current = s.scalar(select(m.DriverToken.token).where(
        m.DriverToken.job == fence.job, m.DriverToken.operator == fence.operator))
    raise Fenced(fence.job, fence.operator, fence.token, None if current is None else int(current), what)


def guard(url: str, fence: Fence, now: datetime, what: str) -> None:
    """`check_token` in a transaction of its own: right before a write outside the DB."""
    with session_scope(url) as s:
        check_token(s, fence, now, what)


def token_row(url: str, job: str, operator: str) -> TokenRow | None:
    """The operator's current token, or None before its first start."""
    with session_scope(url) as s:
        r = s.get(m.DriverToken, (job, operator))
        if r is None:
            return None
        return TokenRow(r.job, r.operator, int(r.token), as_utc(r.taken_at), r.pid, r.host,  # type: ignore[arg-type]
                        float(r.outage_s), as_utc(r.checked_at))
