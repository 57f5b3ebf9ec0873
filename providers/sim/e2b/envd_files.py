"""envd's files, as e2b 2.56.0 reaches them: the Connect service `filesystem.Filesystem` (JSON codec) and the HTTP
`GET/POST /files` routes, over each sandbox's own tree (`VendorSimulator.tree(id)`: a host folder that plays the
sandbox's `/`, the host's system folders read-only), so what a command writes, `files.read` reads.

Paths: absolute, or relative to the acting user's home (`/home/user`; `/root` for `root`, chosen by the
`Authorization: Basic <user>:` header the SDK sends, or the `username` query parameter of `/files`). Entries
report mode and size from the host file, owner and group as the sandbox's user (`root` under `/root` and for
the host's system folders), and user metadata as `user.e2b.*` extended attributes, as envd keeps them.

Errors in envd's words: a missing path is Connect `not_found` / HTTP 404 (the SDK raises FileNotFoundException);
a directory where a file is wanted (or the reverse) `invalid_argument` / 400; an existing directory on
`MakeDir` `already_exists` (the SDK answers False); a write under a read-only system folder or another
refusal of the host, `permission_denied` / 403.

`/files` (auth: the sandbox's access token in `X-Access-Token`, or a signed URL's `signature` =
`v1_` + base64(sha256("path:operation:user:token[:expiration]")), as `Sandbox.download_url`/`upload_url` make
it; an expired one answers 401 "signature is already expired"). A signed URL needs no `E2b-Sandbox-Id`: the
sandbox is the one whose token makes the signature. Uploads are multipart (`file` parts, the part's filename
is its path unless `path` is given) or a raw body (`application/octet-stream`, `Content-Encoding: gzip`
allowed); a read with `Accept-Encoding: gzip` answers gzip. Metadata travels as `X-Metadata-<key>` headers.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import BodyPartReader, web

from providers.sim.core.sandbox_state.sandbox_tree import SandboxPathError, SandboxTree
from providers.sim.core.serving.bearer import tokens_equal
from providers.sim.core.serving.connect import JSON_OBJECT, CallContext, Code, ConnectService, Procedure, RpcError
from providers.sim.core.simulator import (
    NotFound,
    NotRunning,
    SandboxStatus,
    SimSandbox,
    TransferRefused,
    VendorSimulator,
)
from providers.sim.e2b.app_state import simulator
from providers.sim.e2b.envd_watch import Watchers
from providers.sim.e2b.shapes import META_ENVD_TOKEN, error_body

SERVICE = "filesystem.Filesystem"
FILES_ROUTE = "/files"
XATTR_PREFIX = "user.e2b."
METADATA_HEADER = "x-metadata-"
READ_CHUNK = 64 * 1024
_TYPES = {"file": "FILE_TYPE_FILE", "dir": "FILE_TYPE_DIRECTORY"}


# --- who acts, and where -------------------------------------------------------------------------------


def sandbox_tree(sim: VendorSimulator, sb: SimSandbox) -> SandboxTree:
    """The sandbox's tree; one that ended meanwhile is the proxy's 'not found'."""
    try:
        return sim.tree(sb.id)
    except (NotFound, NotRunning):
        raise RpcError(Code.UNAVAILABLE, f"The sandbox {sb.id} was not found") from None


def basic_user(header: str | None) -> str | None:
    """The user of envd's `Authorization: Basic base64(user:)` header, if any."""
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded.partition(":")[0] or None


def home_of(tree: SandboxTree, user: str | None) -> str:
    return "/root" if user == "root" else tree.user.home


def _sandbox_path_of(tree: SandboxTree, host: Path) -> str:
    """The sandbox path a host file plays (a host system file is its own path)."""
    try:
        return "/" + str(host.relative_to(tree.root)).lstrip(".").lstrip("/")
    except ValueError:
        return str(host)


def _owner(tree: SandboxTree, sandbox_path: str, host: Path) -> str:
    inside = host.is_relative_to(tree.root)
    if not inside or sandbox_path == "/root" or sandbox_path.startswith("/root/"):
        return "root"
    return tree.user.name


def _permissions(mode: int) -> str:
    """Go's `FileMode.String()` (what envd reports): a type letter, then rwx bits."""
    kind = "d" if stat.S_ISDIR(mode) else "L" if stat.S_ISLNK(mode) else "-"
    bits = "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))
    return kind + bits


