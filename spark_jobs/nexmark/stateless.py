"""Q1 (currency conversion) and Q2 (selection): stateless, so every stage is Spark SQL in the JVM
(spark_jobs.stateless): the parse, the selection, the projection and the output's JSON. No row
crosses into Python. Their records have no key, as NEXMark's answers and Spark's own queries
(bench.nexmark_native) have none: the same output on both sides, so their costs compare.

They still run as Ballast jobs (epochs, control steps, metrics, console, supervision, ids on every
output): a migration of their bins moves nothing, and a restart replays the epoch's input into
the same output ids.
"""

from __future__ import annotations

from spark_jobs.nexmark import BID, KIND, fields
from spark_jobs.stateless import StatelessQuery

AUCTION_SKIP = 123

Q1 = StatelessQuery(input_schema=fields("auction", "bidder", "price", "date_time"), source_column=KIND,
                    where=f"{KIND} = {BID}",
                    output=("auction", "bidder", "CAST(price * 89 DIV 100 AS BIGINT) AS price", "date_time"),
                    sources=(BID,))
Q2 = StatelessQuery(input_schema=fields("auction", "price"), source_column=KIND,
                    where=f"{KIND} = {BID} AND auction % {AUCTION_SKIP} = 0",
                    output=("auction", "price"), sources=(BID,))
