"""A real shell in a simulated sandbox: bash (else sh) in the sandbox's own file tree, under bubblewrap.

Why real: RL tool calls are real shell commands on real files (pipes, `$(...)`, heredocs, `python3 -c`, background
jobs), and a subset written here never keeps up. Why bubblewrap (`apt-get install bubblewrap`): one unprivileged
binary from Debian, no daemon, 4-10 ms a namespace, nothing left behind.

The layout, per sandbox (started on its first real command, so a load test with modelled commands pays nothing):

- a *holder*: `bwrap` with the tree's root bound as `/`, the host's `/usr` read-only (with the tree's `/bin`,
  `/lib*` symlinks into it), its own user, PID, IPC, UTS, network (loopback only: a command reaches nothing),
  mount and cgroup namespaces, `--die-with-parent`, running `sh -c 'read x'` on a pipe only we hold. It is
  the sandbox's init: background jobs outlive the command that started them (`nohup job &`, Prime's
  `start_background_job`), and stopping the holder (the sandbox ended, paused or the simulator closed) takes
  every process of the sandbox with it (the kernel kills a PID namespace whose init dies);
- each command: `nsenter` into the holder's namespaces as the tree's user (uid/gid 1000: `user` on E2B,
  `daytona` on Daytona; 0 elsewhere), `env -i` (HOME, USER, LOGNAME, SHELL, PATH and the caller's env), `setsid` (its own
  session and process group, the pty as its controlling terminal when asked), `prlimit --as` (the memory
  limit) and `bash -c COMMAND` in `cwd`.

What a caller sees (`RealProcess`): output through `on_stdout` / `on_stderr` as it arrives (with a pty, both come
through `on_stdout`, as a terminal merges them), the first `OUTPUT_CAP` bytes of each stream kept, stdin through a
pipe it may close (or the pty), signals to the command's whole process group, and its exit code: the shell's, or
128+N for a command ended by signal N (what bash itself reports, and what E2B and Daytona hand back).

Time: a `sleep` shim comes first on PATH (`/opt/stampede/bin/sleep`), so `sleep N` (numbers with s/m/h/d
suffixes, several arguments summed, as coreutils) lasts N vendor seconds, N x time_scale real seconds. Every
other program runs in real time (`python3 -c 'import time; time.sleep(5)'` takes 5 real seconds), and so does
`/usr/bin/sleep` called by its full path.

Memory: `prlimit --as` caps each command's address space at the sandbox's `memory_mb` (RLIMIT_AS, not a cgroup:
cheap and needs no delegation). An allocation past it fails inside the command (Python's `MemoryError`, exit 1)
and the sandbox lives on; programs that reserve large virtual ranges up front (a JVM, Go) may need more
`memory_mb` than they use. The sandbox-killing OOM stays the profile's drawn fate.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import termios
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from providers.sim.core.sandbox_state.sandbox_tree import SandboxTree

OUTPUT_CAP = 16 * 1024 * 1024
"""Bytes of each stream (stdout, stderr) a RealProcess keeps; callbacks see everything."""
SHIM_DIR = "/opt/stampede/bin"
"""Where the time-scaled `sleep` lives inside a sandbox (first on PATH)."""
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DRAIN_S = 0.05
"""Real seconds to wait, after a command exits, for output still in flight from processes that hold its pipes
(a background job that kept stdout): the command is over, so what arrives later is not its output."""
MISSING = "real commands need bubblewrap: apt-get install bubblewrap"

_SLEEP_SHIM = """#!/bin/sh
# stampede: `sleep N` lasts N vendor seconds, N x {scale} real seconds (coreutils' syntax: s/m/h/d, summed)
t=$(/usr/bin/awk -v scale={scale} 'BEGIN {{
  s = 0
  if (ARGC < 2) exit 1
  for (i = 1; i < ARGC; i++) {{
    a = ARGV[i]; m = 1; u = substr(a, length(a))
    if (u == "s") a = substr(a, 1, length(a) - 1)
    else if (u == "m") {{ m = 60; a = substr(a, 1, length(a) - 1) }}
    else if (u == "h") {{ m = 3600; a = substr(a, 1, length(a) - 1) }}
    else if (u == "d") {{ m = 86400; a = substr(a, 1, length(a) - 1) }}
    if (a !~ /^([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?$/) exit 1
    s += a * m
  }}
  printf "%.6f", s * scale
}}' "$@") || exec /usr/bin/sleep "$@"
exec /usr/bin/sleep "$t"
"""


class RealProcess:
    """One command running in a sandbox (or about to: calls made before it starts are replayed when it does).

    `pid` is the host pid of its `nsenter` (None until started); `returncode` is set once it ended.
    """

    def __init__(
        self,
        *,
        on_stdout: Callable[[bytes], None] | None = None,
        on_stderr: Callable[[bytes], None] | None = None,
        pty: bool = False,
    ) -> None:
        self.pid: int | None = None
        self.returncode: int | None = None
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.truncated = False
        self.pty = pty
        self._on_stdout = on_stdout
        self._on_stderr = on_stderr
        self._done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._exit_callbacks: list[Callable[[RealProcess], None]] = []
        self._transport: asyncio.SubprocessTransport | None = None
        self._master: int | None = None
        self._early: list[tuple[str, Any]] = []  # stdin writes, closes, signals, resizes before the start
        self._command_pid: int | None = None

    # --- what a front uses -------------------------------------------------------------------------

    async def wait(self) -> int:
        """The exit code (128+N for signal N)."""
        return await asyncio.shield(self._done)

    @property
    def done(self) -> bool:
        return self._done.done()

    def add_exit_callback(self, callback: Callable[[RealProcess], None]) -> None:
        """Call `callback(self)` once the command has ended and its output is in."""
        if self._done.done():
            callback(self)
        else:
            self._exit_callbacks.append(callback)

    def write_stdin(self, data: bytes) -> None:
        if self.done:
            return
        if self.pid is None:
            self._early.append(("write", data))
        elif self._master is not None:
            _write_all(self._master, data)
        elif self._transport is not None:
            pipe = self._transport.get_pipe_transport(0)
            if pipe is not None and not pipe.is_closing():
                pipe.write(data)  # type: ignore[attr-defined]

    def close_stdin(self) -> None:
        """End of input (with a pty: the terminal's EOF character, ^D)."""
        if self.done:
            return
        if self.pid is None:
            self._early.append(("close", None))
        elif self._master is not None:
            _write_all(self._master, b"\x04")
        elif self._transport is not None:
            pipe = self._transport.get_pipe_transport(0)
            if pipe is not None:
                pipe.close()

    def signal(self, sig: int) -> None:
        """Send `sig` to the command's process group (the shell and what it started)."""
        if self.done:
            return
        if self.pid is None:
            self._early.append(("signal", sig))
            return
        self._signal_group(sig, tries=200)

    def _signal_group(self, sig: int, tries: int) -> None:
        if self.done:
            return
        target = self._group()
        if target is None and tries > 0:  # nsenter has not forked the command yet: a moment later
            asyncio.get_running_loop().call_later(0.005, self._signal_group, sig, tries - 1)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if target is not None:
                os.killpg(target, sig)
            elif self.pid is not None:
                os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL the command's process group and its `nsenter` (the timeout's end)."""
        if self.done:
            return
        if self.pid is None:  # not started yet: it never will
            self._finish(128 + signal.SIGKILL)
            return
        target = self._group()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if target is not None:
                os.killpg(target, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def resize(self, cols: int, rows: int) -> None:
        """Resize the pty (TIOCSWINSZ; the command gets SIGWINCH). No-op without a pty."""
        if self.pid is None:
            self._early.append(("resize", (cols, rows)))
        elif self._master is not None:
            _set_size(self._master, cols, rows)

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")

    # --- plumbing ----------------------------------------------------------------------------------

    def _group(self) -> int | None:
        """The host pid of the command's session leader (nsenter's child, after `setsid`)."""
        if self._command_pid is None and self.pid is not None:
            try:
                children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
            except OSError:
                children = []
            if children:
                self._command_pid = int(children[0])
        return self._command_pid

    def _out(self, data: bytes) -> None:
        self._keep(self.stdout, data)
        if self._on_stdout is not None:
            self._on_stdout(data)

    def _err(self, data: bytes) -> None:
        self._keep(self.stderr, data)
        if self._on_stderr is not None:
            self._on_stderr(data)

    def _keep(self, buffer: bytearray, data: bytes) -> None:
        room = OUTPUT_CAP - len(buffer)
        if len(data) > room:
            self.truncated = True
            data = data[: max(room, 0)]
        buffer += data

    def _started(self, pid: int) -> None:
        self.pid = pid
        early, self._early = self._early, []
        for op, arg in early:
            if op == "write":
                self.write_stdin(arg)
            elif op == "close":
                self.close_stdin()
            elif op == "signal":
                self.signal(arg)
            else:
                self.resize(*arg)

    def _finish(self, code: int) -> None:
        if self._done.done():
            return
        if self._master is not None:
            loop = asyncio.get_running_loop()
            loop.remove_reader(self._master)
            os.close(self._master)
            self._master = None
        if self._transport is not None:
            self._transport.close()
        self.returncode = code
        self._done.set_result(code)
        callbacks, self._exit_callbacks = self._exit_callbacks, []
        for callback in callbacks:
            callback(self)


class _Protocol(asyncio.SubprocessProtocol):
    def __init__(self, proc: RealProcess) -> None:
        self.proc = proc
        self.open_pipes = {1, 2}
        self.exit_code: int | None = None
        self.drain: asyncio.TimerHandle | None = None
        self.transport: asyncio.SubprocessTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport  # a quick command can exit before `proc._transport` is set

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if self.proc.done:
            return
        if fd == 1:
            self.proc._out(data)
        else:
            self.proc._err(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self.open_pipes.discard(fd)
        self._maybe_finish()

    def process_exited(self) -> None:
        transport = self.transport or self.proc._transport
        raw = transport.get_returncode() if transport is not None else None
        self.exit_code = _exit_code(raw if raw is not None else 1)
        if self.proc._master is not None:
            self.open_pipes = {self.proc._master}  # the pty: read until the slave side is gone or the drain ends
        self._maybe_finish()
        if not self.proc.done and self.drain is None:
            self.drain = asyncio.get_running_loop().call_later(DRAIN_S, self._finish)

    def _maybe_finish(self) -> None:
        if self.exit_code is not None and not self.open_pipes:
            self._finish()

    def _finish(self) -> None:
        if self.drain is not None:
            self.drain.cancel()
        if self.exit_code is not None:
            self.proc._finish(self.exit_code)


def _exit_code(returncode: int) -> int:
    """A shell's exit status: a process ended by signal N reads 128+N, as `$?` does in bash."""
    return 128 - returncode if returncode < 0 else returncode


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            continue
        except OSError:
            return
        view = view[n:]