def read_metadata(host: Path) -> dict[str, str]:
    try:
        names = os.listxattr(host)
    except OSError:
        return {}
    found: dict[str, str] = {}
    for name in names:
        if name.startswith(XATTR_PREFIX):
            try:
                found[name[len(XATTR_PREFIX) :]] = os.getxattr(host, name).decode("utf-8", "replace")
            except OSError:
                continue
    return found


def write_metadata(host: Path, metadata: dict[str, str]) -> None:
    """Replace the file's `user.e2b.*` attributes with `metadata` (an overwrite without any clears them)."""
    try:
        for name in os.listxattr(host):
            if name.startswith(XATTR_PREFIX):
                os.removexattr(host, name)
        for key, value in metadata.items():
            os.setxattr(host, XATTR_PREFIX + key, value.encode("utf-8"))
    except OSError as exc:
        raise RpcError(Code.INTERNAL, f"error setting file metadata: {exc.strerror or exc}") from None


def entry_info(tree: SandboxTree, sandbox_path: str, host: Path) -> dict[str, Any]:
    """envd's `EntryInfo` (protobuf JSON) of one path; a symlink is described by its target, which it names."""
    link = host.is_symlink()
    target = host
    if link:
        target = tree.host_path(sandbox_path)
    info = target.stat() if target.exists() else host.lstat()
    kind = "dir" if stat.S_ISDIR(info.st_mode) else "file"
    name = sandbox_path.rsplit("/", 1)[-1] or "/"
    entry: dict[str, Any] = {
        "name": name,
        "type": _TYPES[kind],
        "path": sandbox_path,
        "size": str(info.st_size),
        "mode": stat.S_IMODE(info.st_mode),
        "permissions": _permissions(info.st_mode),
        "owner": _owner(tree, sandbox_path, host),
        "group": _owner(tree, sandbox_path, host),
        "modifiedTime": datetime.fromtimestamp(info.st_mtime, UTC).isoformat().replace("+00:00", "Z"),
    }
    if link:
        entry["symlinkTarget"] = _sandbox_path_of(tree, target)
    metadata = read_metadata(target if link else host)
    if metadata:
        entry["metadata"] = metadata
    return entry


def _resolve(tree: SandboxTree, path: Any, user: str | None, *, follow_last: bool = True) -> tuple[str, Path]:
    if not isinstance(path, str) or not path:
        raise RpcError(Code.INVALID_ARGUMENT, "path is required")
    home = home_of(tree, user)
    absolute = tree.sandbox_path(path, cwd=home)
    try:
        return absolute, tree.host_path(absolute, follow_last=follow_last)
    except SandboxPathError as exc:
        raise RpcError(Code.INVALID_ARGUMENT, f"error resolving path {absolute}: {exc.strerror}") from None


def _writable(tree: SandboxTree, absolute: str) -> Path:
    try:
        return tree.writable(absolute)
    except SandboxPathError as exc:
        raise RpcError(Code.PERMISSION_DENIED, f"error writing {absolute}: {exc.strerror or exc}") from None


def _os_error(exc: OSError, what: str, path: str) -> RpcError:
    """An OSError in envd's Connect words."""
    import errno

    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOENT:
        return RpcError(Code.NOT_FOUND, f"file not found: {what} {path}: no such file or directory")
    if exc.errno == errno.EEXIST:
        return RpcError(Code.ALREADY_EXISTS, f"{what} {path}: file exists")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return RpcError(Code.PERMISSION_DENIED, f"{what} {path}: {reason.lower()}")
    if exc.errno in (errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY, errno.ELOOP, errno.ENAMETOOLONG):
        return RpcError(Code.INVALID_ARGUMENT, f"{what} {path}: {reason.lower()}")
    if exc.errno == errno.ENOSPC:
        return RpcError(Code.RESOURCE_EXHAUSTED, f"{what} {path}: {reason.lower()}")
    return RpcError(Code.INTERNAL, f"{what} {path}: {reason.lower()}")


def _exists(host: Path) -> bool:
    return host.exists() or host.is_symlink()


def _walk(tree: SandboxTree, absolute: str, host: Path, depth: int) -> Iterator[dict[str, Any]]:
    """A directory's entries, depth first in name order (as envd's WalkDir), down to `depth` levels."""
    try:
        names = sorted(os.listdir(host))
    except OSError as exc:
        raise _os_error(exc, "error reading directory", absolute) from None
    for name in names:
        child_path = f"{absolute.rstrip('/')}/{name}"
        child_host = host / name
        try:
            yield entry_info(tree, child_path, child_host)
        except OSError:
            continue  # vanished, or a dangling link into nothing
        if depth > 1 and child_host.is_dir() and not child_host.is_symlink():
            yield from _walk(tree, child_path, child_host, depth - 1)


