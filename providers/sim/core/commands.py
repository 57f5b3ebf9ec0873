"""One command in a simulated sandbox: its fate drawn per (seed, sandbox, command number), its output from
the tiny shell (`shell.py`), its outcome (done, timeout, transient error, crash, OOM) scheduled on the clock.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Generic, Protocol, TypeVar

from providers.sim.core.clock import SimClock
from providers.sim.core.draws import Stream
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
from providers.sim.core.shell import DEFAULT_PATH, run_shell


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

    def _end(self, sb: SimSandbox, status: SandboxStatus, error_type: str | None, message: str | None) -> None: ...


def start_command(
    sim: CommandHost,
    sb: SimSandbox,
    command: str,
    *,
    timeout_s: float,
    on_done: Callable[[ExecOutcome | BaseException], None],
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> ExecTicket:
    """`VendorSimulator.exec_start` for a sandbox it found: draw the command's fate, schedule its outcome."""
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
    full_env = {"PATH": DEFAULT_PATH, "HOME": "/root", "HOSTNAME": sb.id[:12], **sb.env, **(env or {})}
    result = run_shell(command, env=full_env, cwd=cwd or sim.profile.exec.default_cwd, memory_mb=sb.memory_mb)
    total = overhead + result.duration_s
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
