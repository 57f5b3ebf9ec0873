"""What the local Runloop's handlers share: the account (`Front`: its simulator, token, executions and the devbox
states the API adds), one command's record (`Execution`), the error answer and the JSON body reader."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from providers.sim.core.records import SandboxStatus, SimSandbox
from providers.sim.core.serving.json_body import read_json_object
from providers.sim.core.simulator import VendorSimulator
from providers.sim.runloop.shapes import devbox_view, error_body


def error(request: web.Request, status: int, message: str, *, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(error_body(status, message), status=status, headers=headers)


@dataclass(eq=False)
class Execution:
    """One command: `queued`/`running` until the simulator reports it, then `completed` with its outcome."""

    id: str
    devbox_id: str
    status: str = "running"
    exit_status: int | None = None
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    failed: str | None = None  # the exec path failed (ExecError): answered as a 500
    ticket: Any = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def view(self) -> dict[str, Any]:
        done = self.status == "completed"
        return {
            "devbox_id": self.devbox_id,
            "execution_id": self.id,
            "status": self.status,
            "exit_status": self.exit_status if done else None,
            "stdout": self.stdout.decode(errors="replace") if done else None,
            "stderr": self.stderr.decode(errors="replace") if done else None,
            "stdout_truncated": False if done else None,
            "stderr_truncated": False if done else None,
        }

    def wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


@dataclass
class Front:
    """One simulated Runloop account: its simulator, token, and what the API adds to the simulator's records."""

    sim: VendorSimulator
    token: str
    executions: dict[str, Execution] = field(default_factory=dict)
    changed: dict[str, asyncio.Event] = field(default_factory=dict)  # devbox id -> set at its next change
    suspending: set[str] = field(default_factory=set)
    resuming: set[str] = field(default_factory=set)
    snapshot_meta: dict[str, tuple[dict[str, str], str | None]] = field(default_factory=dict)

    def view(self, sb: SimSandbox) -> dict[str, Any]:
        if sb.status is SandboxStatus.RUNNING:
            self.resuming.discard(sb.id)
        return devbox_view(
            sb, self.sim.clock.wall, suspending=sb.id in self.suspending, resuming=sb.id in self.resuming
        )

    def notify(self, sb: SimSandbox) -> None:
        event = self.changed.pop(sb.id, None)
        if event is not None:
            event.set()
        if not sb.active:
            for execution in [e for e in self.executions.values() if e.devbox_id == sb.id]:
                if execution.status != "completed":
                    continue
                self.executions.pop(execution.id, None)  # an ended devbox's finished commands are forgotten

    def next_change(self, devbox_id: str) -> asyncio.Event:
        event = self.changed.get(devbox_id)
        if event is None:
            event = self.changed[devbox_id] = asyncio.Event()
        return event

    def find(self, request: web.Request) -> SimSandbox:
        return self.sim.get(request.match_info["id"])


FRONT = web.AppKey("stampede_runloop_front", Front)


def front_of(request: web.Request) -> Front:
    return request.app[FRONT]


def _bad_request(text: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=text)


async def read_json(request: web.Request) -> dict[str, Any]:
    return await read_json_object(
        request, _bad_request, not_json="body must be JSON", not_object="body must be a JSON object"
    )
