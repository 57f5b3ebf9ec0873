"""The Locust side (gevent): session wiring, run state, settings, shapes, users, the engine client, the
master/worker link, the run folder and the simulated-vendor process. Never imports `harness.engine`.
"""
