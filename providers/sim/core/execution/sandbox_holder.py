"""A sandbox's holder: `bwrap` with the sandbox's tree as `/`, the host's system folders read-only, its own
namespaces, running `sh -c 'read x'` as the sandbox's init, so background jobs outlive the command that started
them and stopping it takes every process of the sandbox with it. `isolated_shell.py` enters its namespaces per
command."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from pathlib import Path

from providers.sim.core.execution.sleep_shim import SHIM_DIR
from providers.sim.core.sandbox_state.sandbox_tree import SandboxTree


class _HolderProtocol(asyncio.SubprocessProtocol):
    """The holder's pipes: its "ready" line (the namespaces are set up), what it said if it failed."""

    def __init__(self) -> None:
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.stderr = bytearray()
        self.exited = False

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1 and not self.ready.done():
            self.ready.set_result(None)
        elif fd == 2 and len(self.stderr) < 4096:
            self.stderr += data

    def process_exited(self) -> None:
        self.exited = True
        if not self.ready.done():
            self.ready.set_exception(RuntimeError("the holder exited"))
            self.ready.exception()


class Holder:
    """One sandbox's init: its namespaces live while this process does."""

    def __init__(self, transport: asyncio.SubprocessTransport, protocol: _HolderProtocol, init_pid: int) -> None:
        self.transport = transport
        self.protocol = protocol
        self.init_pid = init_pid

    @property
    def alive(self) -> bool:
        return not self.protocol.exited

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError, RuntimeError):  # RuntimeError: the loop is already closed
            self.transport.kill()
            self.transport.close()


async def start_holder(tree: SandboxTree, shim_dir: Path) -> Holder:
    """Start the sandbox's holder on its tree, the `sleep` shim folder bound at SHIM_DIR; once its namespaces
    are set up (RuntimeError when bwrap could not)."""
    loop = asyncio.get_running_loop()
    uid = str(tree.user.uid)
    read_fd, write_fd = os.pipe()
    argv = [
        "bwrap",
        "--bind",
        str(tree.root),
        "/",
        *_system_binds(),
        *_etc_binds(),
        "--ro-bind",
        str(shim_dir),
        SHIM_DIR,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--unshare-all",
        "--unshare-user",
        "--uid",
        uid,
        "--gid",
        uid,
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--chdir",
        "/",
        "--clearenv",
        "--info-fd",
        str(write_fd),
        "/bin/sh",
        "-c",
        "echo ready; read x",
    ]
    try:
        transport, protocol = await loop.subprocess_exec(
            _HolderProtocol,
            *argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_fd,),
            start_new_session=True,
        )
    finally:
        os.close(write_fd)
    try:
        info = await _read_all(read_fd)
    finally:
        os.close(read_fd)
    try:
        init_pid = int(json.loads(info)["child-pid"])
        # bwrap reports the pid before the user namespace's maps are written: the holder's "ready" comes after
        await asyncio.wait_for(asyncio.shield(protocol.ready), timeout=30)
    except (ValueError, KeyError, TypeError, RuntimeError, TimeoutError):
        transport.close()
        reason = protocol.stderr.decode(errors="replace").strip() or info[:200].decode(errors="replace")
        raise RuntimeError(f"bwrap did not start the sandbox: {reason}") from None
    return Holder(transport, protocol, init_pid)


def stop_when_started(future: asyncio.Future[Holder]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().stop()


async def _read_all(fd: int) -> bytes:
    """Read a pipe to EOF without blocking the loop (bwrap's --info-fd: a few hundred bytes, then closed)."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            chunks.append(data)
            if b"}" in data:  # the JSON object is complete; bwrap keeps the fd open while it runs
                loop.remove_reader(fd)
                if not done.done():
                    done.set_result(None)
            return
        loop.remove_reader(fd)
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await asyncio.wait_for(done, timeout=30)
    finally:
        loop.remove_reader(fd)
    return b"".join(chunks)


def _system_binds() -> list[str]:
    """The host's system folders, read-only (a merged-/usr host has only /usr; the tree has the symlinks)."""
    out: list[str] = []
    for folder in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        host = Path(folder)
        if host.is_dir() and not host.is_symlink():
            out += ["--ro-bind", folder, folder]
    return out


def _etc_binds() -> list[str]:
    """The host's /etc/alternatives, read-only: Debian's /usr/bin/awk, which, editor... are symlinks into it."""
    return ["--ro-bind", "/etc/alternatives", "/etc/alternatives"] if Path("/etc/alternatives").is_dir() else []
