"""Modal's sandbox filesystem tool, played by the local command router on the sandbox's own file tree.

SDK 1.6.x implements `Sandbox.filesystem` (`read_bytes`, `write_bytes`, `copy_from_local`, `copy_to_local`,
`list_files`, `make_directory`, `remove`, `stat`, `watch`) as an exec of `/__modal/.bin/modal-sandbox-fs-tools`
with one JSON argument (`{"ReadFile": {"path": ...}}`; `sandbox_fs_utils.make_*_command`). On success the tool
writes the file (or a JSON listing) to stdout and exits 0; on failure it writes `{"error_kind", "message"}` to
stderr and exits 1, and the SDK raises the matching `SandboxFilesystem*Error` from the kind. `WriteFile` reads
the file from stdin (the SDK streams it with `TaskExecStdinWriteStream`).

Here the router does not start a process for it: the operation runs in this module on the simulated sandbox's
tree (`SandboxTree`, contract C2), as root (Modal's sandboxes run as root in `/`). `Watch` streams its events
while it runs: a `Watcher` compares the watched folder's listing (names, sizes, mtimes) at each look and prints
one JSON line per change (`{"event_type": "Create" | "Modify" | "Remove", "paths": [...]}`), as the tool does; the
router looks every `WATCH_POLL_S` real seconds until its timeout or until the SDK closes its stdin. Unlike the
kernel's notifications the tool uses, a file made and removed between two looks is no event, and a rename is a
Remove and a Create.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from providers.sim.core.sandbox_state.sandbox_tree import SandboxPathError, SandboxTree

FS_TOOLS_PATH = "/__modal/.bin/modal-sandbox-fs-tools"
WATCH_POLL_S = 0.05  # real seconds between two looks of a watch
OPERATIONS = ("ReadFile", "WriteFile", "ListFiles", "MakeDirectory", "Remove", "Stat", "Watch")

_KINDS = {
    errno.ENOENT: "NotFound",
    errno.EISDIR: "IsDirectory",
    errno.ENOTDIR: "NotDirectory",
    errno.EACCES: "PermissionDenied",
    errno.EPERM: "PermissionDenied",
    errno.EROFS: "PermissionDenied",
    errno.ENOTEMPTY: "DirectoryNotEmpty",
    errno.EEXIST: "PathAlreadyExists",
}


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What the tool's process would have left behind: exit code and both streams."""

    code: int
    stdout: bytes = b""
    stderr: bytes = b""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One parsed invocation: the operation and its JSON arguments."""

    operation: str
    args: dict[str, Any]

    @property
    def path(self) -> str:
        return str(self.args.get("path") or "")

    @property
    def reads_stdin(self) -> bool:
        return self.operation == "WriteFile"


def parse(argv: list[str]) -> ToolCall | None:
    """The tool call `argv` makes, or None when it is not the filesystem tool (an ordinary command)."""
    if not argv or argv[0] != FS_TOOLS_PATH:
        return None
    try:
        command = json.loads(argv[1]) if len(argv) == 2 else None
    except json.JSONDecodeError:
        command = None
    if not isinstance(command, dict) or len(command) != 1:
        return ToolCall("Invalid", {})
    ((operation, args),) = command.items()
    return ToolCall(str(operation), args if isinstance(args, dict) else {})


def run(tree: SandboxTree, call: ToolCall, stdin: bytes = b"") -> ToolResult:
    """Carry out one call on the sandbox's tree."""
    path = call.path
    if call.operation == "Watch":
        return _error("InvalidArgument", "Watch streams its events: the router runs it with a `Watcher`")
    if call.operation not in OPERATIONS:
        return _error("InvalidArgument", f"unknown modal-sandbox-fs-tools command: {call.operation}")
    if not path.startswith("/") or "\x00" in path:
        return _error("InvalidArgument", f"path must be absolute, without NUL: {path!r}")
    try:
        if call.operation == "ReadFile":
            return ToolResult(0, _read(tree, path))
        if call.operation == "WriteFile":
            _write(tree, path, stdin)
        elif call.operation == "ListFiles":
            return ToolResult(0, json.dumps(_list(tree, path)).encode())
        elif call.operation == "Stat":
            return ToolResult(0, json.dumps(_entry(tree, path, tree.host_path(path, follow_last=False))).encode())
        elif call.operation == "MakeDirectory":
            _make_directory(tree, path, parents=bool(call.args.get("parents", True)))
        else:
            _remove(tree, path, recursive=bool(call.args.get("recursive", False)))
    except OSError as exc:
        return failure(exc)
    return ToolResult(0)


def failure(exc: OSError) -> ToolResult:
    """The tool's answer to a file error: its kind (from the errno) and message on stderr, exit 1."""
    kind = _KINDS.get(exc.errno or 0, "Other")
    return _error(kind, exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc)))


def refused(kind: str, message: str) -> ToolResult:
    """The tool's answer to a file the vendor refuses (`transfers.py`): `kind` on stderr, exit 1."""
    return _error(kind, message)


def _error(kind: str, message: str) -> ToolResult:
    return ToolResult(1, stderr=json.dumps({"error_kind": kind, "message": message}).encode())


