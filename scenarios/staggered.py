"""Staggered: one start every D ms, N starts in all, as the public sandbox benchmarks do.

    stampede run --scenario staggered --users 100 --stagger-ms 200

An open schedule: starts do not wait for earlier rollouts to finish.
"""

from harness.locust.shapes import StaggeredShape
from harness.locust.users import OpenModelUser


class Staggered(StaggeredShape):
    pass


__all__ = ["OpenModelUser", "Staggered"]
