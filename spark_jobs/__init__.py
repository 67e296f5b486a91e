"""The Ballast data plane: migratable binned state on Spark Structured Streaming."""
