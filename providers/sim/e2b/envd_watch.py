"""envd's directory watchers over the host's inotify (Linux), so a change made by a command, an upload or a rename
is seen alike: `CreateWatcher` / `GetWatcherEvents` / `RemoveWatcher` (polled) and `WatchDir` (a stream).

Events are fsnotify's, as envd reports them: IN_CREATE / IN_MOVED_TO -> CREATE, IN_MODIFY -> WRITE,
IN_DELETE -> REMOVE, IN_MOVED_FROM -> RENAME, IN_ATTRIB -> CHMOD; names are relative to the watched folder. A
recursive watcher watches each sub-folder too, including ones made later (their existing entries are reported
as created, since they may have been filled before the folder's own event was read). The kernel queue is read
whenever the loop sees it readable and again before each `GetWatcherEvents`, so an event is never missed by a
poll that follows the change.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import os
import secrets
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from providers.sim.core.sandbox_state.sandbox_tree import SandboxTree
from providers.sim.core.serving.connect import Code, RpcError

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
WATCH_MASK = IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
_EVENT = struct.Struct("iIII")
_KINDS = (
    (IN_CREATE | IN_MOVED_TO, "EVENT_TYPE_CREATE"),
    (IN_MODIFY, "EVENT_TYPE_WRITE"),
    (IN_DELETE, "EVENT_TYPE_REMOVE"),
    (IN_MOVED_FROM, "EVENT_TYPE_RENAME"),
    (IN_ATTRIB, "EVENT_TYPE_CHMOD"),
)
KEEPALIVE_S = 30.0
Describe = Callable[[SandboxTree, str, Path], dict[str, Any]]
"""How an event's `entry` is made (envd_files.entry_info: passed in, so the two modules need not import each other)."""

_libc: Any = None


def _inotify() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


class Watcher:
    """One watch of a folder (recursive or not): its inotify descriptor and the events not yet collected."""

    def __init__(
        self, tree: SandboxTree, absolute: str, host: Path, recursive: bool, describe: Describe | None
    ) -> None:
        self.id = secrets.token_hex(8)
        self.tree = tree
        self.absolute = absolute
        self.host = host
        self.recursive = recursive
        self.describe = describe
        libc = _inotify()
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise RpcError(Code.RESOURCE_EXHAUSTED, f"error creating watcher: {os.strerror(err)}")
        self.fd = fd
        self._dirs: dict[int, str] = {}  # watch descriptor -> folder relative to the watched one ("" = itself)
        self.events: list[dict[str, Any]] = []
        self.changed = asyncio.Event()
        self._add(host, "")
        if recursive:
            for folder, _, _ in os.walk(host):
                if folder != str(host):
                    self._add(Path(folder), os.path.relpath(folder, host))
        asyncio.get_running_loop().add_reader(fd, self.read)

    def _add(self, folder: Path, relative: str) -> None:
        wd = _inotify().inotify_add_watch(self.fd, os.fsencode(folder), WATCH_MASK)
        if wd >= 0:
            self._dirs[wd] = relative

    def read(self) -> None:
        """Move what the kernel queued into `events`."""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EBADF, errno.EINVAL):
                    return
                raise
            if not data:
                return
            offset = 0
            while offset < len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size
                name = data[offset : offset + length].rstrip(b"\0").decode("utf-8", "surrogateescape")
                offset += length
                self._record(wd, mask, name)

    def _record(self, wd: int, mask: int, name: str) -> None:
        folder = self._dirs.get(wd)
        if folder is None or not name:
            if mask & IN_IGNORED:
                self._dirs.pop(wd, None)
            return
        relative = f"{folder}/{name}" if folder else name
        for bit, kind in _KINDS:
            if mask & bit:
                self._append(relative, kind)
        if self.recursive and mask & (IN_CREATE | IN_MOVED_TO) and mask & IN_ISDIR:
            folder_host = self.host / relative
            self._add(folder_host, relative)
            for sub, dirs, files in os.walk(folder_host):  # filled before we watched it
                sub_relative = os.path.relpath(sub, self.host)
                if sub != str(folder_host):
                    self._add(Path(sub), sub_relative)
                for entry in sorted(dirs + files):
                    self._append(f"{sub_relative}/{entry}", "EVENT_TYPE_CREATE")
                    if entry in files:
                        self._append(f"{sub_relative}/{entry}", "EVENT_TYPE_WRITE")

    def _append(self, relative: str, kind: str) -> None:
        event: dict[str, Any] = {"name": relative, "type": kind}
        if self.describe is not None:
            path = f"{self.absolute.rstrip('/')}/{relative}"
            host = self.host / relative
            if host.exists() or host.is_symlink():
                try:
                    event["entry"] = self.describe(self.tree, path, host)
                except OSError:
                    pass
        self.events.append(event)
        self.changed.set()

    def drain(self) -> list[dict[str, Any]]:
        self.read()
        events, self.events = self.events, []
        self.changed.clear()
        return events

    async def stream(self, request: web.Request) -> AsyncIterator[dict[str, Any]]:
        """`WatchDir`'s events as they come, a keepalive now and then, until the client goes."""
        while True:
            try:
                await asyncio.wait_for(self.changed.wait(), KEEPALIVE_S)
            except TimeoutError:
                transport = request.transport
                if transport is None or transport.is_closing():
                    return
                yield {"keepalive": {}}
                continue
            for event in self.drain():
                yield {"filesystem": event}

    def close(self) -> None:
        if self.fd >= 0:
            asyncio.get_running_loop().remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1


class Watchers:
    """The open watchers of every sandbox."""

    def __init__(self, describe: Describe) -> None:
        self.describe = describe
        self._by_sandbox: dict[str, dict[str, Watcher]] = {}

    def open(
        self, sandbox_id: str, tree: SandboxTree, absolute: str, host: Path, recursive: bool, include_entry: bool
    ) -> Watcher:
        watcher = Watcher(tree, absolute, host, recursive, self.describe if include_entry else None)
        self._by_sandbox.setdefault(sandbox_id, {})[watcher.id] = watcher
        return watcher

    def get(self, sandbox_id: str, watcher_id: Any) -> Watcher | None:
        return self._by_sandbox.get(sandbox_id, {}).get(watcher_id) if isinstance(watcher_id, str) else None

    def close(self, sandbox_id: str, watcher_id: Any) -> bool:
        watcher = self._by_sandbox.get(sandbox_id, {}).pop(watcher_id, None) if isinstance(watcher_id, str) else None
        if watcher is None:
            return False
        watcher.close()
        return True

    def forget(self, sandbox_id: str) -> None:
        """A sandbox ended: its watchers go with it."""
        for watcher in self._by_sandbox.pop(sandbox_id, {}).values():
            watcher.close()

    def close_all(self) -> None:
        for sandbox_id in list(self._by_sandbox):
            self.forget(sandbox_id)
