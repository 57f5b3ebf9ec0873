"""The sandbox router of the local agent-sandbox, as the legacy python-runtime answers it: `POST /execute`,
`POST /upload`, `GET /download|exists|list/{path}` on the sandbox's own file tree (paths relative to `/app`), the
sandbox named by `X-Sandbox-ID`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import BodyPartReader, web

from providers.sim.agent_sandbox.cluster import CLUSTER
from providers.sim.core.simulator import ExecError, ExecTimedOut, NotFound, NotRunning, SandboxDied, TransferRefused

EXEC_TIMEOUT_S = 60.0  # the legacy runtime's limit when the request names none


def _sandbox_id(request: web.Request) -> str | web.Response:
    """The simulator id of the sandbox `X-Sandbox-ID` names, or the router's 404."""
    name = request.headers.get("X-Sandbox-ID", "")
    sb_id = request.app[CLUSTER].sandbox_of.get(name)
    if sb_id is None:
        return web.json_response({"error": f"sandbox {name!r} not found"}, status=404)
    return sb_id


async def execute(request: web.Request) -> web.Response:
    """The router and the legacy python-runtime's `/execute`: `{command, timeout_seconds}` -> stdout, stderr,
    exit_code, timed_out."""
    cluster = request.app[CLUSTER]
    sb_id = _sandbox_id(request)
    if isinstance(sb_id, web.Response):
        return sb_id
    try:
        body = await request.json()
        command = str(body["command"])
        timeout = float(body.get("timeout_seconds") or EXEC_TIMEOUT_S)
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": "the body must be {command, timeout_seconds}"}, status=400)
    try:
        outcome = await cluster.sim.exec(sb_id, command, timeout_s=timeout)
    except ExecTimedOut:
        return web.json_response({"stdout": "", "stderr": "", "exit_code": -1, "timed_out": True})
    except (NotFound, NotRunning, SandboxDied) as exc:
        return web.json_response({"error": str(exc)}, status=502)
    except ExecError as exc:
        return web.json_response({"error": str(exc)}, status=503)
    return web.json_response(
        {"stdout": outcome.stdout, "stderr": outcome.stderr, "exit_code": outcome.exit_code, "timed_out": False}
    )


RUNTIME_CWD = "/app"  # the python-runtime's working directory: the SDK sends every file path relative to it


def _tree_of(request: web.Request) -> tuple[Any, web.Response | None]:
    """The file tree of the sandbox `X-Sandbox-ID` names, or the router's answer when there is none."""
    sb_id = _sandbox_id(request)
    if isinstance(sb_id, web.Response):
        return None, sb_id
    try:
        return request.app[CLUSTER].sim.tree(sb_id), None
    except (NotFound, NotRunning) as exc:
        return None, web.json_response({"error": str(exc)}, status=502)


# a file the vendor refuses (`transfers.py`): 413 for one over the size cap (an ingress's body limit), 503 for one
# too many in flight, 500 for one the runtime failed part-way; the SDK raises SandboxRequestError with the status, an
# upload's or download's `transfer_error`
_REFUSED_STATUS = {"file_too_large": 413, "too_many_transfers": 503, "transfer_failed": 500}


async def _moved(request: web.Request, direction: str, nbytes: int) -> web.Response | None:
    """A file takes its time over the profile's bandwidth (`VendorSimulator.transfer`) before the router answers;
    the router's refusal when the vendor refuses it."""
    sb_id = _sandbox_id(request)
    if isinstance(sb_id, web.Response):
        return sb_id
    try:
        await request.app[CLUSTER].sim.transfer(sb_id, direction, nbytes)
    except TransferRefused as exc:
        return web.json_response({"detail": exc.message}, status=_REFUSED_STATUS[exc.reason])
    except (NotFound, NotRunning) as exc:
        return web.json_response({"error": str(exc)}, status=502)
    return None


async def upload(request: web.Request) -> web.Response:
    """`POST /upload`: one multipart `file` part whose filename is the path (relative to the runtime's cwd)."""
    tree, refused = _tree_of(request)
    if refused is not None:
        return refused
    reader = await request.multipart()
    part = await reader.next()
    if part is None or not isinstance(part, BodyPartReader) or not part.filename:
        return web.json_response({"detail": "a multipart 'file' part with a filename is required"}, status=400)
    try:
        target = tree.writable(part.filename, cwd=RUNTIME_CWD)
        data = await part.read(decode=False)
        refused = await _moved(request, "upload", len(data))
        if refused is not None:
            return refused
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    except OSError as exc:
        return web.json_response({"detail": str(exc)}, status=500)
    return web.json_response({"message": f"File '{part.filename}' uploaded successfully"})


def _asked_path(request: web.Request) -> Path | web.Response:
    """The host path of the `{path}` the route names, in the sandbox `X-Sandbox-ID` names; or the router's answer."""
    tree, refused = _tree_of(request)
    if refused is not None:
        return refused
    path: Path = tree.host_path(request.match_info["path"], cwd=RUNTIME_CWD)
    return path


async def download(request: web.Request) -> web.StreamResponse:
    path = _asked_path(request)
    if isinstance(path, web.Response):
        return path
    if not path.is_file():
        return web.json_response({"detail": "File not found"}, status=404)
    data = path.read_bytes()
    refused = await _moved(request, "download", len(data))
    return refused or web.Response(body=data, content_type="application/octet-stream")


async def exists(request: web.Request) -> web.Response:
    path = _asked_path(request)
    if isinstance(path, web.Response):
        return path
    return web.json_response({"path": request.match_info["path"], "exists": path.exists()})


async def listing(request: web.Request) -> web.Response:
    path = _asked_path(request)
    if isinstance(path, web.Response):
        return path
    if not path.is_dir():
        return web.json_response({"detail": "Directory not found"}, status=404)
    entries = []
    for entry in sorted(path.iterdir()):
        info = entry.stat()
        kind = "directory" if entry.is_dir() else "file"
        entries.append({"name": entry.name, "size": info.st_size, "type": kind, "mod_time": info.st_mtime})
    return web.json_response(entries)
