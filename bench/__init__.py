"""The performance benchmark (``make bench``, ``make bench-smoke``): the service against the
floor — one gRPC round trip plus one durable PostgreSQL transaction — measured in the same run,
and the cache-economics trace replay. See ``docs/BENCHMARKS.md``."""
