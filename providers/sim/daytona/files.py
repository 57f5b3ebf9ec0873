"""Daytona's toolbox file system (`sandbox.fs` of daytona 0.226.1) on each sandbox's own file tree.

Every call works on `sim.tree(id)` (`providers/sim/core/sandbox_state/sandbox_tree.py`): the files a command writes are the ones
`download_file` reads, and the other way round. A relative path is relative to the work dir (`/home/daytona`).
Under `{toolboxProxyUrl}/{sandboxId}/files`:

- `POST /bulk-upload` (multipart `files[i].path` + `files[i].file`; parent folders made), `POST /upload` and
  `/upload-v2` (`?path`, multipart `file`);
- `GET /download?path` (the bytes), `POST /bulk-download` `{"paths"}` -> multipart/form-data: one `file` part per
  path (`filename` = the path as asked, `Content-Length` = its size, which the SDK's progress reads) or an `error`
  part (JSON `{message, statusCode, code}`) for a path that cannot be read;
- `GET /?path&depth` (list), `GET /info?path`, `GET /find?path&pattern` (lines whose text matches, as grep),
  `GET /search?path&pattern` (names matching a glob, recursively), `POST /replace` `{files, pattern, newValue}`,
  `POST /folder?path&mode`, `DELETE /?path&recursive`, `POST /move?source&destination`,
  `POST /permissions?path&mode&owner&group`.

`FileInfo`: `mode` as Go prints it (`-rw-r--r--`), `permissions` octal (`0644`), size and times from the host
file, owner and group the sandbox user (the host files are the simulator's, which is what the sandbox user is
mapped from), `root` for the host's read-only system folders. Errors are the daemon's envelope: a missing path
404, a read-only one 403, a folder where a file is needed 400, a name in use 409.

Symlinks are followed inside the tree only (`SandboxTree.host_path`); a write follows them too and lands inside
the tree or is refused: no file API call reaches a host file outside the sandbox's own folder.
"""

from __future__ import annotations

import errno
import fnmatch
import functools
import os
import re
import shutil
import stat
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import BodyPartReader, web
from aiohttp.typedefs import Handler

from providers.sim.core.sandbox_state.sandbox_tree import SandboxPathError, SandboxTree
from providers.sim.core.simulator import NotFound, NotRunning, SimSandbox, TransferRefused, VendorSimulator
from providers.sim.daytona.front import Front, error, json_object
from providers.sim.daytona.shapes import SOURCE_DAEMON
from providers.sim.daytona.toolbox import on_running

CHUNK = 64 * 1024
MAX_MATCHES = 10_000  # find: a bound on one answer, as grep piped to a page would be
MAX_GREP_BYTES = 16 * 2**20  # find skips larger files (and binary ones, as `grep -I`)
_ERRNO_STATUS = {
    errno.ENOENT: 404,
    errno.EACCES: 403,
    errno.EPERM: 403,
    errno.EROFS: 403,
    errno.EEXIST: 409,
    errno.ENOTEMPTY: 409,
    errno.EISDIR: 400,
    errno.ENOTDIR: 400,
    errno.ELOOP: 400,
    errno.EINVAL: 400,
}


class FileProblem(Exception):
    """A file call the daemon refuses: its status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _problem(exc: OSError, path: str) -> FileProblem:
    status = _ERRNO_STATUS.get(exc.errno or 0, 500)
    reason = exc.strerror or str(exc)
    if status == 404:
        return FileProblem(404, f"file not found: {path}")
    return FileProblem(status, f"{reason}: {path}")


def _answer(request: web.Request, exc: FileProblem) -> web.Response:
    return error(request, exc.status, exc.message, source=SOURCE_DAEMON)


# a file the vendor refuses (`transfers.py`): 413 for one over the size cap, 503 for one upload too many at once (the
# S3 path's "SlowDown"), 500 for one it failed part-way; the SDK raises a plain DaytonaError with that status, an
# upload's or download's error
_REFUSED_STATUS = {"file_too_large": 413, "too_many_transfers": 503, "transfer_failed": 500}
# the sandbox's `VendorSimulator.transfer`, bound to its id (a file handler awaits it before it answers)
_MOVER: web.RequestKey[Callable[[str, int], Awaitable[float]]] = web.RequestKey("stampede_sim_move")


def _mover(sim: VendorSimulator, sandbox_id: str) -> Callable[[str, int], Awaitable[float]]:
    """`VendorSimulator.transfer` bound to one sandbox (what a file handler awaits before it answers)."""

    async def move(direction: str, nbytes: int) -> float:
        return await sim.transfer(sandbox_id, direction, nbytes)

    return move


async def _moved(request: web.Request, direction: str, nbytes: int) -> None:
    """A file moving in or out takes its time over the profile's bandwidth before the daemon answers; a refused
    one is a FileProblem with the vendor's status."""
    move = request.get(_MOVER)
    if move is None:
        return
    try:
        await move(direction, nbytes)
    except TransferRefused as exc:
        raise FileProblem(_REFUSED_STATUS[exc.reason], exc.message) from None
    except (NotFound, NotRunning):
        raise FileProblem(404, "Sandbox not found") from None


