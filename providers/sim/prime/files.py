"""The Prime-like gateway's file routes, on each simulated sandbox's own file tree.

prime-sandboxes 0.5.1 moves files through the same gateway as commands, with the same per-sandbox token:
- `POST {gateway_url}/{user_ns}/{job_id}/upload?path=&sandbox_id=`, a multipart form whose `file` part is the
  content (`upload_file`, `upload_bytes`), answered `FileUploadResponse` (`success`, `path`, `size`, `timestamp`);
- `GET .../download?path=&sandbox_id=`, the raw bytes (`download_file`);
- `GET .../read-file?path=&offset=&length=`, `ReadFileResponse` (`content` as text, `size`, `total_size`,
  `offset`, `truncated`: a byte window of the file, `read_file`).
Paths are the sandbox's (a relative one is relative to root's home, `/root`: Prime's sandboxes run as root).
Errors, in the gateway's shapes: 401 a bad token; 409 while the sandbox is not running yet; 410
`{"error": "sandbox_terminated"}` once it ended (the SDK raises `SandboxNotRunningError`); 404 a missing file,
400 a folder where a file was asked for, 403 a write under the host's read-only system folders. The SDK turns
the last three into its `APIError` with the status and our detail.
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from providers.sim.core.sandbox_state.sandbox_tree import SandboxTree
from providers.sim.core.simulator import NotFound, NotRunning, SandboxStatus, TransferRefused, VendorSimulator
from providers.sim.prime.gateway import GatewayTokens

_STATUS_BY_ERRNO = {
    errno.ENOENT: 404,
    errno.EISDIR: 400,
    errno.ENOTDIR: 400,
    errno.EINVAL: 400,
    errno.ENAMETOOLONG: 400,
    errno.ELOOP: 400,
    errno.EROFS: 403,
    errno.EACCES: 403,
}
Getter = Callable[[web.Request], Any]
MAX_OFFSET = 2**62  # a larger seek does not fit the host's off_t
UPLOAD_CHUNK_BYTES = 256 * 1024  # an upload's bytes are written through in pieces of at most this


def add_file_routes(router: web.UrlDispatcher, prefix: str, get_sim: Getter, get_tokens: Getter) -> None:
    """Register upload, download and read-file under the gateway prefix."""
    base = f"{prefix}/{{user_ns}}/{{job_id}}"
    router.add_post(f"{base}/upload", _guarded(get_sim, get_tokens, _upload))
    router.add_get(f"{base}/download", _guarded(get_sim, get_tokens, _download))
    router.add_get(f"{base}/read-file", _guarded(get_sim, get_tokens, _read_file))


Operation = Callable[[web.Request, SandboxTree, str], Any]
# the sandbox's `VendorSimulator.transfer`, bound to its id (a file handler awaits it before it answers)
_MOVER: web.RequestKey[Callable[[str, int], Awaitable[float]]] = web.RequestKey("stampede_sim_move")
# a file the vendor refuses (`transfers.py`): 413 for one over the size cap, 503 for one too many in flight, 500 for
# one it failed part-way; the SDK raises its APIError with the status, an upload's or download's `transfer_error`
_REFUSED_STATUS = {"file_too_large": 413, "too_many_transfers": 503, "transfer_failed": 500}


def _mover(sim: VendorSimulator, sandbox_id: str) -> Callable[[str, int], Awaitable[float]]:
    """`VendorSimulator.transfer` bound to one sandbox (what a file handler awaits before it answers)."""

    async def move(direction: str, nbytes: int) -> float:
        return await sim.transfer(sandbox_id, direction, nbytes)

    return move


async def _moved(request: web.Request, direction: str, nbytes: int) -> None:
    """A file takes its time over the profile's bandwidth before the gateway answers (TransferRefused past a cap)."""
    move = request.get(_MOVER)
    if move is not None:
        await move(direction, nbytes)


def _guarded(get_sim: Getter, get_tokens: Getter, operation: Operation) -> Callable[[web.Request], Any]:
    """Token, sandbox state and path checks shared by the three routes; file errors in the gateway's shapes."""

    async def handle(request: web.Request) -> web.StreamResponse:
        user_ns, job_id = request.match_info["user_ns"], request.match_info["job_id"]
        tokens: GatewayTokens = get_tokens(request)
        if not tokens.check(user_ns, job_id, request.headers.get("Authorization")):
            return web.json_response({"detail": "Invalid or expired gateway token"}, status=401)
        path = request.query.get("path")
        if not path or "\x00" in path:
            return web.json_response({"detail": "Query parameter 'path' is required, without NUL"}, status=422)
        sim: VendorSimulator = get_sim(request)
        try:
            tree = sim.tree(job_id)
        except NotFound:
            return _terminated("unknown sandbox")
        except NotRunning as exc:
            if exc.status in (SandboxStatus.PENDING, SandboxStatus.PROVISIONING):
                return web.json_response({"detail": "Sandbox is not running"}, status=409)
            return _terminated(exc.message or str(exc.status))
        request[_MOVER] = _mover(sim, job_id)
        try:
            response: web.StreamResponse = await operation(request, tree, path)
        except TransferRefused as exc:
            return web.json_response({"detail": exc.message}, status=_REFUSED_STATUS[exc.reason])
        except (NotFound, NotRunning) as exc:
            return _terminated(str(exc))
        except OSError as exc:
            status = _STATUS_BY_ERRNO.get(exc.errno or 0, 500)
            reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
            return web.json_response({"detail": f"{reason}: {tree.sandbox_path(path)}"}, status=status)
        return response

    return handle


