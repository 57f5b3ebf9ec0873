"""One command in a simulated sandbox: its fate drawn per (seed, sandbox, command number), its output from
the tiny shell (`shell.py`), its outcome (done, timeout, transient error, crash, OOM) scheduled on the clock.
Every answer is held `[sandbox] exec_overhead_s` after the command's output ended (a fixed per-command overhead, as
OpenSandbox's execd held each answer 1 s), on top of `[exec]`'s drawn overhead before it starts.

With the profile's `[sandbox] commands = "real"` on a live clock, the command runs for real in the sandbox's
own tree (`isolated_shell.py`): the drawn overhead comes first (vendor seconds), then the process; its exit
code, output and duration make the ExecOutcome (the process's real time over the time scale: vendor seconds as
the sleep shim counts them, even while the clock plays a burst's opening wave 1:1). The drawn fates still
apply: a transient error answers at the end of the overhead instead of starting it; a crash or OOM ends the
sandbox when the process ends (its answer never arrives); the timeout (vendor seconds, on the same measure)
kills the process. On a VirtualClock nothing real can run in virtual time, so commands stay modelled there
(the offline experiments).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Generic, Protocol, TypeVar

from providers.sim.core.clock import LoopClock, SimClock, TimerHandle
from providers.sim.core.draws import Stream
from providers.sim.core.execution.isolated_shell import MISSING, IsolatedShell, RealProcess
from providers.sim.core.execution.shell import DEFAULT_PATH, run_shell
from providers.sim.core.profile import Profile
from providers.sim.core.records import (
    _RUNNING,
    ErrorType,
    ExecError,
    ExecOutcome,
    ExecTicket,
    ExecTimedOut,
    NotRunning,
    SandboxStatus,
    SimSandbox,
)
from providers.sim.core.sandbox_state.sandbox_tree import SandboxTree


class _HasPid(Protocol):
    @property
    def pid(self) -> int: ...


Running = TypeVar("Running", bound=_HasPid)


class RunningCommands(Generic[Running]):
    """The commands a front's command service has running, per sandbox, by a pid unique across the front (so a
    sandbox that ends leaves nothing to forget but its own entry). The fronts keep their own records (E2B's
    processes, Prime's command sessions) and their own ways of naming one; the bookkeeping is this."""

    def __init__(self, first_pid: int = 100) -> None:
        self._by_sandbox: dict[str, dict[int, Running]] = {}
        self._pids = itertools.count(first_pid)

    def next_pid(self) -> int:
        return next(self._pids)

    def add(self, sandbox_id: str, command: Running) -> Running:
        self._by_sandbox.setdefault(sandbox_id, {})[command.pid] = command
        return command

    def remove(self, sandbox_id: str, command: Running) -> None:
        running = self._by_sandbox.get(sandbox_id)
        if running is not None:
            running.pop(command.pid, None)
            if not running:
                del self._by_sandbox[sandbox_id]

    def of(self, sandbox_id: str) -> dict[int, Running]:
        """The sandbox's running commands by pid (empty when none)."""
        return self._by_sandbox.get(sandbox_id, {})


class CommandHost(Protocol):
    """What a command needs of the simulator that runs it (the simulator is one; no import of it here)."""

    profile: Profile
    seed: int
    clock: SimClock
    exec_counts: Counter[str]
    real_shell: IsolatedShell | None

    def _end(self, sb: SimSandbox, status: SandboxStatus, error_type: str | None, message: str | None) -> None: ...

    def tree(self, sandbox_id: str) -> SandboxTree: ...

    def add_listener(self, callback: Callable[[SimSandbox], None]) -> None: ...


def start_command(
    sim: CommandHost,
    sb: SimSandbox,
    command: str,
    *,
    timeout_s: float,
    on_done: Callable[[ExecOutcome | BaseException], None],
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    on_stdout: Callable[[bytes], None] | None = None,
    on_stderr: Callable[[bytes], None] | None = None,
    stdin: bool = False,
    pty: tuple[int, int] | None = None,
) -> ExecTicket:
    """`VendorSimulator.exec_start` for a sandbox it found: draw the command's fate, schedule its outcome.

    `on_stdout`, `on_stderr`, `stdin` and `pty` (cols, rows) matter to real commands only: a modelled command's
    output arrives whole in its ExecOutcome."""
    if sb._phase != _RUNNING:
        raise NotRunning(sb.id, sb.status, sb.error_type, sb.error_message)
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    k = sb.exec_count
    sb.exec_count += 1
    errors = sim.profile.errors
    draws = Stream(sim.seed, "exec", sb.seq, k)
    overhead = draws.lognormal(sim.profile.exec.overhead_median_s, sim.profile.exec.overhead_sigma)
    fails = draws.chance(errors.exec_error_prob)
    dies = draws.chance(errors.exec_death_prob)
    ooms = draws.chance(errors.exec_oom_prob)
    when_frac = draws.uniform()
    if sim.profile.sandbox.commands == "real" and isinstance(sim.clock, LoopClock):
        real = _RealCommand(sim, sb, command, overhead, fails, dies or ooms, ooms, timeout_s, on_done)
        return real.start(env=env, cwd=cwd, on_stdout=on_stdout, on_stderr=on_stderr, stdin=stdin, pty=pty)
    full_env = {"PATH": DEFAULT_PATH, "HOME": "/root", "HOSTNAME": sb.id[:12], **sb.env, **(env or {})}
    result = run_shell(command, env=full_env, cwd=cwd or sim.profile.exec.default_cwd, memory_mb=sb.memory_mb)
    total = overhead + result.duration_s + sim.profile.sandbox.exec_overhead_s  # the answer held after the output
    now = sim.clock.now()
    # the earliest of these happens; ties resolve in this order
    events: list[tuple[float, int, str]] = [(now + total, 5, "done"), (now + timeout_s, 4, "timeout")]
    if fails:
        events.append((now + overhead, 0, "error"))
    if dies:
        events.append((now + when_frac * total, 1, "crash"))
    if ooms:
        events.append((now + when_frac * total, 2, "oom"))
    if result.oom_at_s is not None:
        events.append((now + overhead + result.oom_at_s, 3, "memhog"))
    when, _, kind = min(events)
    ticket = ExecTicket(sb, on_done)
    sb._execs[ticket] = None

    def fire() -> None:
        if ticket.done:
            return
        if kind == "done":
            sim.exec_counts["ok"] += 1
            sb.exec_busy_s += total
            if sb.first_exec_done_at is None:
                sb.first_exec_done_at = sim.clock.now()
                sb.first_exec_started_at = now
            ticket.resolve(ExecOutcome(result.exit_code, result.stdout, result.stderr, total))
        elif kind == "timeout":
            sim.exec_counts["timeout"] += 1
            ticket.resolve(ExecTimedOut(sb.id, timeout_s))
        elif kind == "error":
            sim.exec_counts["error"] += 1
            ticket.resolve(ExecError(sb.id, "Transient error while running the command"))
        elif kind == "crash":
            sim.exec_counts["died"] += 1
            sim._end(
                sb,
                SandboxStatus.ERROR,
                ErrorType.SANDBOX_CRASHED,
                "Sandbox crashed while running a command",
            )
        else:
            sim.exec_counts["oom"] += 1
            mb = result.oom_mb if kind == "memhog" and result.oom_mb is not None else None
            detail = f" ({mb:g} MiB requested)" if mb is not None else ""
            sim._end(
                sb,
                SandboxStatus.ERROR,
                ErrorType.OOM_KILLED,
                f"Sandbox was killed: out of memory, limit {sb.memory_mb} MiB{detail}",
            )

    if math.isfinite(when):
        ticket.timer = sim.clock.call_at(when, fire)
    return ticket


def real_shell_of(sim: CommandHost) -> IsolatedShell:
    """The simulator's real shell, made on its first real command; a sandbox that stops RUNNING (ended, paused)
    loses its processes. Raises RuntimeError naming the Debian package when bubblewrap is missing."""
    shell = sim.real_shell
    if shell is None:
        if not IsolatedShell.available():
            raise RuntimeError(MISSING)
        shell = sim.real_shell = IsolatedShell(time_scale=sim.clock.time_scale)

        def stopped(sb: SimSandbox) -> None:
            if sb.status != SandboxStatus.RUNNING:
                shell.stop(sb.id)

        sim.add_listener(stopped)
    return shell


class _Timers:
    """Both of a real command's pending timers (its start after the overhead, its timeout), as one handle."""

    __slots__ = ("handles",)

    def __init__(self) -> None:
        self.handles: list[TimerHandle] = []

    def cancel(self) -> None:
        for handle in self.handles:
            handle.cancel()


class _RealCommand:
    """One real command's course: overhead, then the process in the sandbox's tree, its fates on the clock."""

    def __init__(
        self,
        sim: CommandHost,
        sb: SimSandbox,
        command: str,
        overhead: float,
        fails: bool,
        dies: bool,
        ooms: bool,
        timeout_s: float,
        on_done: Callable[[ExecOutcome | BaseException], None],
    ) -> None:
        self.sim = sim
        self.sb = sb
        self.command = command
        self.overhead = overhead
        self.fails = fails
        self.dies = dies
        self.ooms = ooms
        self.timeout_s = timeout_s
        self.ticket = ExecTicket(sb, on_done)
        self.timers = _Timers()  # its start after the overhead, its timeout, the answer's hold
        self.accepted_at = sim.clock.now()
        self.loop = asyncio.get_running_loop()
        self.started_real = self.loop.time()

    def start(
        self,
        *,
        env: Mapping[str, str] | None,
        cwd: str | None,
        on_stdout: Callable[[bytes], None] | None,
        on_stderr: Callable[[bytes], None] | None,
        stdin: bool,
        pty: tuple[int, int] | None,
    ) -> ExecTicket:
        sim, sb, ticket = self.sim, self.sb, self.ticket
        shell = real_shell_of(sim)
        tree = sim.tree(sb.id)
        workdir = cwd or sim.profile.exec.default_cwd
        if not cwd:
            with contextlib.suppress(OSError):
                tree.writable(workdir).mkdir(parents=True, exist_ok=True)
        process = RealProcess(on_stdout=on_stdout, on_stderr=on_stderr, pty=pty is not None)
        process.add_exit_callback(self._exited)
        ticket.process = process
        sb._execs[ticket] = None
        timers = self.timers
        ticket.timer = timers
        now = self.accepted_at

        def begin() -> None:
            if ticket.done:
                return
            if self.fails:
                sim.exec_counts["error"] += 1
                ticket.resolve(ExecError(sb.id, "Transient error while running the command"))
                return
            self.started_real = self.loop.time()
            shell.start(
                tree,
                self.command,
                env={**sb.env, **(env or {})},
                cwd=workdir,
                stdin=stdin,
                pty=pty,
                memory_mb=sb.memory_mb,
                key=sb.id,
                process=process,
            )

        def timed_out() -> None:
            if not ticket.done:
                sim.exec_counts["timeout"] += 1
                ticket.resolve(ExecTimedOut(sb.id, self.timeout_s))  # resolving kills the process

        timers.handles.append(sim.clock.call_at(now + self.overhead, begin))
        if math.isfinite(self.timeout_s):
            # on the process's own time, as the sleep shim: `sleep 5` with a 3 s timeout times out even while the
            # clock plays a burst's opening wave 1:1 (clock.py)
            timers.handles.append(self.loop.call_later(self.timeout_s * sim.clock.time_scale, timed_out))
        return ticket

    def _exited(self, process: RealProcess) -> None:
        sim, sb, ticket = self.sim, self.sb, self.ticket
        if ticket.done:
            return
        now = sim.clock.now()
        # vendor seconds as the command lived them: real time over the time scale (the sleep shim's measure)
        total = self.overhead + (self.loop.time() - self.started_real) / sim.clock.time_scale
        if self.dies:
            kind = "oom" if self.ooms else "died"
            sim.exec_counts[kind] += 1
            if self.ooms:
                message = f"Sandbox was killed: out of memory, limit {sb.memory_mb} MiB"
                sim._end(sb, SandboxStatus.ERROR, ErrorType.OOM_KILLED, message)
            else:
                message = "Sandbox crashed while running a command"
                sim._end(sb, SandboxStatus.ERROR, ErrorType.SANDBOX_CRASHED, message)
            return
        hold = sim.profile.sandbox.exec_overhead_s
        if hold > 0:  # the answer is held after the last output (OpenSandbox's execd: 1 s)
            self.timers.handles.append(sim.clock.call_at(now + hold, lambda: self._answer(process, total + hold)))
            return
        self._answer(process, total)

    def _answer(self, process: RealProcess, total: float) -> None:
        sim, sb, ticket = self.sim, self.sb, self.ticket
        if ticket.done:
            return
        now = sim.clock.now()
        sim.exec_counts["ok"] += 1
        sb.exec_busy_s += total
        if sb.first_exec_done_at is None:
            sb.first_exec_done_at = now
            sb.first_exec_started_at = self.accepted_at
        code = process.returncode if process.returncode is not None else 1
        ticket.resolve(ExecOutcome(code, process.stdout_text, process.stderr_text, total))
