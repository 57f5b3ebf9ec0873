"""Burst: N rollouts released at the same instant, as a synchronous RL step (B x G) does.

    locust -f scenarios/burst.py --headless -u 960
    stampede run --scenario burst --users 960 --profile modal-like
"""

from harness.locust_user import RolloutUser
from harness.shapes import BurstShape


class Burst(BurstShape):
    pass


__all__ = ["Burst", "RolloutUser"]
