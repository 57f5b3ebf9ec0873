"""The generator-side RL model: config, latency input, closed forms, simulation, sweep, rehearsal comparison.

Reads files (a latency model, a TOML config); imports neither the engine nor Locust.
"""
