"""Files in a local Vercel Sandbox session, on the sandbox's own tree: write (a gzip tar relative to `x-cwd`), read,
mkdir."""

from __future__ import annotations

import gzip
import io
import tarfile
from typing import Any

from aiohttp import web

from providers.sim.core.sandbox_state.sandbox_tree import SandboxPathError, SandboxTree
from providers.sim.core.serving.listening import SIMULATOR
from providers.sim.core.simulator import NotFound, NotRunning, TransferRefused
from providers.sim.vercel.sessions import running_session
from providers.sim.vercel.shapes import USER, bad_request, error, read_json

# a file the vendor refuses (`transfers.py`): 413 for one over the size cap, 503 for one too many in flight; the SDK
# raises its SandboxApiError with the status, which the adapter reads as an upload's or download's `transfer_error`
_REFUSED = {
    "file_too_large": (413, "file_too_large"),
    "too_many_transfers": (503, "too_many_transfers"),
    "transfer_failed": (500, "internal_server_error"),  # a file the vendor failed part-way
}


def _refused(exc: TransferRefused) -> web.Response:
    status, code = _REFUSED[exc.reason]
    return error(status, code, exc.message)


async def write_files(request: web.Request) -> web.Response:
    found = running_session(request)
    if isinstance(found, web.Response):
        return found
    sim = request.app[SIMULATOR]
    tree = sim.tree(found[1])
    cwd = request.headers.get("x-cwd") or USER.home
    raw = await request.read()
    try:
        archive = tarfile.open(fileobj=io.BytesIO(gzip.decompress(raw)), mode="r:")
        members = archive.getmembers()
        for member in members:  # each file over the profile's bandwidth before it lands (`VendorSimulator.transfer`)
            if member.isfile():
                await sim.transfer(found[1], "upload", member.size)
            if member.isdir():
                tree.writable(member.name, cwd=cwd).mkdir(parents=True, exist_ok=True)
                continue
            if not member.isfile():
                continue
            target = tree.writable(member.name, cwd=cwd)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = archive.extractfile(member)
            target.write_bytes(data.read() if data is not None else b"")
            target.chmod(member.mode & 0o7777 or 0o644)
    except TransferRefused as exc:
        return _refused(exc)
    except (NotFound, NotRunning):
        return error(410, "sandbox_stopped", f"Session {found[1]!r} is not running")
    except (OSError, EOFError, tarfile.TarError) as exc:
        if isinstance(exc, SandboxPathError):
            return error(403, "permission_denied", str(exc))
        return bad_request(f"the body is not a gzip tar archive: {exc}")
    return web.json_response({})


async def _asked_path(request: web.Request) -> tuple[SandboxTree, str, dict[str, Any], str] | web.Response:
    """The running session's tree, the body's `path`, the body and the session's id (what `fs/read` and `fs/mkdir`
    start with)."""
    found = running_session(request)
    if isinstance(found, web.Response):
        return found
    body = await read_json(request)
    path = body.get("path")
    if not isinstance(path, str) or not path:
        return bad_request("path is required")
    return request.app[SIMULATOR].tree(found[1]), path, body, found[1]


async def read_file(request: web.Request) -> web.StreamResponse:
    asked = await _asked_path(request)
    if isinstance(asked, web.Response):
        return asked
    tree, path, body, session_id = asked
    try:
        data = tree.host_path(path, cwd=body.get("cwd") or USER.home).read_bytes()
    except FileNotFoundError:
        return error(404, "file_not_found", f"File not found: {path}")
    except IsADirectoryError:
        return bad_request(f"{path} is a directory")
    except OSError as exc:
        return error(403, "permission_denied", str(exc))
    try:
        await request.app[SIMULATOR].transfer(session_id, "download", len(data))
    except TransferRefused as exc:
        return _refused(exc)
    except (NotFound, NotRunning):
        return error(410, "sandbox_stopped", "Session is not running")
    return web.Response(body=data, content_type="application/octet-stream")


async def make_directory(request: web.Request) -> web.Response:
    asked = await _asked_path(request)
    if isinstance(asked, web.Response):
        return asked
    tree, path, body, _ = asked
    try:
        tree.writable(path, cwd=body.get("cwd") or USER.home).mkdir(
            parents=body.get("recursive", True) is not False, exist_ok=True
        )
    except FileNotFoundError:
        return error(404, "not_found", f"Parent directory of {path} not found")
    except OSError as exc:
        return error(403, "permission_denied", str(exc))
    return web.json_response({})
