"""What the front's handlers share through the aiohttp application: the simulator, the API key, the run's facts."""

from __future__ import annotations

from aiohttp import web

from providers.sim.core.serving.listening import SIMULATOR
from providers.sim.core.simulator import VendorSimulator

SIM = SIMULATOR
API_KEY = web.AppKey("e2b_api_key", str)


def simulator(request: web.Request) -> VendorSimulator:
    return request.app[SIM]
