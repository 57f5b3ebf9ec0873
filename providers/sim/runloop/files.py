"""Files on a local Runloop devbox's own tree: `upload_file` (multipart), `write_file_contents`, `download_file`,
`read_file_contents`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import BodyPartReader, web

from providers.sim.core.records import NotFound, NotRunning
from providers.sim.core.sandbox_state.sandbox_tree import SandboxPathError
from providers.sim.core.transfers import TransferRefused
from providers.sim.runloop.state import Front, error, front_of, read_json


def _tree_path(front: Front, request: web.Request, path: str, *, write: bool) -> Any:
    tree = front.sim.tree(request.match_info["id"])
    return tree.writable(path) if write else tree.host_path(path)


# a file the vendor refuses (`transfers.py`): 413 for one over the size cap, 503 for one too many in flight, 500 for
# one it failed part-way; the SDK raises its APIStatusError with the status, an upload's or download's
# `transfer_error`
_REFUSED_STATUS = {"file_too_large": 413, "too_many_transfers": 503, "transfer_failed": 500}


async def _moved(front: Front, request: web.Request, direction: str, nbytes: int) -> None:
    """A file takes its time over the profile's bandwidth (`VendorSimulator.transfer`) before the API answers."""
    await front.sim.transfer(request.match_info["id"], direction, nbytes)


async def _files_call(request: web.Request, act: Callable[[Front], Any]) -> web.Response:
    front = front_of(request)
    try:
        return await act(front)
    except NotFound:
        return error(request, 404, f"Devbox {request.match_info['id']} not found")
    except NotRunning as exc:
        return error(request, 400, f"Devbox {exc.sandbox_id} is not running (status: {exc.status})")
    except SandboxPathError as exc:
        return error(request, 400, str(exc))
    except FileNotFoundError:
        return error(request, 404, "File not found")
    except IsADirectoryError:
        return error(request, 400, "Path is a directory")
    except TransferRefused as exc:
        return error(request, _REFUSED_STATUS[exc.reason], exc.message)


async def upload_file(request: web.Request) -> web.Response:
    fields: dict[str, Any] = {}
    reader = await request.multipart()
    async for part in reader:
        if not isinstance(part, BodyPartReader):
            continue
        if part.name == "file":
            fields["file"] = await part.read()
        elif part.name == "path":
            fields["path"] = await part.text()
    if "path" not in fields or "file" not in fields:
        return error(request, 400, "path and file are required")

    async def act(front: Front) -> web.Response:
        target = _tree_path(front, request, fields["path"], write=True)
        await _moved(front, request, "upload", len(fields["file"]))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(bytes(fields["file"]))
        return web.json_response({})

    return await _files_call(request, act)


async def write_file_contents(request: web.Request) -> web.Response:
    body = await read_json(request)
    path, contents = body.get("file_path"), body.get("contents")
    if not isinstance(path, str) or not isinstance(contents, str):
        return error(request, 400, "file_path and contents are required")

    async def act(front: Front) -> web.Response:
        target = _tree_path(front, request, path, write=True)
        data = contents.encode()
        await _moved(front, request, "upload", len(data))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return web.json_response({"devbox_id": request.match_info["id"], "exit_status": 0, "stdout": "", "stderr": ""})

    return await _files_call(request, act)


async def download_file(request: web.Request) -> web.Response:
    body = await read_json(request)
    path = body.get("path")
    if not isinstance(path, str):
        return error(request, 400, "path is required")

    async def act(front: Front) -> web.Response:
        data = _tree_path(front, request, path, write=False).read_bytes()
        await _moved(front, request, "download", len(data))
        return web.Response(body=data, content_type="application/octet-stream")

    return await _files_call(request, act)


async def read_file_contents(request: web.Request) -> web.Response:
    body = await read_json(request)
    path = body.get("file_path")
    if not isinstance(path, str):
        return error(request, 400, "file_path is required")

    async def act(front: Front) -> web.Response:
        data = _tree_path(front, request, path, write=False).read_bytes()
        await _moved(front, request, "download", len(data))
        text = data.decode(errors="replace")
        return web.Response(text=text, content_type="text/plain")

    return await _files_call(request, act)
