"""Burst-hold: issue #32's protocol (the public "Scale Invitational"): N sandboxes fired at t=0, held, then all
terminated.

    stampede run --scenario burst-hold --users 200 --hold 30 --profile ideal
    locust -f scenarios/burst-hold.py --headless -u 200 --hold 30 --sim-profile ideal

Every sandbox is held (alive, no call in flight) until `--hold` seconds after its submit, asked its first command
again, then terminated. The summary gives the four result states (success, partial, readiness failed, failed, with
create failures split timeout / http / network), allocate and readiness quantiles, the time to reach N held, the
peak held and TTI by submission quartile (harness.results.figures.burst_hold).
"""

from harness.locust.shapes import BurstHoldShape
from harness.locust.users import RolloutUser


class BurstHold(BurstHoldShape):
    pass


__all__ = ["BurstHold", "RolloutUser"]
