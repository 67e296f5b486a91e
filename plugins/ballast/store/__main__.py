"""`python -m ballast.store [upgrade|downgrade] [revision]`: the metrics DB's schema (ballast.store.schema)."""

from ballast.store.schema import main

main()
