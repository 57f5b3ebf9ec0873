"""Knee: raise concurrency stage by stage until the failure rate or TTI p99 crosses its threshold, then stop.

    stampede run --scenario knee --stages 20..640 --hold 20 --knee-max-failure 0.05 --knee-max-p99 30

The knee (the highest clean level) is printed and recorded in run.json (`shape_outcome`).
"""

from harness.locust.shapes import KneeShape
from harness.locust.users import RolloutUser


class Knee(KneeShape):
    pass


__all__ = ["Knee", "RolloutUser"]
