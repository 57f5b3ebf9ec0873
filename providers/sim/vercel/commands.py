"""Commands in a local Vercel Sandbox session: `POST …/cmd` (NDJSON with `wait=true`), a command's get, its logs
as NDJSON, the session's list, kill."""

from __future__ import annotations

import json
import math
import secrets
import shlex
from typing import Any

from aiohttp import web

from providers.sim.core.serving.listening import SIMULATOR
from providers.sim.core.simulator import ExecError, ExecOutcome, ExecTimedOut, NotFound, NotRunning, SandboxDied
from providers.sim.vercel.sessions import find_session, running_session
from providers.sim.vercel.shapes import USER, bad_request, command_body, error, not_found, now_ms, read_json
from providers.sim.vercel.state import STATE, Command


def _start_command(request: web.Request, session_id: str, body: dict[str, Any]) -> Command | web.Response:
    state, sim = request.app[STATE], request.app[SIMULATOR]
    name, args = body.get("command"), body.get("args") or []
    if not isinstance(name, str) or not name or not isinstance(args, list):
        return bad_request("command must be a non-empty string and args a list of strings")
    cwd = body.get("cwd") or USER.home
    env = body.get("env") or {}
    timeout_ms = body.get("timeout")
    timeout_s = math.inf if not isinstance(timeout_ms, int) else timeout_ms / 1000 / sim.clock.time_scale
    cmd = Command(
        id=f"cmd_{secrets.token_hex(12)}",
        session_id=session_id,
        name=name,
        args=[str(a) for a in args],
        cwd=str(cwd),
        started_ms=now_ms(),
    )

    def out(stream: str) -> Any:
        return lambda data: cmd.add({"stream": stream, "data": data.decode(errors="replace")})

    def done(result: ExecOutcome | BaseException) -> None:
        if isinstance(result, ExecOutcome):
            if cmd.ticket is None or cmd.ticket.process is None:  # a modelled command: its output comes now
                if result.stdout:
                    cmd.add({"stream": "stdout", "data": result.stdout})
                if result.stderr:
                    cmd.add({"stream": "stderr", "data": result.stderr})
            cmd.exit_code = result.exit_code
        elif isinstance(result, ExecTimedOut):
            cmd.exit_code = 137  # killed at its timeout
        elif isinstance(result, SandboxDied):
            cmd.error = {"code": "sandbox_stopped", "message": f"The sandbox stopped: {result.message}"}
        elif isinstance(result, ExecError):
            cmd.error = {"code": "internal_error", "message": result.message}
        else:
            cmd.error = {"code": "internal_error", "message": str(result)}
        cmd.ended.set()
        cmd.changed.set()

    try:
        cmd.ticket = sim.exec_start(
            session_id,
            shlex.join([cmd.name, *cmd.args]),
            timeout_s=timeout_s,
            on_done=done,
            env={str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else None,
            cwd=cmd.cwd,
            on_stdout=out("stdout"),
            on_stderr=out("stderr"),
        )
    except (NotFound, NotRunning):
        return error(410, "sandbox_stopped", f"Session {session_id!r} is not running")
    state.commands.setdefault(session_id, {})[cmd.id] = cmd
    return cmd


async def _stream(request: web.Request, cmd: Command, *, with_command: bool) -> web.StreamResponse:
    """NDJSON: the command (when `with_command`), its output as it comes, its end."""
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await response.prepare(request)

    async def line(record: dict[str, Any]) -> None:
        await response.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")

    if with_command:
        await line({"command": command_body(cmd)})
    sent = 0
    while True:
        cmd.changed.clear()
        while sent < len(cmd.records):
            await line(cmd.records[sent])
            sent += 1
        if cmd.ended.is_set():
            break
        await cmd.changed.wait()
    if cmd.error is not None:
        await line({"stream": "error", "data": cmd.error})
    elif with_command:
        await line({"command": command_body(cmd)})
    await response.write_eof()
    return response


async def run_command(request: web.Request) -> web.StreamResponse:
    found = running_session(request)
    if isinstance(found, web.Response):
        return found
    body = await read_json(request)
    cmd = _start_command(request, found[1], body)
    if isinstance(cmd, web.Response):
        return cmd
    if request.query.get("wait") == "true" or body.get("wait") is True:
        return await _stream(request, cmd, with_command=True)
    return web.json_response({"command": command_body(cmd)})


def _command(request: web.Request) -> Command | web.Response:
    session_id, command_id = request.match_info["session_id"], request.match_info["command_id"]
    cmd = request.app[STATE].commands.get(session_id, {}).get(command_id)
    return not_found(f"Command {command_id!r}") if cmd is None else cmd


async def get_command(request: web.Request) -> web.Response:
    cmd = _command(request)
    if isinstance(cmd, web.Response):
        return cmd
    if request.query.get("wait") == "true":
        await cmd.ended.wait()
    if cmd.error is not None:
        return error(410, cmd.error["code"], cmd.error["message"])
    return web.json_response({"command": command_body(cmd)})


async def command_logs(request: web.Request) -> web.StreamResponse:
    cmd = _command(request)
    if isinstance(cmd, web.Response):
        return cmd
    return await _stream(request, cmd, with_command=False)


async def list_commands(request: web.Request) -> web.Response:
    found = find_session(request)
    if isinstance(found, web.Response):
        return found
    commands = request.app[STATE].commands.get(found[1], {}).values()
    return web.json_response({"commands": [command_body(c) for c in commands]})


async def kill_command(request: web.Request) -> web.Response:
    cmd = _command(request)
    if isinstance(cmd, web.Response):
        return cmd
    if cmd.ticket is not None and not cmd.ended.is_set():
        if cmd.ticket.process is not None:
            cmd.ticket.process.kill()
        else:
            cmd.ticket.cancel()
            cmd.exit_code = 137
            cmd.ended.set()
            cmd.changed.set()
    return web.json_response({"command": command_body(cmd)})
