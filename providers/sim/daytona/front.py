"""The local Daytona's shared state: the simulator, what the front adds to its records, and error answers.

The REST handlers (`rest.py`), the toolbox (`toolbox.py`) and the event gateway (`events.py`) all reach the
same `Front` through the aiohttp application.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from providers.sim.core.records import SimSnapshot
from providers.sim.core.simulator import NotFound, SimSandbox, VendorSimulator
from providers.sim.daytona.shapes import SOURCE_API, Lifecycle, error_body, requested, sandbox_body, state_of

API_PREFIX = "/api"
TOOLBOX_PREFIX = "/toolbox"


@dataclass
class Front:
    """One simulated Daytona organization: its simulator, token, where it listens, and per-sandbox extras."""

    sim: VendorSimulator
    token: str
    base_url: str = ""  # http://host:port, known once bound
    life: dict[str, Lifecycle] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # name -> id, for sandboxes not destroyed
    on_create: list[Callable[[SimSandbox], None]] = field(default_factory=list)
    on_change: list[Callable[[SimSandbox, Lifecycle], None]] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return self.base_url + API_PREFIX

    @property
    def toolbox_url(self) -> str:
        return self.base_url + TOOLBOX_PREFIX

    @property
    def time_scale(self) -> float:
        return self.sim.clock.time_scale

    def lifecycle(self, sb: SimSandbox) -> Lifecycle:
        life = self.life.get(sb.id)
        if life is None:
            life = self.life[sb.id] = Lifecycle()
        return life

    def find(self, id_or_name: str) -> SimSandbox:
        """A sandbox by id, or by the name of one not yet destroyed; NotFound otherwise."""
        try:
            return self.sim.get(id_or_name)
        except NotFound:
            known = self.names.get(id_or_name)
            if known is None:
                raise
            return self.sim.get(known)

    def find_live(self, id_or_name: str) -> SimSandbox:
        """`find`, but a destroyed sandbox is gone: the API answers 404 for it (the SDK's delete waits for that)."""
        sb = self.find(id_or_name)
        if state_of(sb, self.life.get(sb.id)) == "destroyed":
            raise NotFound(sb.id)
        return sb

    def snapshot_named(self, id_or_name: str) -> SimSnapshot | None:
        """A snapshot taken of a sandbox here (`sandbox.create_snapshot`), by id or name."""
        try:
            return self.sim.get_snapshot(id_or_name)
        except NotFound:
            return None

    def body(self, sb: SimSandbox, *, full: bool = True) -> dict[str, object]:
        return sandbox_body(sb, self.sim.clock, self.toolbox_url, self.life.get(sb.id), full=full)

    def forget_name(self, sb: SimSandbox) -> None:
        name = requested(sb).name
        if name and self.names.get(name) == sb.id:
            del self.names[name]

    def changed(self, sb: SimSandbox) -> None:
        """A sandbox's record changed (the simulator's listener, or the front's own stop/delete)."""
        life = self.lifecycle(sb)
        if not sb.active:
            self.forget_name(sb)
        for callback in self.on_change:
            callback(sb, life)


FRONT = web.AppKey("stampede_daytona_front", Front)


def front_of(request: web.Request) -> Front:
    return request.app[FRONT]


def error(
    request: web.Request,
    status: int,
    message: str,
    *,
    code: str | None = None,
    source: str = SOURCE_API,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """An error in the envelope of the Daytona service named by `source`."""
    body = error_body(status, message, path=request.path_qs, method=request.method, code=code, source=source)
    return web.json_response(body, status=status, headers=headers)


Answer = TypeVar("Answer", bound=web.StreamResponse)
SandboxLookup = Callable[[web.Request], tuple[Front, SimSandbox | None, web.Response | None]]
"""The path's sandbox as a call needs it (live, started...), or the refusal to answer instead."""


def with_sandbox(
    lookup: SandboxLookup,
) -> Callable[
    [Callable[[web.Request, Front, SimSandbox], Awaitable[Answer]]],
    Callable[[web.Request], Awaitable[Answer | web.Response]],
]:
    """A handler on the sandbox `lookup` finds from the path; when it refuses, its refusal is the answer."""

    def decorate(
        handler: Callable[[web.Request, Front, SimSandbox], Awaitable[Answer]],
    ) -> Callable[[web.Request], Awaitable[Answer | web.Response]]:
        @functools.wraps(handler)
        async def checked(request: web.Request) -> Answer | web.Response:
            front, sb, refused = lookup(request)
            if refused is not None:
                return refused
            assert sb is not None
            return await handler(request, front, sb)

        return checked

    return decorate


async def json_object(request: web.Request) -> dict[str, Any] | None:
    """The request's body if it is a JSON object, else None: each call answers a bad body in its own words."""
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def served_elsewhere(request: web.Request, rest: str, served: tuple[str, ...]) -> web.Response | None:
    """For a catch-all route: a path that is served, asked with a method it does not take, gets the answer NestJS
    gives a wrong method (404 "Cannot TRACE /path"), not the 501 of a call that is not modelled."""
    if any(rest == name or rest.startswith(name + "/") for name in served):
        return error(request, 404, f"Cannot {request.method} {request.path}")
    return None
