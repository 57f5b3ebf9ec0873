"""Soak: a constant level for a bounded long time (10 minutes unless --hold says otherwise).

    stampede run --scenario soak --users 100 --hold 1800

Leaks, slow degradation and quota creep show up here, not in a two-minute ramp.
"""

from harness.locust.shapes import SoakShape
from harness.locust.users import RolloutUser


class Soak(SoakShape):
    pass


__all__ = ["RolloutUser", "Soak"]
