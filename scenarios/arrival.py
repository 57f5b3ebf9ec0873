"""Arrival: an open model at a fixed or Poisson rate of starts per second, one stage per rate.

    stampede run --scenario arrival --rates 2,4,8 --hold 30 --poisson --max-inflight 2000

Intended start times are recorded (`t_intended`); late starts show as t_submit - t_intended, and starts that
find `--max-inflight` rollouts running are dropped and counted, so coordinated omission cannot hide a slow vendor.
"""

from harness.locust.shapes import ArrivalShape
from harness.locust.users import OpenModelUser


class Arrival(ArrivalShape):
    pass


__all__ = ["Arrival", "OpenModelUser"]
