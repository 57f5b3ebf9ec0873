"""What crosses the Unix socket between the Locust side (gevent) and the engine (asyncio): typed messages,
the rollout plan, the one duration syntax, records and their Arrow schemas. Imports neither runtime.
"""