def _on_tree(handler: Callable[[web.Request, SandboxTree], Awaitable[web.StreamResponse]]) -> Handler:
    """A handler on the running sandbox's own tree: the tree looked up first (the proxy's refusal answered as is),
    a FileProblem the handler raises answered in the daemon's envelope."""

    @functools.wraps(handler)
    async def on_tree(request: web.Request, front: Front, sb: SimSandbox) -> web.StreamResponse:
        try:
            tree = front.sim.tree(sb.id)
        except (NotFound, NotRunning):
            return error(request, 404, "Sandbox not found", source="DAYTONA_PROXY")
        request[_MOVER] = _mover(front.sim, sb.id)
        try:
            return await handler(request, tree)
        except FileProblem as exc:
            return _answer(request, exc)

    return on_running(on_tree)


def _query(request: web.Request, name: str) -> str:
    value = request.query.get(name)
    if not value:
        raise FileProblem(400, f"{name} is required")
    return value


# --- paths ---------------------------------------------------------------------------------------------


def _inside(tree: SandboxTree, host: Path, path: str) -> Path:
    """A host path that must be the tree's own (a write, a chmod): the host's system folders are read-only."""
    if not host.is_relative_to(tree.root):
        raise FileProblem(403, f"read-only file system: {path}")
    return host


def _no_nul(path: str) -> None:
    if "\x00" in path:
        raise FileProblem(400, "a path may not hold a NUL byte")


def _not_special(host: Path, path: str) -> None:
    """Reading or writing a FIFO or a device would block the front's loop: only regular files and folders."""
    if host.exists() and not host.is_symlink() and not (host.is_file() or host.is_dir()):
        raise FileProblem(400, f"not a regular file: {path}")


def _read_path(tree: SandboxTree, path: str) -> Path:
    _no_nul(path)
    try:
        return tree.host_path(path)
    except SandboxPathError as exc:
        raise _problem(exc, path) from exc


def _write_path(tree: SandboxTree, path: str, *, follow: bool = True) -> Path:
    """Where a write lands: symlinks followed inside the tree (not at all for the last part unless `follow`)."""
    _no_nul(path)
    try:
        tree.writable(path)
        host = tree.host_path(path, follow_last=follow)
    except SandboxPathError as exc:
        raise _problem(exc, path) from exc
    return _inside(tree, host, path)


def _write_file(tree: SandboxTree, path: str, chunks: Iterator[bytes] | None = None, data: bytes = b"") -> None:
    host = _write_path(tree, path)
    _not_special(host, path)
    try:
        host.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            for chunk in chunks or ():
                out.write(chunk)
    except OSError as exc:
        raise _problem(exc, path) from exc


# --- FileInfo ------------------------------------------------------------------------------------------


def _go_time(ts: float) -> str:
    """Go's `time.String()` layout, which `modTime` still carries."""
    moment = datetime.fromtimestamp(ts, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond * 1000:09d} +0000 UTC"


def file_info(tree: SandboxTree, sandbox_path: str, host: Path, *, follow: bool = True) -> dict[str, Any]:
    st = host.stat() if follow else host.lstat()
    owner = tree.user.name if host.is_relative_to(tree.root) else "root"
    moment = datetime.fromtimestamp(st.st_mtime, tz=UTC)
    return {
        "name": Path(sandbox_path).name or "/",
        "path": sandbox_path,
        "isDir": stat.S_ISDIR(st.st_mode),
        "size": st.st_size,
        "mode": stat.filemode(st.st_mode),
        "permissions": f"{stat.S_IMODE(st.st_mode):04o}",
        "owner": owner,
        "group": owner,
        "modTime": _go_time(st.st_mtime),
        "modifiedAt": moment.isoformat().replace("+00:00", "Z"),
    }


