"""NEXMark Q1-Q8 as Ballast jobs (issue 10; the queries' reference answers: bench.nexmark.reference).

Every query is given the three topics bench.nexmark.writer fills, in this order:
`--input-topic <prefix>.person,<prefix>.auction,<prefix>.bid`, and reads those its `sources` name
(Q1, Q2, Q5, Q7 the bids only; Q3, Q8 persons and auctions; Q4, Q6 auctions and bids), as the same
query in Spark's own operators subscribes to those only; `kind` (the topic's position:
PERSON, AUCTION, BID) tells a row's record type, and every topic is parsed with one schema, the
union of the three records' fields (a record's missing fields are null), or rather the part of it
the query reads (`fields`: the JSON parser skips the rest, and its rows are no wider than they must
be). What a query needs
before routing — its selection, a projection, the key it is partitioned by — is Spark SQL in its
QuerySpec (`where`, `columns`), evaluated by Spark on the driver's plan; the processors hold the
state. Run one as `--operator spark_jobs.nexmark.<module>:<Class>` (docs/benchmarks.md, NEXMark).
"""

from __future__ import annotations

PERSON, AUCTION, BID = 0, 1, 2
KIND = "kind"
SCHEMA = ("id long, name string, email_address string, credit_card string, city string, state string, "
          "date_time long, extra string, item_name string, description string, initial_bid long, reserve long, "
          "expires long, seller long, category long, auction long, bidder long, price long")
WINDOW_MS = 10_000


def fields(*names: str) -> str:
    """The DDL of `SCHEMA`'s fields `names`, in SCHEMA's order: a query's `input_schema`. A query
    declares what it reads, so the parser skips the other fields (a value the query never reads
    cannot make its record a dead letter either)."""
    known = [f.strip() for f in SCHEMA.split(",")]
    unknown = sorted(set(names) - {f.split()[0] for f in known})
    if unknown:
        raise ValueError(f"not NEXMark fields: {unknown}; the fields are those of SCHEMA")
    return ", ".join(f for f in known if f.split()[0] in names)
PERIOD_MS = 5_000
#: allowed lateness of the event-time queries: the three topics are read batch by batch, so one
#: topic's rows can run ahead of another's by up to a batch; larger than that, no row is late
LATENESS_MS = 20_000


def topics(prefix: str) -> str:
    """The `--input-topic` value of every NEXMark query."""
    return f"{prefix}.person,{prefix}.auction,{prefix}.bid"
