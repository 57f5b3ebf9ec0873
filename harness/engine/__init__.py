"""The rollout engine: a plain asyncio process (`python -m harness.engine`) that owns every live sandbox.

Never imported by the Locust side: the two meet only at the socket (`harness.wire`).
"""
