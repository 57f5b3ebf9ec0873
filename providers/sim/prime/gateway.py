"""The Prime-like sandbox gateway: per-sandbox tokens and `POST {gateway_url}/{user_ns}/{job_id}/exec`.

Prime splits the control plane (REST under /api/v1) from the gateway that runs commands. The gateway
is reached with a short-lived token from `POST /api/v1/sandbox/{id}/auth` (or the `gatewayAuth` of the
create response). This module speaks the REST exec shape of prime-sandboxes 0.2.x (research providers.md
section 2.3): 401 for a bad token, 408 on command timeout, 409 while the sandbox is not running yet,
502 `{"error": "sandbox_not_found"}` once it is gone or died during the command.

prime-sandboxes 0.5.x speaks ConnectRPC (`command_session.CommandSession/Start`, a server stream) at the
same base URL instead: command_session.py serves it on the same `GatewayTokens`.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from providers.sim.core.serving.bearer import bearer_matches
from providers.sim.core.simulator import (
    ExecError,
    ExecTimedOut,
    NotFound,
    NotRunning,
    SandboxDied,
    SandboxStatus,
    SimSandbox,
    VendorSimulator,
)
from providers.sim.prime.wire_faults import GATEWAY_DEATH, reset

GATEWAY_PREFIX = "/gateway"
DEFAULT_USER_NS = "stampede"
TOKEN_TTL_S = 3600.0  # real seconds
DEFAULT_EXEC_TIMEOUT_S = 300.0  # the SDK's default command timeout
MAX_EXEC_TIMEOUT_S = 10**9  # vendor seconds; above it a 422 (a huge integer would not even become a float)


@dataclass(frozen=True, slots=True)
class GatewayToken:
    token: str
    sandbox_id: str
    user_ns: str
    expires_at: float  # epoch seconds (real)


class GatewayTokens:
    """Tokens the gateway accepts, one per sandbox (reissued once expired)."""

    def __init__(self, ttl_s: float = TOKEN_TTL_S, user_ns: str = DEFAULT_USER_NS) -> None:
        self.ttl_s = ttl_s
        self.user_ns = user_ns
        self._by_job: dict[str, GatewayToken] = {}

    def issue(self, sandbox_id: str) -> GatewayToken:
        current = self._by_job.get(sandbox_id)
        if current is not None and current.expires_at - time.time() > 60.0:
            return current
        token = GatewayToken(
            token=secrets.token_urlsafe(24),
            sandbox_id=sandbox_id,
            user_ns=self.user_ns,
            expires_at=time.time() + self.ttl_s,
        )
        self._by_job[sandbox_id] = token
        return token

    def forget(self, sandbox: SimSandbox, row: dict[str, Any]) -> None:
        """The simulator pruned an ended sandbox (a prune listener): its token goes with it."""
        self._by_job.pop(sandbox.id, None)

    def check(self, user_ns: str, job_id: str, authorization: str | None) -> bool:
        known = self._by_job.get(job_id)
        if known is None or known.user_ns != user_ns or known.expires_at <= time.time():
            return False
        return bearer_matches(authorization, known.token)

    def auth_body(self, token: GatewayToken, base_url: str) -> dict[str, Any]:
        """The `/auth` response / `gatewayAuth` object the SDK caches."""
        expires = datetime.fromtimestamp(token.expires_at, tz=UTC).isoformat().replace("+00:00", "Z")
        return {
            "token": token.token,
            "gateway_url": f"{base_url}{GATEWAY_PREFIX}",
            "user_ns": token.user_ns,
            "job_id": token.sandbox_id,
            "expires_at": expires,
        }


def _sandbox_gone(message: str) -> web.Response:
    return web.json_response({"error": "sandbox_not_found", "detail": f"Sandbox not found: {message}"}, status=502)


def exec_handler(
    get_sim: Callable[[web.Request], VendorSimulator], get_tokens: Callable[[web.Request], GatewayTokens]
) -> Callable[[web.Request], Any]:
    """Build the handler of `POST /gateway/{user_ns}/{job_id}/exec`."""

    async def handle(request: web.Request) -> web.Response:
        user_ns = request.match_info["user_ns"]
        job_id = request.match_info["job_id"]
        if not get_tokens(request).check(user_ns, job_id, request.headers.get("Authorization")):
            return web.json_response({"detail": "Invalid or expired gateway token"}, status=401)
        try:
            body = await request.json()
        except ValueError:
            return _invalid([{"type": "json_invalid", "loc": ["body"], "msg": "JSON decode error", "input": None}])
        if not isinstance(body, dict):
            return _invalid(
                [
                    {
                        "type": "dict_type",
                        "loc": ["body"],
                        "msg": "Input should be a valid dictionary",
                        "input": body,
                    }
                ]
            )
        errors: list[dict[str, Any]] = []
        command = body.get("command")
        if not isinstance(command, str):
            errors.append(
                _err(
                    body,
                    "command",
                    "string_type",
                    "Input should be a valid string",
                    missing="command" not in body,
                )
            )
        timeout = body.get("timeout", DEFAULT_EXEC_TIMEOUT_S)
        if timeout is None:
            timeout = DEFAULT_EXEC_TIMEOUT_S
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_EXEC_TIMEOUT_S:
            msg = f"Input should be a positive number of at most {MAX_EXEC_TIMEOUT_S} seconds"
            errors.append(_err(body, "timeout", "greater_than", msg))
        cwd = body.get("working_dir")
        if cwd is not None and not isinstance(cwd, str):
            errors.append(_err(body, "working_dir", "string_type", "Input should be a valid string"))
        env = body.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            errors.append(_err(body, "env", "dict_type", "Input should be a valid dictionary of strings"))
        sandbox_id = body.get("sandbox_id", job_id)
        if sandbox_id not in (None, job_id):
            errors.append(_err(body, "sandbox_id", "value_error", "sandbox_id does not match the job of this token"))
        if errors:
            return _invalid(errors)
        assert isinstance(command, str)
        sim = get_sim(request)
        if request.get(GATEWAY_DEATH):
            return await _die_mid_exec(request, sim, job_id, command, float(timeout))
        try:
            outcome = await sim.exec(job_id, command, timeout_s=float(timeout), env=env, cwd=cwd)
        except NotFound:
            return _sandbox_gone("unknown sandbox")
        except NotRunning as exc:
            if exc.status in (SandboxStatus.PENDING, SandboxStatus.PROVISIONING):
                return web.json_response({"detail": "Sandbox is not running"}, status=409)
            return _sandbox_gone(exc.message or exc.status)
        except ExecTimedOut:
            return web.json_response({"detail": f"Command timed out after {timeout:g} seconds"}, status=408)
        except SandboxDied as exc:
            return _sandbox_gone(exc.message)
        except ExecError as exc:
            return web.json_response({"detail": f"Gateway error: {exc.message}"}, status=503)
        return web.json_response({"stdout": outcome.stdout, "stderr": outcome.stderr, "exit_code": outcome.exit_code})

    return handle


async def _die_mid_exec(
    request: web.Request, sim: VendorSimulator, job_id: str, command: str, timeout: float
) -> web.Response:
    """An injected gateway death: the command runs, the connection drops before its answer."""
    with contextlib.suppress(Exception):
        await sim.exec(job_id, command, timeout_s=timeout)
    reset(request)
    return web.Response(status=204)  # never written: the connection is gone


def _err(body: dict[str, Any], name: str, kind: str, msg: str, *, missing: bool = False) -> dict[str, Any]:
    if missing:
        return {"type": "missing", "loc": ["body", name], "msg": "Field required", "input": body}
    return {"type": kind, "loc": ["body", name], "msg": msg, "input": body.get(name)}


def _invalid(errors: list[dict[str, Any]]) -> web.Response:
    return web.json_response({"detail": errors}, status=422)
