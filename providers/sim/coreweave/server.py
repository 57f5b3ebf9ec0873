"""The local CoreWeave Sandbox assembled: the simulator, its gRPC SandboxService (service.py) and a truth endpoint.

Two listeners on one asyncio loop over one `VendorSimulator`:
- the gRPC API (grpcio's asyncio server, the SDK's own generated servicer) at `url`: what `CWSANDBOX_BASE_URL`
  names (plain `http://`: the SDK then opens an insecure channel); clients send `authorization: Bearer <token>`,
  which the SDK builds from `CWSANDBOX_API_KEY`;
- a small HTTP server at `truth_url` serving `GET /api/v1/_stampede/truth` and `/stats` with
  `Authorization: Bearer <token>`, in the stub's JSON shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc.aio
from aiohttp import web
from cwsandbox._proto import sandbox_pb2_grpc

from providers.sim.core.clock import LoopClock
from providers.sim.core.profile import Profile
from providers.sim.core.serving.listening import http_url, listen, truth_app
from providers.sim.core.simulator import VendorSimulator
from providers.sim.core.vendor_settings import VendorSettings
from providers.sim.coreweave.service import CoreWeaveSandboxService

DEFAULT_PROFILE = "coreweave-like"
MAX_CONCURRENT_STREAMS = 65536  # a 960-wide burst's polls and streams share a few HTTP/2 connections
_GRPC_OPTIONS = (
    ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
    ("grpc.max_receive_message_length", 100 * 1024 * 1024),  # the SDK's own channel limit
    ("grpc.max_send_message_length", 100 * 1024 * 1024),
    ("grpc.so_reuseport", 0),
)


@dataclass(frozen=True)
class CoreWeaveSettings(VendorSettings):
    """The local CoreWeave Sandbox: its vendor settings (`port` is the gRPC API's) and the truth endpoint's port."""

    profile: Profile | str = DEFAULT_PROFILE
    truth_port: int = 0


@dataclass
class RunningCoreWeave:
    """A local CoreWeave Sandbox listening on this loop. `close()` stops it (sandboxes are left as they are)."""

    url: str
    truth_url: str
    token: str
    simulator: VendorSimulator
    _server: grpc.aio.Server
    _http: web.AppRunner

    @property
    def time_scale(self) -> float:
        return self.simulator.clock.time_scale

    def sdk_environment(self) -> dict[str, str]:
        """What a user's own script sets for the unmodified `cwsandbox` SDK."""
        return {"CWSANDBOX_BASE_URL": self.url, "CWSANDBOX_API_KEY": self.token}

    async def close(self) -> None:
        await self._server.stop(grace=None)
        await self._http.cleanup()
        self.simulator.close()


def _truth_app(running: Callable[[], RunningCoreWeave], token: str) -> web.Application:
    def truth() -> dict[str, Any]:
        sim = running().simulator
        return {**sim.facts(), "sandboxes": sim.truth()}

    def stats() -> dict[str, Any]:
        sim = running().simulator
        return {**sim.facts(), "stats": sim.stats()}

    return truth_app(token, truth, stats)


async def start_coreweave(settings: CoreWeaveSettings) -> RunningCoreWeave:
    """Start the local CoreWeave Sandbox on the running loop. Profile problems raise ProfileError before anything
    listens; a port that cannot be bound raises OSError with nothing left running."""
    profile = settings.resolved_profile()
    clock = LoopClock(settings.resolved_time_scale(profile))
    clock.start()
    sim = VendorSimulator(profile, seed=settings.seed, clock=clock)
    server = grpc.aio.server(options=_GRPC_OPTIONS)
    sandbox_pb2_grpc.add_SandboxServiceServicer_to_server(CoreWeaveSandboxService(sim, settings.token), server)
    holder: list[RunningCoreWeave] = []
    runner: web.AppRunner | None = None
    try:
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        port = server.add_insecure_port(f"{host}:{settings.port}")
        if port == 0:
            raise OSError(f"cannot listen on {settings.host}:{settings.port}")
        await server.start()
        runner, truth_port = await listen(
            _truth_app(lambda: holder[0], settings.token), settings.host, settings.truth_port
        )
    except BaseException:
        await server.stop(grace=None)
        if runner is not None:
            await runner.cleanup()
        sim.close()
        raise
    running = RunningCoreWeave(
        url=http_url(settings.host, port),
        truth_url=http_url(settings.host, truth_port),
        token=settings.token,
        simulator=sim,
        _server=server,
        _http=runner,
    )
    holder.append(running)
    return running