def _entries(tree: SandboxTree, path: str, depth: int) -> list[dict[str, Any]]:
    absolute = tree.sandbox_path(path)
    host = _read_path(tree, path)
    try:
        if not host.is_dir():
            raise (
                FileProblem(400, f"not a directory: {absolute}")
                if host.exists()
                else FileProblem(404, f"directory not found: {absolute}")
            )
        found: list[dict[str, Any]] = []
        for entry in sorted(host.iterdir(), key=lambda p: p.name):
            child = absolute.rstrip("/") + "/" + entry.name
            found.append(file_info(tree, child, entry, follow=False))
            if depth > 1 and entry.is_dir() and not entry.is_symlink():
                found.extend(_entries(tree, child, depth - 1))
        return found
    except OSError as exc:
        raise _problem(exc, absolute) from exc


# --- handlers ------------------------------------------------------------------------------------------


@_on_tree
async def list_files(request: web.Request, tree: SandboxTree) -> web.Response:
    try:
        depth = int(request.query.get("depth") or 1)
        return web.json_response(_entries(tree, request.query.get("path") or ".", max(1, depth)))
    except ValueError:
        return error(request, 400, "depth must be an integer", source=SOURCE_DAEMON)


@_on_tree
async def get_info(request: web.Request, tree: SandboxTree) -> web.Response:
    path = _query(request, "path")
    host = _read_path(tree, path)
    try:
        return web.json_response(file_info(tree, tree.sandbox_path(path), host))
    except OSError as exc:
        raise _problem(exc, path) from exc


@_on_tree
async def create_folder(request: web.Request, tree: SandboxTree) -> web.Response:
    path = _query(request, "path")
    try:
        mode = int(request.query.get("mode") or "755", 8)
    except ValueError:
        raise FileProblem(400, "mode must be an octal number such as 755") from None
    host = _write_path(tree, path)
    try:
        host.mkdir(parents=True, exist_ok=True)
        os.chmod(host, mode)
    except FileExistsError as exc:
        raise FileProblem(409, f"a file is in the way: {tree.sandbox_path(path)}") from exc
    except OSError as exc:
        raise _problem(exc, path) from exc
    return web.Response(status=201)


@_on_tree
async def delete(request: web.Request, tree: SandboxTree) -> web.Response:
    path = _query(request, "path")
    recursive = request.query.get("recursive", "false").lower() == "true"
    host = _write_path(tree, path, follow=False)
    if host == tree.root:
        raise FileProblem(403, "cannot delete /")
    try:
        if host.is_dir() and not host.is_symlink():
            if not recursive:
                raise FileProblem(400, f"cannot delete directory without recursive flag: {path}")
            shutil.rmtree(host)
        else:
            host.unlink()
    except OSError as exc:
        raise _problem(exc, path) from exc
    return web.Response(status=204)


@_on_tree
async def move(request: web.Request, tree: SandboxTree) -> web.Response:
    source, destination = _query(request, "source"), _query(request, "destination")
    src = _write_path(tree, source, follow=False)
    dst = _write_path(tree, destination, follow=False)
    if not src.exists() and not src.is_symlink():
        raise FileProblem(404, f"file not found: {source}")
    try:
        os.replace(src, dst)
    except OSError as exc:
        raise _problem(exc, destination) from exc
    return web.Response(status=200)


@_on_tree
async def set_permissions(request: web.Request, tree: SandboxTree) -> web.Response:
    path = _query(request, "path")
    host = _write_path(tree, path)
    for who in ("owner", "group"):
        name = request.query.get(who)
        if name and name not in (tree.user.name, "root"):
            raise FileProblem(400, f"unknown {who}: {name}")
    try:
        if request.query.get("mode"):
            os.chmod(host, int(request.query["mode"], 8))
        elif not host.exists():
            raise FileProblem(404, f"file not found: {path}")
    except ValueError:
        raise FileProblem(400, "mode must be an octal number such as 644") from None
    except OSError as exc:
        raise _problem(exc, path) from exc
    return web.Response(status=200)


