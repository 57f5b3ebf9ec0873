"""Steady: an asynchronous (PipelineRL-style) generator: N rollouts in flight at all times, a new one as each ends.

    stampede run --scenario steady --users 200 --hold 60 --turns 3 --gen-time lognormal:2,0.5

Pair it with agentic rollouts (`--turns`, `--gen-time`) to hold sandboxes as long as real episodes do.
"""

from harness.locust.shapes import SteadyShape
from harness.locust.users import RolloutUser


class Steady(SteadyShape):
    pass


__all__ = ["RolloutUser", "Steady"]
