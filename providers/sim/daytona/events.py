"""Daytona's notification gateway: Socket.IO at `{api}/socket.io/`, where the SDK hears sandbox state changes.

daytona 0.226.1 connects one Socket.IO client per `Daytona` / `AsyncDaytona` (websocket transport,
`auth={"token": <API key>}`) and waits for a sandbox to start on `sandbox.state.updated` events, polling
`GET /sandbox/{id}` only once a second as a safety net. Without this gateway every readiness would be seen
up to a second late, which is not how the real service behaves. A client that authenticates joins its
organization's room and hears every change there: `sandbox.created` (a full `Sandbox`) and
`sandbox.state.updated` (`{"sandbox": <Sandbox>, "oldState", "newState"}`), in the order they happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from typing import Any

import socketio
from aiohttp import web

from providers.sim.core.simulator import SimSandbox
from providers.sim.daytona.front import API_PREFIX, Front
from providers.sim.daytona.shapes import ORGANIZATION_ID, Lifecycle, state_of

log = logging.getLogger(__name__)

SOCKETIO_PATH = f"{API_PREFIX}/socket.io"


class EventGateway:
    """Socket.IO server on the front's aiohttp app; one sender task keeps events in order."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.front: Front | None = None
        self.server = socketio.AsyncServer(
            async_mode="aiohttp", cors_allowed_origins=[], logger=False, engineio_logger=False
        )
        self.clients = 0
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None
        self.server.on("connect", self._connect)
        self.server.on("disconnect", self._disconnect)

    def attach(self, app: web.Application) -> None:
        """Serve the gateway on the app (before it starts)."""
        self.server.attach(app, socketio_path=SOCKETIO_PATH.strip("/"))

    def bind(self, front: Front) -> None:
        """Announce this front's sandboxes (once its simulator exists)."""
        self.front = front
        front.on_create.append(self._created)
        front.on_change.append(self._changed)

    async def _connect(self, sid: str, environ: dict[str, Any], auth: Any = None) -> bool:
        token = auth.get("token") if isinstance(auth, dict) else None
        if not isinstance(token, str) or not hmac.compare_digest(token, self.token):
            raise socketio.exceptions.ConnectionRefusedError("Unauthorized")
        await self.server.enter_room(sid, ORGANIZATION_ID)
        self.clients += 1
        return True

    async def _disconnect(self, sid: str, *args: Any) -> None:
        self.clients = max(0, self.clients - 1)

    def _created(self, sb: SimSandbox) -> None:
        """A create was accepted: `sandbox.created`."""
        assert self.front is not None
        life = self.front.lifecycle(sb)
        life.announced = state_of(sb, life)
        if self.clients:
            self._send("sandbox.created", self.front.body(sb))

    def _changed(self, sb: SimSandbox, life: Lifecycle) -> None:
        new = state_of(sb, life)
        old, life.announced = life.announced, new
        if old is None or old == new or not self.clients or self.front is None:
            return
        self._send("sandbox.state.updated", {"sandbox": self.front.body(sb), "oldState": old, "newState": new})

    def _send(self, event: str, data: dict[str, Any]) -> None:
        self._queue.put_nowait((event, data))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while not self._queue.empty():
            event, data = self._queue.get_nowait()
            try:
                await self.server.emit(event, data, room=ORGANIZATION_ID)
            except Exception:  # a client that went away mid-send: the others still hear the rest
                log.debug("event %s not delivered", event, exc_info=True)

    async def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
        with contextlib.suppress(Exception):
            await self.server.shutdown()