def _walk(tree: SandboxTree, path: str) -> Iterator[tuple[str, Path]]:
    """(sandbox path, host path) of every regular file and folder under `path`, symlinks not followed."""
    absolute = tree.sandbox_path(path)
    host = _read_path(tree, path)
    if not host.exists():
        raise FileProblem(404, f"directory not found: {absolute}")
    if not host.is_dir():
        yield absolute, host
        return
    for folder, dirs, files in os.walk(host):
        dirs.sort()
        relative = os.path.relpath(folder, host)
        base = absolute if relative == "." else absolute.rstrip("/") + "/" + relative
        for name in sorted(dirs + files):
            yield base.rstrip("/") + "/" + name, Path(folder) / name


@_on_tree
async def find_in_files(request: web.Request, tree: SandboxTree) -> web.Response:
    path, pattern = _query(request, "path"), _query(request, "pattern")
    try:
        wanted = re.compile(pattern)
    except re.error:
        wanted = re.compile(re.escape(pattern))
    matches: list[dict[str, Any]] = []
    for sandbox_path, host in _walk(tree, path):
        if host.is_symlink() or not host.is_file() or host.stat().st_size > MAX_GREP_BYTES:
            continue
        data = host.read_bytes()
        if b"\0" in data:
            continue  # binary, as grep -I
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
            if wanted.search(line):
                matches.append({"file": sandbox_path, "line": number, "content": line})
        if len(matches) >= MAX_MATCHES:
            break
    return web.json_response(matches[:MAX_MATCHES])


@_on_tree
async def search_files(request: web.Request, tree: SandboxTree) -> web.Response:
    path, pattern = _query(request, "path"), _query(request, "pattern")
    found = [p for p, _host in _walk(tree, path) if fnmatch.fnmatchcase(p.rsplit("/", 1)[-1], pattern)]
    return web.json_response({"files": found})


@_on_tree
async def replace_in_files(request: web.Request, tree: SandboxTree) -> web.Response:
    body = await json_object(request)
    files = body.get("files") if isinstance(body, dict) else None
    pattern = body.get("pattern") if isinstance(body, dict) else None
    new_value = body.get("newValue", "") if isinstance(body, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files) or not isinstance(pattern, str):
        return error(request, 400, "files (a list of paths) and pattern are required", source=SOURCE_DAEMON)
    if not isinstance(new_value, str):
        return error(request, 400, "newValue must be a string", source=SOURCE_DAEMON)
    results: list[dict[str, Any]] = []
    for path in files:
        try:
            host = _write_path(tree, path)
            _not_special(host, path)
            try:
                text = host.read_text(encoding="utf-8", errors="surrogateescape")
                host.write_text(text.replace(pattern, new_value), encoding="utf-8", errors="surrogateescape")
            except OSError as exc:
                raise _problem(exc, path) from exc
            results.append({"file": path, "success": True, "error": None})
        except FileProblem as exc:
            results.append({"file": path, "success": False, "error": exc.message})
    return web.json_response(results)


@_on_tree
async def download(request: web.Request, tree: SandboxTree) -> web.StreamResponse:
    path = _query(request, "path")
    host = _regular_file(tree, path)
    await _moved(request, "download", host.stat().st_size)
    return web.FileResponse(host, headers={"Content-Type": "application/octet-stream"})


def _regular_file(tree: SandboxTree, path: str) -> Path:
    host = _read_path(tree, path)
    if host.is_dir():
        raise FileProblem(400, f"path is a directory: {path}")
    if not host.is_file():
        raise FileProblem(404, f"file not found: {path}")
    return host


def _disposition(name: str, path: str) -> str:
    quoted = path.replace("\\", "\\\\").replace('"', '\\"')
    return f'form-data; name="{name}"; filename="{quoted}"'