def _terminated(message: str) -> web.Response:
    return web.json_response({"error": "sandbox_terminated", "detail": f"Sandbox terminated: {message}"}, status=410)


def _regular_file(tree: SandboxTree, path: str) -> str:
    host = tree.host_path(path)
    if host.is_dir():
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    if host.exists() and not host.is_file():  # a FIFO or device would block the gateway: not a file to read
        raise OSError(errno.EINVAL, "Not a regular file", path)
    return str(host)


async def _upload(request: web.Request, tree: SandboxTree, path: str) -> web.Response:
    """The `file` part streamed to a hidden file beside the sandbox's tree as it arrives, moved into place once the
    transfer's modelled time passed: the gateway holds one chunk of a form, not the form (960 rollouts uploading a
    20 MB repository at once held 19 GB when each form was read whole first)."""
    if not request.content_type.startswith("multipart/"):
        return web.json_response({"detail": "Expected a multipart form with a 'file' part"}, status=422)
    tree.writable(path)  # the host's system folders are read-only in the sandbox
    host = tree.host_path(path)  # a symlink is written through, inside the tree
    if host != tree.root and tree.root not in host.parents:
        raise PermissionError(errno.EROFS, "Read-only file system", path)
    if host.is_dir():
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    if host.is_symlink():  # a link left dangling or pointing out of the tree: not written through
        raise OSError(errno.ELOOP, "Too many levels of symbolic links", path)
    staged = tree.root.parent / f".upload-{uuid.uuid4().hex}"  # outside the sandbox's view, on its filesystem
    size: int | None = None
    try:
        try:
            with open(staged, "xb") as out:
                reader = await request.multipart()
                while (part := await reader.next()) is not None:
                    if getattr(part, "name", None) == "file":
                        size = 0
                        while chunk := await part.read_chunk(UPLOAD_CHUNK_BYTES):  # type: ignore[union-attr]
                            out.write(chunk)
                            size += len(chunk)
        except (HttpProcessingError, ValueError) as exc:  # a malformed form is the client's error
            return web.json_response({"detail": f"The multipart form does not parse: {exc}"}, status=422)
        if size is None:
            return web.json_response({"detail": "The form has no 'file' part"}, status=422)
        await _moved(request, "upload", size)
        host.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, host)
    finally:
        staged.unlink(missing_ok=True)
    timestamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    body = {"success": True, "path": tree.sandbox_path(path), "size": size, "timestamp": timestamp}
    return web.json_response(body)


async def _download(request: web.Request, tree: SandboxTree, path: str) -> web.Response:
    with open(_regular_file(tree, path), "rb") as source:
        data = source.read()
    await _moved(request, "download", len(data))
    name = tree.sandbox_path(path).rsplit("/", 1)[-1]
    headers = {"Content-Disposition": f'attachment; filename="{name}"'}
    return web.Response(body=data, content_type="application/octet-stream", headers=headers)


async def _read_file(request: web.Request, tree: SandboxTree, path: str) -> web.Response:
    try:
        offset = int(request.query.get("offset", 0))
        length = int(request.query["length"]) if "length" in request.query else None
    except ValueError:
        return web.json_response({"detail": "offset and length must be integers"}, status=422)
    if not -MAX_OFFSET <= offset <= MAX_OFFSET or (length is not None and not 0 <= length <= MAX_OFFSET):
        return web.json_response({"detail": f"offset must be within ±{MAX_OFFSET}, length 0..{MAX_OFFSET}"}, status=422)
    with open(_regular_file(tree, path), "rb") as source:
        total = os.fstat(source.fileno()).st_size
        start = offset if offset >= 0 else max(0, total + offset)  # negative: a window ending at the file's end
        source.seek(start)
        data = source.read() if length is None else source.read(length)
    await _moved(request, "download", len(data))
    body = {
        "content": data.decode("utf-8", "replace"),
        "size": len(data),
        "total_size": total,
        "offset": start,
        "truncated": start > 0 or start + len(data) < total,
    }
    return web.json_response(body)