def make_parents(host: Path) -> None:
    host.parent.mkdir(parents=True, exist_ok=True, mode=0o755)


# --- filesystem.Filesystem --------------------------------------------------------------------------------


def build_service(watchers: Watchers) -> ConnectService:
    """`filesystem.Filesystem` over the sandboxes' trees."""

    def context(ctx: CallContext) -> tuple[SandboxTree, str | None]:
        request = ctx.request
        sim = simulator(request)
        sb = sim.get(request.headers["E2b-Sandbox-Id"])
        return sandbox_tree(sim, sb), basic_user(request.headers.get("Authorization"))

    async def stat_(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        tree, user = context(ctx)
        absolute, host = _resolve(tree, req.get("path"), user, follow_last=False)
        if not _exists(host):
            raise RpcError(Code.NOT_FOUND, f"file not found: stat {absolute}: no such file or directory")
        try:
            return {"entry": entry_info(tree, absolute, host)}
        except OSError as exc:
            raise _os_error(exc, "error getting file info", absolute) from None

    async def make_dir(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        tree, user = context(ctx)
        absolute, host = _resolve(tree, req.get("path"), user)
        if host.is_dir():
            raise RpcError(Code.ALREADY_EXISTS, f"directory already exists: {absolute}")
        if _exists(host):
            raise RpcError(Code.INVALID_ARGUMENT, f"path already exists but it is not a directory: {absolute}")
        host = _writable(tree, absolute)
        try:
            host.mkdir(parents=True, mode=0o755)
            os.chmod(host, 0o755)
            return {"entry": entry_info(tree, absolute, host)}
        except OSError as exc:
            raise _os_error(exc, "error creating directory", absolute) from None

    async def move(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        tree, user = context(ctx)
        source, source_host = _resolve(tree, req.get("source"), user, follow_last=False)
        destination, _ = _resolve(tree, req.get("destination"), user, follow_last=False)
        if not _exists(source_host):
            raise RpcError(Code.NOT_FOUND, f"source file not found: {source}")
        _writable(tree, source)
        target = _writable(tree, destination)
        try:
            make_parents(target)
            os.rename(source_host, target)
            return {"entry": entry_info(tree, destination, target)}
        except OSError as exc:
            raise _os_error(exc, "error renaming", source) from None

    async def list_dir(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        tree, user = context(ctx)
        absolute, host = _resolve(tree, req.get("path"), user)
        depth = req.get("depth") or 1
        if not isinstance(depth, int) or depth < 1:
            raise RpcError(Code.INVALID_ARGUMENT, "depth should be at least 1")
        if not host.exists():
            raise RpcError(Code.NOT_FOUND, f"directory not found: {absolute}")
        if not host.is_dir():
            raise RpcError(Code.INVALID_ARGUMENT, f"path is not a directory: {absolute}")
        return {"entries": list(_walk(tree, absolute, host, depth))}

    async def remove(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        tree, user = context(ctx)
        absolute, host = _resolve(tree, req.get("path"), user, follow_last=False)
        if not _exists(host):
            return {}  # envd removes as `rm -rf` does: nothing there is not an error
        host = _writable(tree, absolute)
        try:
            if host.is_dir() and not host.is_symlink():
                shutil.rmtree(host)
            else:
                host.unlink()
        except OSError as exc:
            raise _os_error(exc, "error removing", absolute) from None
        return {}

    def watched(req: dict[str, Any], ctx: CallContext) -> tuple[SandboxTree, str, Path]:
        tree, user = context(ctx)
        absolute, host = _resolve(tree, req.get("path"), user)
        if not host.exists():
            raise RpcError(Code.NOT_FOUND, f"path {absolute} not found")
        if not host.is_dir():
            raise RpcError(Code.INVALID_ARGUMENT, f"path {absolute} is not a directory")
        return tree, absolute, host

    async def create_watcher(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        tree, absolute, host = watched(req, ctx)
        sandbox_id = ctx.request.headers["E2b-Sandbox-Id"]
        watcher = watchers.open(
            sandbox_id, tree, absolute, host, bool(req.get("recursive")), bool(req.get("includeEntry"))
        )
        return {"watcherId": watcher.id}

    async def get_watcher_events(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        watcher = watchers.get(ctx.request.headers["E2b-Sandbox-Id"], req.get("watcherId"))
        if watcher is None:
            raise RpcError(Code.NOT_FOUND, f"watcher with id {req.get('watcherId')} not found")
        return {"events": watcher.drain()}

    async def remove_watcher(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        if not watchers.close(ctx.request.headers["E2b-Sandbox-Id"], req.get("watcherId")):
            raise RpcError(Code.NOT_FOUND, f"watcher with id {req.get('watcherId')} not found")
        return {}

    async def watch_dir(req: dict[str, Any], ctx: CallContext) -> Any:
        tree, absolute, host = watched(req, ctx)
        sandbox_id = ctx.request.headers["E2b-Sandbox-Id"]
        watcher = watchers.open(
            sandbox_id, tree, absolute, host, bool(req.get("recursive")), bool(req.get("includeEntry"))
        )
        try:
            yield {"start": {}}
            async for event in watcher.stream(ctx.request):
                yield event
        finally:
            watchers.close(sandbox_id, watcher.id)

    service = ConnectService(SERVICE)
    for name, handler in (
        ("Stat", stat_),
        ("MakeDir", make_dir),
        ("Move", move),
        ("ListDir", list_dir),
        ("Remove", remove),
        ("CreateWatcher", create_watcher),
        ("GetWatcherEvents", get_watcher_events),
        ("RemoveWatcher", remove_watcher),
    ):
        service.add(Procedure(name, JSON_OBJECT, JSON_OBJECT, handler))
    service.add(Procedure("WatchDir", JSON_OBJECT, JSON_OBJECT, watch_dir, server_streaming=True))
    return service


# --- HTTP /files --------------------------------------------------------------------------------------------


def _http_error(status: int, message: str) -> web.Response:
    return web.json_response(error_body(status, message), status=status)


_HTTP_STATUS = {
    Code.NOT_FOUND: 404,
    Code.INVALID_ARGUMENT: 400,
    Code.PERMISSION_DENIED: 403,
    Code.ALREADY_EXISTS: 409,
    Code.RESOURCE_EXHAUSTED: 507,
    Code.UNAVAILABLE: 502,
}


def signature(path: str, operation: str, user: str, token: str, expiration: str | None) -> str:
    """The SDK's v1 file-URL signature (e2b/sandbox/signature.py)."""
    raw = f"{path}:{operation}:{user}:{token}" + (f":{expiration}" if expiration else "")
    digest = hashlib.sha256(raw.encode("utf-8")).digest()
    return "v1_" + base64.b64encode(digest).rstrip(b"=").decode("ascii")


def _token(sb: SimSandbox) -> str:
    return str(sb.meta.get(META_ENVD_TOKEN, ""))


def _signed_sandbox(sim: VendorSimulator, query: Any, operation: str) -> SimSandbox | None:
    """The running sandbox whose access token makes this signature (a signed URL names no sandbox)."""
    given = query.get("signature", "")
    args = (query.get("path", ""), operation, query.get("username", ""))
    expiration = query.get("signature_expiration")
    for sb in sim.list(active_only=True):
        if sb.status is SandboxStatus.RUNNING and tokens_equal(given, signature(*args, _token(sb), expiration)):
            return sb
    return None


def files_authorized(request: web.Request, sb: SimSandbox | None, operation: str) -> web.Response | None:
    """The access token, or a valid unexpired signature, or the 401 envd answers."""
    query = request.query
    if sb is not None and tokens_equal(request.headers.get("X-Access-Token") or "", _token(sb)):
        return None
    given = query.get("signature")
    if not given:
        return _http_error(401, "unauthorized access, please provide a valid access token or method signing")
    expiration = query.get("signature_expiration")
    if expiration:
        if not expiration.lstrip("-").isdigit():
            return _http_error(400, "invalid signature expiration")
        if int(expiration) < time.time():
            return _http_error(401, "signature is already expired")
    if sb is None:
        return _http_error(401, "invalid signature")
    expected = signature(query.get("path", ""), operation, query.get("username", ""), _token(sb), expiration)
    return None if tokens_equal(given, expected) else _http_error(401, "invalid signature")


Routed = Callable[[web.Request], SimSandbox | web.Response]


def files_handler(operation: str, routed: Routed) -> Any:
    """`GET /files` (read) or `POST /files` (write), through the proxy (`routed`) and envd's auth."""

    async def handle(request: web.Request) -> web.StreamResponse:
        sb: SimSandbox | None = None
        if request.headers.get("E2b-Sandbox-Id") or not request.query.get("signature"):
            found = routed(request)
            if isinstance(found, web.Response):
                return found
            sb = found
        else:
            sb = _signed_sandbox(simulator(request), request.query, operation)
        refused = files_authorized(request, sb, operation)
        if refused is not None:
            return refused
        assert sb is not None
        try:
            tree = sandbox_tree(simulator(request), sb)
            user = request.query.get("username") or basic_user(request.headers.get("Authorization"))
            moved = _Moved(simulator(request), sb.id)
            if operation == "read":
                return await _read(request, tree, user, moved)
            return await _write(request, tree, user, moved)
        except RpcError as exc:
            return _http_error(_HTTP_STATUS.get(exc.code, 500), exc.message)
        except TransferRefused as exc:
            return _http_error(_REFUSED_STATUS[exc.reason], exc.message)
        except (NotFound, NotRunning):
            return _http_error(502, "The sandbox was not found")

    return handle


# a file the vendor refuses: 413 for a body over the cap (the proxy's "request entity too large"), 503 for one file too
# many in flight, 500 for one envd failed part-way; the SDK raises SandboxException("413: ..."/"503: ...") for each,
# an upload's or download's error
_REFUSED_STATUS = {"file_too_large": 413, "too_many_transfers": 503, "transfer_failed": 500}


@dataclass(frozen=True, slots=True)
class _Moved:
    """The sandbox a /files call moves bytes in or out of: each file takes its time over the profile's bandwidth
    (`VendorSimulator.transfer`) before envd answers."""

    sim: VendorSimulator
    sandbox_id: str

    async def __call__(self, direction: str, nbytes: int) -> None:
        await self.sim.transfer(self.sandbox_id, direction, nbytes)


async def _read(request: web.Request, tree: SandboxTree, user: str | None, moved: _Moved) -> web.StreamResponse:
    absolute, host = _resolve(tree, request.query.get("path"), user)
    if not host.exists():
        raise RpcError(Code.NOT_FOUND, f"path '{absolute}' does not exist")
    if host.is_dir():
        raise RpcError(Code.INVALID_ARGUMENT, f"path '{absolute}' is a directory")
    try:
        data = host.read_bytes()
    except OSError as exc:
        raise _os_error(exc, "error reading file", absolute) from None
    headers = {"Content-Disposition": f'inline; filename="{host.name}"'}
    if "gzip" in (request.headers.get("Accept-Encoding") or ""):
        headers["Content-Encoding"] = "gzip"
        data = gzip.compress(data, compresslevel=1)
    await moved("download", len(data))
    return web.Response(body=data, content_type="application/octet-stream", headers=headers)


def _metadata_headers(request: web.Request) -> dict[str, str]:
    return {
        key[len(METADATA_HEADER) :]: value
        for key, value in request.headers.items()
        if key.lower().startswith(METADATA_HEADER) and len(key) > len(METADATA_HEADER)
    }


def _store(tree: SandboxTree, absolute: str, data: bytes, metadata: dict[str, str]) -> dict[str, Any]:
    host = _writable(tree, absolute)
    if host.is_dir():
        raise RpcError(Code.INVALID_ARGUMENT, f"path '{absolute}' is a directory")
    try:
        make_parents(host)
        with open(host, "wb") as file:
            file.write(data)
        os.chmod(host, 0o644)
    except OSError as exc:
        raise _os_error(exc, "error writing file", absolute) from None
    write_metadata(host, metadata)
    info: dict[str, Any] = {"name": host.name, "type": "file", "path": absolute}
    if metadata:
        info["metadata"] = metadata
    return info


async def _write(request: web.Request, tree: SandboxTree, user: str | None, moved: _Moved) -> web.Response:
    home = home_of(tree, user)
    metadata = _metadata_headers(request)
    path = request.query.get("path")
    written: list[dict[str, Any]] = []
    if request.content_type.startswith("multipart/"):
        reader = await request.multipart()
        async for part in reader:
            if not isinstance(part, BodyPartReader) or part.name != "file":
                continue
            name = path or part.filename
            if not name:
                raise RpcError(Code.INVALID_ARGUMENT, "a file part needs a filename or the path parameter")
            data = bytes(await part.read(decode=True))
            await moved("upload", len(data))
            written.append(_store(tree, tree.sandbox_path(name, cwd=home), data, metadata))
        if not written:
            raise RpcError(Code.INVALID_ARGUMENT, "no file in the multipart body")
        return web.json_response(written)
    if not path:
        raise RpcError(Code.INVALID_ARGUMENT, "the path parameter is required for an octet-stream upload")
    body = await request.read()  # aiohttp has undone a `Content-Encoding: gzip` already
    await moved("upload", len(body))
    written.append(_store(tree, tree.sandbox_path(path, cwd=home), body, metadata))
    return web.json_response(written)
