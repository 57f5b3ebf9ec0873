"""The local Modal vendor assembled: simulator, control plane, command router and the truth endpoint.

Three listeners on one asyncio loop over one `VendorSimulator`:
- the control plane (grpclib, `modal.client.ModalClient`) at `url`: what `MODAL_SERVER_URL` names;
- the task command router (grpclib) at `router_url`, handed to clients by the control plane;
- a small HTTP server at `truth_url` serving the simulator's own records, `GET /api/v1/_stampede/truth`
  and `/stats` with `Authorization: Bearer <token>`, in the stub's JSON shape, with Modal's sandbox ids.

The workspace token the control plane accepts is (`token_id`, `token`): the harness passes its run token
as the secret, so no extra secret is ever printed or recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpclib.server
from aiohttp import web

from providers.sim.core.clock import LoopClock
from providers.sim.core.faults import FaultInjector
from providers.sim.core.profile import Profile
from providers.sim.core.serving.listening import http_url, listen, truth_app
from providers.sim.core.simulator import VendorSimulator
from providers.sim.core.vendor_settings import VendorSettings
from providers.sim.modal.control_plane import ModalControlPlane
from providers.sim.modal.faults import GrpcFaults
from providers.sim.modal.grpc_plumbing import start_grpc_server, stop_grpc_server
from providers.sim.modal.registry import ModalRegistry, modal_fields
from providers.sim.modal.router import ModalCommandRouter
from providers.sim.modal.tokens import DEFAULT_TOKEN_ID, Credentials, JwtSigner

DEFAULT_PROFILE = "modal-like"


@dataclass(frozen=True)
class ModalSettings(VendorSettings):
    """The local Modal: its vendor settings (`port` is the control plane's), plus the command router's and the
    truth endpoint's ports and the workspace token id it accepts."""

    profile: Profile | str = DEFAULT_PROFILE
    router_port: int = 0
    truth_port: int = 0
    token_id: str = DEFAULT_TOKEN_ID


@dataclass
class RunningModal:
    """A local Modal listening on this loop. `close()` stops it (sandboxes are left as they are)."""

    url: str
    router_url: str
    truth_url: str
    token: str
    token_id: str
    simulator: VendorSimulator
    registry: ModalRegistry
    _servers: list[grpclib.server.Server]
    _http: web.AppRunner
    faults: GrpcFaults

    @property
    def time_scale(self) -> float:
        return self.simulator.clock.time_scale

    def truth(self) -> list[dict[str, Any]]:
        """The simulator's records with Modal's sandbox ids (`sim_id` keeps the simulator's own)."""
        rows = self.simulator.truth()
        for row in rows:
            if "sim_id" in row:
                continue  # a pruned sandbox's row: the registry wrote Modal's ids into it then
            record = self.registry.by_sim.get(row["id"])
            if record is not None:
                row.update(modal_fields(record, row["id"]))
            else:
                row["sim_id"] = row["id"]
        return rows

    async def close(self) -> None:
        self.faults.close()
        self.registry.close()
        for server in self._servers:
            await stop_grpc_server(server)
        await self._http.cleanup()
        self.simulator.close()


def _truth_app(running: Callable[[], RunningModal], token: str) -> web.Application:
    def truth() -> dict[str, Any]:
        modal = running()
        return {**modal.simulator.facts(), "sandboxes": modal.truth()}

    def stats() -> dict[str, Any]:
        modal = running()
        injected = dict(modal.faults.injector.injected)
        return {**modal.simulator.facts(), "stats": modal.simulator.stats(), "faults_injected": injected}

    return truth_app(token, truth, stats)


async def start_modal(settings: ModalSettings) -> RunningModal:
    """Start the local Modal on the running loop. Profile problems raise ProfileError before anything listens."""
    profile = settings.resolved_profile()
    scale = settings.resolved_time_scale(profile)
    clock = LoopClock(scale)
    clock.start()
    sim = VendorSimulator(profile, seed=settings.seed, clock=clock)
    registry = ModalRegistry(sim)
    signer = JwtSigner()
    faults = GrpcFaults(FaultInjector(profile.faults))
    credentials = Credentials(settings.token_id, settings.token)
    servers: list[grpclib.server.Server] = []
    holder: list[RunningModal] = []
    runner: web.AppRunner | None = None
    try:
        router, router_port = await start_grpc_server(
            [faults.wrap(ModalCommandRouter(registry, signer))], settings.host, settings.router_port
        )
        servers.append(router)
        router_url = http_url(settings.host, router_port)
        control, port = await start_grpc_server(
            [faults.wrap(ModalControlPlane(registry, credentials, signer, router_url))], settings.host, settings.port
        )
        servers.append(control)
        runner, truth_port = await listen(
            _truth_app(lambda: holder[0], settings.token), settings.host, settings.truth_port
        )
    except BaseException:
        for server in servers:
            await stop_grpc_server(server)
        if runner is not None:
            await runner.cleanup()
        sim.close()
        raise
    running = RunningModal(
        url=http_url(settings.host, port),
        router_url=router_url,
        truth_url=http_url(settings.host, truth_port),
        token=settings.token,
        token_id=settings.token_id,
        simulator=sim,
        registry=registry,
        _servers=servers,
        _http=runner,
        faults=faults,
    )
    holder.append(running)
    return running