def _set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


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


class _Holder:
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


class IsolatedShell:
    """Real commands in sandboxes' trees: one holder per sandbox, started on first use, stopped by `stop`."""

    _available: bool | None = None

    @classmethod
    def available(cls) -> bool:
        """bwrap (and nsenter, prlimit, setsid) on PATH, and a namespace can be made here (checked once)."""
        if cls._available is None:
            tools = all(shutil.which(t) for t in ("bwrap", "nsenter", "prlimit", "setsid"))
            ok = False
            if tools:
                try:
                    probe = subprocess.run(
                        ["bwrap", "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "/bin/true"],
                        stdin=subprocess.DEVNULL,
                        capture_output=True,
                        timeout=10,
                    )
                    ok = probe.returncode == 0
                except (OSError, subprocess.TimeoutExpired):
                    ok = False
            cls._available = ok
        return cls._available

    def __init__(self, *, time_scale: float = 1.0) -> None:
        self.time_scale = float(time_scale)
        self._holders: dict[str, asyncio.Future[_Holder]] = {}
        self._procs: dict[str, set[RealProcess]] = {}
        self._shim_base: Path | None = None
        self._shim_dirs: dict[float, Path] = {}
        self._closed = False

    def start(
        self,
        tree: SandboxTree,
        command: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bool = False,
        pty: tuple[int, int] | None = None,
        time_scale: float | None = None,
        memory_mb: int | None = None,
        on_stdout: Callable[[bytes], None] | None = None,
        on_stderr: Callable[[bytes], None] | None = None,
        key: str | None = None,
        process: RealProcess | None = None,
    ) -> RealProcess:
        """Start `command` (a shell string run by `bash -c`, or an argv) in the tree's sandbox; returns at once.

        `env` adds to HOME/USER/LOGNAME/SHELL/PATH (the sleep shim stays first on PATH); `cwd` defaults to the
        user's home; `stdin=False` gives /dev/null; `pty=(cols, rows)` runs it on a pseudo-terminal. `key` names
        the sandbox (default: the tree's folder), what `stop` takes. `process`: a RealProcess made earlier (a
        front already holds it; its callbacks are used, and calls made on it so far are replayed). Needs a
        running asyncio loop.
        """
        if self._closed:
            raise RuntimeError("the shell is closed")
        name = key if key is not None else str(tree.root)
        proc = process or RealProcess(on_stdout=on_stdout, on_stderr=on_stderr, pty=pty is not None)
        if proc.done:
            return proc
        procs = self._procs.setdefault(name, set())
        procs.add(proc)
        proc.add_exit_callback(procs.discard)
        scale = self.time_scale if time_scale is None else float(time_scale)
        argv = self._command_argv(tree, command, env=env, cwd=cwd, memory_mb=memory_mb, pty=pty is not None)
        task = asyncio.get_running_loop().create_task(self._spawn(name, tree, scale, proc, argv, stdin, pty))
        task.add_done_callback(lambda t: _spawn_failed(t, proc))
        return proc

    def running(self, key: str) -> int:
        """How many commands of that sandbox are still running."""
        return len(self._procs.get(key, ()))

    def has_holder(self, key: str) -> bool:
        return key in self._holders

    def stop(self, key: str) -> None:
        """End every process of one sandbox (its holder, and with it its PID namespace). Idempotent."""
        holder = self._holders.pop(key, None)
        if holder is not None:
            if holder.done() and holder.exception() is None:
                holder.result().stop()
            else:
                holder.add_done_callback(_stop_when_started)
        for proc in list(self._procs.pop(key, ())):
            proc.kill()

    def close(self) -> None:
        """Stop every sandbox's processes and remove the shims."""
        self._closed = True
        for key in list(self._holders):
            self.stop(key)
        for key in list(self._procs):
            for proc in self._procs.pop(key):
                proc.kill()
        if self._shim_base is not None:
            shutil.rmtree(self._shim_base, ignore_errors=True)

    # --- plumbing ----------------------------------------------------------------------------------

    def _shim_dir(self, scale: float) -> Path:
        """A host folder holding the `sleep` shim for one time scale (bound read-only at SHIM_DIR)."""
        if self._shim_base is None:
            self._shim_base = Path(tempfile.mkdtemp(prefix="stampede-shims-"))
            self._shim_base.chmod(0o755)
            # removed at `close`, or when the shell is collected or the interpreter exits without one
            weakref.finalize(self, shutil.rmtree, self._shim_base, True)
        folder = self._shim_dirs.get(scale)
        if folder is None:
            folder = self._shim_dirs[scale] = _make_shim_dir(self._shim_base, scale)
        return folder

    def _command_argv(
        self,
        tree: SandboxTree,
        command: str | Sequence[str],
        *,
        env: Mapping[str, str] | None,
        cwd: str | None,
        memory_mb: int | None,
        pty: bool,
    ) -> list[str]:
        user = tree.user
        variables = {
            "HOME": user.home,
            "USER": user.name,
            "LOGNAME": user.name,
            "SHELL": "/bin/bash" if _HAS_BASH else "/bin/sh",
            "PATH": DEFAULT_PATH,
            **({"TERM": "xterm-256color"} if pty else {}),
            **(env or {}),
        }
        path = variables["PATH"]
        if not path.startswith(SHIM_DIR + ":") and path != SHIM_DIR:
            variables["PATH"] = f"{SHIM_DIR}:{path}" if path else SHIM_DIR
        workdir = tree.sandbox_path(cwd) if cwd else user.home
        if not cwd:
            with contextlib.suppress(OSError):
                tree.writable(workdir).mkdir(parents=True, exist_ok=True)
        shell = ["/bin/bash"] if _HAS_BASH else ["/bin/sh"]
        program = [*shell, "-c", command] if isinstance(command, str) else list(command)
        limit = ["/usr/bin/prlimit", f"--as={int(memory_mb) * 1024 * 1024}", "--"] if memory_mb else []
        session = ["/usr/bin/setsid", "--ctty"] if pty else ["/usr/bin/setsid"]
        # `env -C` changes directory after nsenter set the sandbox's root; a missing cwd fails as env says
        return [
            "/usr/bin/env",
            "-i",
            "-C",
            workdir,
            *(f"{k}={v}" for k, v in variables.items()),
            *session,
            *limit,
            *program,
        ]

    async def _holder(self, key: str, tree: SandboxTree, scale: float) -> _Holder:
        future = self._holders.get(key)
        if future is not None and future.done() and (future.exception() is not None or not future.result().alive):
            future = None  # its init died (killed from outside): the sandbox's processes went with it; start anew
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._holders[key] = future
            try:
                future.set_result(await self._start_holder(tree, scale))
            except BaseException as exc:
                if self._holders.get(key) is future:
                    del self._holders[key]
                future.set_exception(exc)
                future.exception()  # retrieved: the caller re-raises it
                raise
        return await asyncio.shield(future)

    async def _start_holder(self, tree: SandboxTree, scale: float) -> _Holder:
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
            str(self._shim_dir(scale)),
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
        return _Holder(transport, protocol, init_pid)

    async def _spawn(
        self,
        key: str,
        tree: SandboxTree,
        scale: float,
        proc: RealProcess,
        argv: list[str],
        stdin: bool,
        pty: tuple[int, int] | None,
    ) -> None:
        holder = await self._holder(key, tree, scale)
        if proc.done:  # killed while its sandbox's holder started
            return
        uid = str(tree.user.uid)
        enter = ["nsenter", "-t", str(holder.init_pid), "-U", "-m", "-p", "-n", "-i", "-u", "-C", "-r"]
        full = [*enter, "-S", uid, "-G", uid, "--", *argv]
        loop = asyncio.get_running_loop()
        protocol = _Protocol(proc)
        if pty is None:
            transport, _ = await loop.subprocess_exec(
                lambda: protocol,
                *full,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        else:
            master, slave = os.openpty()
            _set_size(slave, *pty)
            try:
                transport, _ = await loop.subprocess_exec(
                    lambda: protocol,
                    *full,
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    start_new_session=True,
                )
            finally:
                os.close(slave)
            os.set_blocking(master, False)
            proc._master = master
            protocol.open_pipes = set()

            def readable() -> None:
                try:
                    data = os.read(master, 65536)
                except BlockingIOError:
                    return
                except OSError:
                    data = b""
                if data:
                    proc._out(data)
                    return
                loop.remove_reader(master)
                protocol.open_pipes.discard(master)
                protocol._maybe_finish()

            loop.add_reader(master, readable)
        proc._transport = transport
        proc._started(transport.get_pid())
        if protocol.exit_code is not None:  # exited before we got here
            protocol._maybe_finish()


def _stop_when_started(future: asyncio.Future[_Holder]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().stop()


def _spawn_failed(task: asyncio.Task[None], proc: RealProcess) -> None:
    """A command that could not start ends with 127 (bash's "cannot execute") and the reason on stderr."""
    if task.cancelled():
        proc._finish(137)
        return
    exc = task.exception()
    if exc is not None:
        proc._err(f"stampede: could not start the command: {exc}\n".encode())
        proc._finish(127)


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


_HAS_BASH = Path("/bin/bash").exists()


def sleep_shim(scale: float) -> str:
    """The `sleep` shim's text for a time scale (what `/opt/stampede/bin/sleep` holds)."""
    return _SLEEP_SHIM.format(scale=repr(float(scale)))


def _make_shim_dir(base: Path, scale: float) -> Path:
    folder = base / f"scale-{scale!r}"
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "sleep"
    shim.write_text(sleep_shim(scale))
    shim.chmod(0o755)
    folder.chmod(0o755)
    return folder
