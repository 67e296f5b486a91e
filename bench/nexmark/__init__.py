"""NEXMark for Ballast: the standard auction workload (persons, auctions, bids) as Beam's and
Flink's nexmark suites define it, written here in Python.

model      the records and the generator's config
jrandom    java.util.Random, bit for bit (the generator derives fields as Beam does)
generator  deterministic events from (config, event number), delivered out of order within a bound
writer     open-loop writer to Kafka, one topic per kind (python -m bench.nexmark.writer)
reference  pure-Python answers to Q1-Q8 and the rule to compare a job's output with them
"""
