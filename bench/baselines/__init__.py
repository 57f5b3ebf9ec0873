"""The baselines `bench/bench_overhead.py` holds stampede against: the same calls without the harness."""