@_on_tree
async def bulk_download(request: web.Request, tree: SandboxTree) -> web.StreamResponse:
    body = await json_object(request)
    paths = body.get("paths") if isinstance(body, dict) else None
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        return error(request, 400, "paths must be a non-empty list of strings", source=SOURCE_DAEMON)
    boundary = os.urandom(12).hex()
    response = web.StreamResponse(headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    await response.prepare(request)
    for path in paths:
        try:
            host = _regular_file(tree, path)
            size = host.stat().st_size
            await _moved(request, "download", size)
            head = (
                f"--{boundary}\r\nContent-Disposition: {_disposition('file', path)}\r\n"
                f"Content-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\n"
            )
            await response.write(head.encode())
            with host.open("rb") as source:
                while chunk := source.read(CHUNK):
                    await response.write(chunk)
            await response.write(b"\r\n")
        except (FileProblem, OSError) as exc:
            problem = exc if isinstance(exc, FileProblem) else _problem(exc, path)
            payload = web.json_response(
                {"message": problem.message, "statusCode": problem.status, "code": _code(problem.status)}
            ).body
            assert isinstance(payload, bytes)
            head = (
                f"--{boundary}\r\nContent-Disposition: {_disposition('error', path)}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
            )
            await response.write(head.encode() + payload + b"\r\n")
    await response.write(f"--{boundary}--\r\n".encode())
    await response.write_eof()
    return response


def _code(status: int) -> str:
    return {400: "BAD_REQUEST", 403: "FORBIDDEN", 404: "FILE_NOT_FOUND", 409: "CONFLICT"}.get(status, "INTERNAL_ERROR")


@_on_tree
async def bulk_upload(request: web.Request, tree: SandboxTree) -> web.Response:
    if not request.content_type.startswith("multipart/"):
        return error(request, 400, "expected multipart/form-data", source=SOURCE_DAEMON)
    reader = await request.multipart()
    destinations: dict[str, str] = {}
    pending: dict[str, bytes] = {}  # a file part that came before its path (httpx sends paths first)
    written: list[str] = []
    errors: list[str] = []
    pattern = re.compile(r"files\[(\d+)\]\.(path|file)")
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            continue
        found = pattern.fullmatch(part.name or "")
        if found is None:
            await part.release()
            continue
        index, kind = found.groups()
        if kind == "path":
            destinations[index] = (await part.text()).strip()
            if index in pending:
                await _store(request, tree, destinations[index], pending.pop(index), written, errors)
            continue
        if index not in destinations:
            pending[index] = await part.read()
            continue
        target = destinations[index]
        try:
            host = _write_path(tree, target)
            _not_special(host, target)
            data = await part.read()
            await _moved(request, "upload", len(data))
            _write_file(tree, target, data=data)
            written.append(target)
        except FileProblem as exc:
            await part.release()
            errors.append(exc.message)
        except OSError as exc:
            await part.release()
            errors.append(_problem(exc, target).message)
    for index in pending:
        errors.append(f"files[{index}] has no path")
    status = 200 if not errors else 400
    return web.json_response({"files": written, "errors": errors}, status=status)


async def _store(
    request: web.Request, tree: SandboxTree, path: str, data: bytes, written: list[str], errors: list[str]
) -> None:
    try:
        await _moved(request, "upload", len(data))
        _write_file(tree, path, data=data)
        written.append(path)
    except FileProblem as exc:
        errors.append(exc.message)


@_on_tree
async def upload_one(request: web.Request, tree: SandboxTree) -> web.Response:
    """`POST /files/upload?path` and `/files/upload-v2?path`: one multipart `file` part."""
    path = _query(request, "path")
    if not request.content_type.startswith("multipart/"):
        raise FileProblem(400, "expected multipart/form-data with a file part")
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            continue
        if part.name == "file":
            data = await part.read()
            await _moved(request, "upload", len(data))
            _write_file(tree, path, data=data)
            return web.json_response({"path": tree.sandbox_path(path)})
        await part.release()
    raise FileProblem(400, "no file part")


def add_routes(app: web.Application, prefix: str) -> None:
    base = f"{prefix}/{{sandbox_id}}/files"
    r = app.router
    r.add_get(base, list_files)
    r.add_delete(base, delete)
    r.add_get(f"{base}/info", get_info)
    r.add_get(f"{base}/download", download)
    r.add_post(f"{base}/bulk-download", bulk_download)
    r.add_post(f"{base}/bulk-upload", bulk_upload)
    r.add_post(f"{base}/upload", upload_one)
    r.add_post(f"{base}/upload-v2", upload_one)
    r.add_post(f"{base}/folder", create_folder)
    r.add_post(f"{base}/move", move)
    r.add_post(f"{base}/permissions", set_permissions)
    r.add_get(f"{base}/find", find_in_files)
    r.add_get(f"{base}/search", search_files)
    r.add_post(f"{base}/replace", replace_in_files)