def _inside(tree: SandboxTree, host: Path) -> Path:
    """`host` if it lies in the sandbox's writable tree (not the host's read-only system folders)."""
    if host != tree.root and tree.root not in host.parents:
        raise SandboxPathError(errno.EROFS, "Read-only file system", str(host))
    return host


def _read(tree: SandboxTree, path: str) -> bytes:
    host = tree.host_path(path)
    if host.is_dir():
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    if host.exists() and not host.is_file():  # a FIFO or device would block the router: not a file to read
        raise OSError(errno.EINVAL, "Not a regular file", path)
    return host.read_bytes()


def _write(tree: SandboxTree, path: str, data: bytes) -> None:
    tree.writable(path)  # refuses the read-only system folders by their sandbox path
    host = _inside(tree, tree.host_path(path))  # a symlink is written through, inside the tree
    parent = host.parent
    if not parent.is_dir():
        _make_parents(tree, parent)
    if host.is_dir():
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _make_parents(tree: SandboxTree, folder: Path) -> None:
    """mkdir -p inside the tree: a file in the way is NotDirectory."""
    missing: list[Path] = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    if not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(folder))
    for each in reversed(missing):
        _inside(tree, each).mkdir()


def _make_directory(tree: SandboxTree, path: str, *, parents: bool) -> None:
    tree.writable(path)
    host = _inside(tree, tree.host_path(path))
    if parents:
        if host.is_dir():
            return
        if host.exists():
            raise FileExistsError(errno.EEXIST, "File exists", path)
        _make_parents(tree, host)
        return
    host.mkdir()


def _remove(tree: SandboxTree, path: str, *, recursive: bool) -> None:
    host = _inside(tree, tree.writable(path))  # the link itself, not its target
    if host == tree.root:
        raise PermissionError(errno.EPERM, "Operation not permitted", path)
    if host.is_symlink() or not host.is_dir():
        host.unlink()
    elif recursive:
        shutil.rmtree(host)
    else:
        host.rmdir()


def _list(tree: SandboxTree, path: str) -> list[dict[str, Any]]:
    host = tree.host_path(path)
    if not host.exists():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
    if not host.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", path)
    base = tree.sandbox_path(path)
    entries = []
    for child in sorted(host.iterdir(), key=lambda p: p.name):
        entries.append(_entry(tree, f"{base.rstrip('/')}/{child.name}", child))
    return entries


def _entry(tree: SandboxTree, path: str, host: Path) -> dict[str, Any]:
    """One `FileInfo` as the tool prints it: the host file's size, mode and mtime, owned by the sandbox's user."""
    info = host.lstat()
    kind = "symlink" if stat.S_ISLNK(info.st_mode) else "directory" if stat.S_ISDIR(info.st_mode) else "file"
    sandbox_path = tree.sandbox_path(path)
    return {
        "name": sandbox_path.rsplit("/", 1)[-1] or "/",
        "path": sandbox_path,
        "type": kind,
        "size": info.st_size,
        "mode": stat.S_IMODE(info.st_mode),
        "permissions": stat.filemode(info.st_mode)[1:],
        "owner": tree.user.name,
        "group": tree.user.name,
        "modified_time": info.st_mtime,
        "symlink_target": os.readlink(host) if kind == "symlink" else None,
    }


class Watcher:
    """`Watch`: what changed under a path between two looks, as the tool's JSON event lines."""

    def __init__(self, tree: SandboxTree, call: ToolCall) -> None:
        path = call.path
        if not path.startswith("/") or "\x00" in path:
            raise OSError(errno.EINVAL, "path must be absolute, without NUL", path)
        self.tree = tree
        self.base = tree.sandbox_path(path)
        self.host = tree.host_path(path)  # a symlink is followed: events name paths under its target
        if not self.host.exists():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        self.recursive = bool(call.args.get("recursive", False))
        wanted = call.args.get("filter")
        self.wanted = None if wanted is None else {str(kind) for kind in wanted}
        self.seen = self._look()

    def _look(self) -> dict[str, tuple[int, int]]:
        """Every watched entry's (mtime ns, size), by sandbox path."""
        found: dict[str, tuple[int, int]] = {}
        if not self.host.is_dir():
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                info = self.host.stat()
                found[self.base] = (info.st_mtime_ns, info.st_size)
            return found
        pending = [(self.host, self.base.rstrip("/"))]
        while pending:
            folder, name = pending.pop()
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                for child in os.scandir(folder):
                    info = child.stat(follow_symlinks=False)
                    path = f"{name}/{child.name}"
                    found[path] = (info.st_mtime_ns, info.st_size)
                    if self.recursive and child.is_dir(follow_symlinks=False):
                        pending.append((Path(child.path), path))
        return found

    def poll(self) -> bytes:
        """The event lines since the last look (b"" when nothing changed)."""
        now = self._look()
        events = [("Create", p) for p in now if p not in self.seen]
        events += [("Modify", p) for p in now if p in self.seen and now[p] != self.seen[p]]
        events += [("Remove", p) for p in self.seen if p not in now]
        self.seen = now
        lines = [
            json.dumps({"event_type": kind, "paths": [path]}) + "\n"
            for kind, path in events
            if self.wanted is None or kind in self.wanted
        ]
        return "".join(lines).encode()
