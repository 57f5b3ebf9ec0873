"""What the local Vercel Sandbox's handlers share: the named sandboxes (`Named`), each session's commands
(`Command`: its log records and its end), and the `State` holding them with the waits for a session to run."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from providers.sim.core.records import ExecTicket
from providers.sim.core.simulator import SandboxStatus, SimSandbox


@dataclass
class Named:
    """A named sandbox: its current session (a simulated sandbox's id) and what it was created with."""

    name: str
    project_id: str
    session_id: str
    image: str
    vcpus: int
    timeout_ms: int
    tags: dict[str, str]
    env: dict[str, str]
    persistent: bool
    created_ms: int
    snapshot_id: str | None = None


@dataclass
class Command:
    """One command in a session: its log records so far, and its end."""

    id: str
    session_id: str
    name: str
    args: list[str]
    cwd: str
    started_ms: int
    records: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    error: dict[str, str] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    ticket: ExecTicket | None = None

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        self.changed.set()


@dataclass
class State:
    """What the handlers share: the named sandboxes and the commands by session."""

    token: str
    names: dict[str, Named] = field(default_factory=dict)
    by_session: dict[str, str] = field(default_factory=dict)  # session id -> name
    commands: dict[str, dict[str, Command]] = field(default_factory=dict)
    waits: dict[str, list[asyncio.Future[SimSandbox]]] = field(default_factory=dict)

    def changed(self, sb: SimSandbox) -> None:
        if sb.status is SandboxStatus.RUNNING or not sb.active:
            for future in self.waits.pop(sb.id, ()):
                if not future.done():
                    future.set_result(sb)
        if not sb.active:
            self.commands.pop(sb.id, None)

    async def running(self, sb: SimSandbox) -> SimSandbox:
        """The sandbox once it runs or ends."""
        if sb.status is SandboxStatus.RUNNING or not sb.active:
            return sb
        future: asyncio.Future[SimSandbox] = asyncio.get_running_loop().create_future()
        self.waits.setdefault(sb.id, []).append(future)
        return await future


STATE = web.AppKey("vercel_state", State)
