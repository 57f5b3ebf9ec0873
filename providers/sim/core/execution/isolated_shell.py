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

The parts: `real_process.py` (what a caller holds), `sandbox_holder.py` (the bwrap init per sandbox),
`sleep_shim.py` (the time-scaled `sleep`); this module starts commands in them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from providers.sim.core.execution.real_process import CommandProtocol, RealProcess, set_pty_size
from providers.sim.core.execution.sandbox_holder import Holder, start_holder, stop_when_started
from providers.sim.core.execution.sleep_shim import SHIM_DIR, make_shim_dir
from providers.sim.core.sandbox_state.sandbox_tree import SandboxTree

__all__ = ["MISSING", "IsolatedShell", "RealProcess"]

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MISSING = "real commands need bubblewrap: apt-get install bubblewrap"
_HAS_BASH = Path("/bin/bash").exists()


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
        self._holders: dict[str, asyncio.Future[Holder]] = {}
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
                holder.add_done_callback(stop_when_started)
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
            folder = self._shim_dirs[scale] = make_shim_dir(self._shim_base, scale)
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

    async def _holder(self, key: str, tree: SandboxTree, scale: float) -> Holder:
        future = self._holders.get(key)
        if future is not None and future.done() and (future.exception() is not None or not future.result().alive):
            future = None  # its init died (killed from outside): the sandbox's processes went with it; start anew
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._holders[key] = future
            try:
                future.set_result(await start_holder(tree, self._shim_dir(scale)))
            except BaseException as exc:
                if self._holders.get(key) is future:
                    del self._holders[key]
                future.set_exception(exc)
                future.exception()  # retrieved: the caller re-raises it
                raise
        return await asyncio.shield(future)

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
        protocol = CommandProtocol(proc)
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
            set_pty_size(slave, *pty)
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


def _spawn_failed(task: asyncio.Task[None], proc: RealProcess) -> None:
    """A command that could not start ends with 127 (bash's "cannot execute") and the reason on stderr."""
    if task.cancelled():
        proc._finish(137)
        return
    exc = task.exception()
    if exc is not None:
        proc._err(f"stampede: could not start the command: {exc}\n".encode())
        proc._finish(127)
