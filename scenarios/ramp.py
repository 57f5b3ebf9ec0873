"""Ramp: doubling concurrency stages (60, 120, 240, 480, 960 by default), each held once reached.

    locust -f scenarios/ramp.py --headless --stages 60..3840 --hold 20
    stampede run --scenario ramp --stages 60,120,240 --hold 20

`-u N` caps the ramp at N; `--spawn-rate` sets how fast users are added between stages.
"""

from harness.locust.shapes import RampShape
from harness.locust.users import RolloutUser


class Ramp(RampShape):
    pass


__all__ = ["Ramp", "RolloutUser"]
