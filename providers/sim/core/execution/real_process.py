"""One real command's process as a front sees it (`RealProcess`): output callbacks as it arrives, the first
`OUTPUT_CAP` bytes of each stream kept, stdin through a pipe or the pty, signals to its whole process group, a pty's
size, and its exit code (128+N for signal N). `isolated_shell.py` starts it inside a sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import struct
import termios
from collections.abc import Callable
from pathlib import Path
from typing import Any

OUTPUT_CAP = 16 * 1024 * 1024
"""Bytes of each stream (stdout, stderr) a RealProcess keeps; callbacks see everything."""
DRAIN_S = 0.05
"""Real seconds to wait, after a command exits, for output still in flight from processes that hold its pipes
(a background job that kept stdout): the command is over, so what arrives later is not its output."""


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
            set_pty_size(self._master, cols, rows)

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


class CommandProtocol(asyncio.SubprocessProtocol):
    """A command's pipes: output to its RealProcess, its end once it exited and its pipes closed (or the drain
    after the exit ran out)."""

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


def set_pty_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
