"""The read side: a run's dataset, concurrency, quantiles, stage aggregates, the knee, reports, latency export.

Reads result folders; imports neither the engine nor Locust.
"""
