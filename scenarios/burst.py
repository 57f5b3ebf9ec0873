"""Burst: a synchronous RL step: B x G rollouts released at once, the next step when the last one ends.

    locust -f scenarios/burst.py --headless -u 960
    stampede run --scenario burst --batch 64 --group 8 --burst-steps 3 --profile modal-like

Between steps the in-flight count drops to zero, as a synchronous trainer's generator does.
"""

from harness.locust.shapes import BurstShape
from harness.locust.users import RolloutUser


class Burst(BurstShape):
    pass


__all__ = ["Burst", "RolloutUser"]
