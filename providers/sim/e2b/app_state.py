"""What the front's handlers share through the aiohttp application: the simulator, the API key, the run's facts."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from providers.sim.core.clock import SimClock
from providers.sim.core.simulator import VendorSimulator

SIM = web.AppKey("e2b_simulator", VendorSimulator)
API_KEY = web.AppKey("e2b_api_key", str)
INFO: web.AppKey[dict[str, Any]] = web.AppKey("e2b_info")


def simulator(request: web.Request) -> VendorSimulator:
    return request.app[SIM]


def time_scale(clock: SimClock) -> float:
    """Real seconds per vendor second (1 for a clock that does not say)."""
    return float(getattr(clock, "time_scale", 1.0))
