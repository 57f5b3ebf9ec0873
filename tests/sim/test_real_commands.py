"""Real commands in simulated sandboxes (`[sandbox] commands = "real"`): a real shell in each sandbox's own tree.

What a user relies on: a command runs as bash runs it (pipes, substitutions, loops, heredocs, files kept from one
command to the next, background jobs, python3, raw bytes, exit codes, signals, stdin), `sleep N` lasts N vendor
seconds at the time scale, a timeout or the sandbox's end leaves no process behind, and one sandbox sees nothing
of another's, of the host's /usr (read-only) or of any network. Through the simulator and through Prime's own
SDK against the stub. Needs bubblewrap: skipped without it, a failure under CI=true (`.ci/run` installs it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from providers.sim.core.clock import LoopClock, VirtualClock
from providers.sim.core.execution.isolated_shell import IsolatedShell
from providers.sim.core.profile import load_profile
from providers.sim.core.records import ExecTicket
from providers.sim.core.sandbox_state.sandbox_tree import SandboxUser
from providers.sim.core.simulator import (
    CreateRequest,
    ExecOutcome,
    ExecTimedOut,
    SandboxDied,
    SandboxStatus,
    VendorSimulator,
)
from tests.docker_support import unavailable

ROOT = Path(__file__).resolve().parents[2]
SCALE = 0.1


@pytest.fixture(autouse=True)
def bwrap() -> None:
    if not IsolatedShell.available():
        unavailable("bubblewrap is not installed (apt-get install bubblewrap)")


@pytest.fixture
async def sim() -> AsyncIterator[VendorSimulator]:
    profile = load_profile("ideal").with_overrides({"sandbox.commands": "real"})
    simulator = VendorSimulator(profile, seed=3, clock=LoopClock(SCALE))
    yield simulator
    simulator.close()


async def running(sim: VendorSimulator, user: SandboxUser | None = None) -> str:
    sb = sim.create(CreateRequest(image="python:3.11", user=user, env={"FROM_CREATE": "yes"}))
    for _ in range(1000):
        if sim.get(sb.id).status == SandboxStatus.RUNNING:
            return sb.id
        await asyncio.sleep(0.01)
    raise AssertionError(f"sandbox {sb.id} never ran: {sim.get(sb.id).status}")


async def run(sim: VendorSimulator, sandbox_id: str, command: str, **kwargs: Any) -> ExecOutcome:
    return await sim.exec(sandbox_id, command, timeout_s=kwargs.pop("timeout_s", 600), **kwargs)


def start(
    sim: VendorSimulator, sandbox_id: str, command: str, **kwargs: Any
) -> tuple[ExecTicket, asyncio.Future[ExecOutcome | BaseException]]:
    done: asyncio.Future[ExecOutcome | BaseException] = asyncio.get_running_loop().create_future()

    def on_done(result: ExecOutcome | BaseException) -> None:
        if not done.done():
            done.set_result(result)

    ticket = sim.exec_start(sandbox_id, command, timeout_s=kwargs.pop("timeout_s", 600), on_done=on_done, **kwargs)
    return ticket, done


async def gone(pid: int) -> bool:
    """Is the process gone from /proc (given a few seconds for the kernel to tear a namespace down)?"""
    for _ in range(500):
        if not os.path.exists(f"/proc/{pid}"):
            return True
        await asyncio.sleep(0.01)
    return False


async def test_commands_run_as_bash_runs_them(sim: VendorSimulator) -> None:
    sb = await running(sim, SandboxUser())
    out = await run(sim, sb, "printf 'b\\na\\nc\\n' | sort | tr a-z A-Z | head -2; echo \"n=$(echo 1 2 3 | wc -w)\"")
    assert (out.exit_code, out.stdout, out.stderr) == (0, "A\nB\nn=3\n", "")
    out = await run(
        sim, sb, "for i in 1 2 3; do echo -n $i; done; i=0; while [ $i -lt 2 ]; do i=$((i+1)); done; echo $i"
    )
    assert out.stdout == "1232\n"
    out = await run(sim, sb, "cat > notes.txt <<'EOF'\nfirst $HOME\nsecond\nEOF\necho written", cwd="/home/user")
    assert out.stdout == "written\n"
    out = await run(sim, sb, "cat ~/notes.txt; cd; wc -l < notes.txt")  # the next command sees the file
    assert out.stdout == "first $HOME\nsecond\n2\n"
    out = await run(sim, sb, "(sleep 1; echo late) & (echo early) & wait; echo all")
    assert out.stdout.splitlines() == ["early", "late", "all"]
    out = await run(sim, sb, "python3 -c 'import sys, os; print(sys.version_info[0], os.getcwd(), os.getuid())'")
    assert out.stdout == "3 / 1000\n"  # the profile's default_cwd ("/" on ideal)
    out = await run(sim, sb, "id -un; echo $HOME $USER $FROM_CREATE $EXTRA", env={"EXTRA": "x"}, cwd="/tmp")
    assert out.stdout == "user\n/home/user user yes x\n"
    out = await run(sim, sb, "echo oops >&2; exit 42")
    assert (out.exit_code, out.stdout, out.stderr) == (42, "", "oops\n")
    out = await run(sim, sb, "nosuchcommand")
    assert out.exit_code == 127 and "command not found" in out.stderr


async def test_raw_bytes_reach_the_callbacks_as_they_are(sim: VendorSimulator) -> None:
    sb = await running(sim)
    chunks: list[bytes] = []
    out = await run(sim, sb, "printf '\\xe2'; printf 'x' >&2", on_stdout=chunks.append)
    assert b"".join(chunks) == b"\xe2"
    assert (out.stdout, out.stderr) == ("\ufffd", "x")  # the outcome's text: invalid UTF-8 replaced, as JSON needs


async def test_stdin_and_signals(sim: VendorSimulator) -> None:
    sb = await running(sim)
    ticket, done = start(sim, sb, "tr a-z A-Z; echo end", stdin=True)
    assert ticket.process is not None
    ticket.process.write_stdin(b"hello\n")  # before the overhead is over: kept until the process starts
    ticket.process.close_stdin()
    out = await done
    assert isinstance(out, ExecOutcome) and out.stdout == "HELLO\nend\n"

    ticket, done = start(sim, sb, "trap 'echo got-term; exit 3' TERM; echo ready; sleep 1000 & wait")
    assert ticket.process is not None
    while b"ready" not in ticket.process.stdout:
        await asyncio.sleep(0.01)
    ticket.process.signal(signal.SIGTERM)
    out = await done
    assert isinstance(out, ExecOutcome) and (out.exit_code, out.stdout) == (3, "ready\ngot-term\n")

    ticket, done = start(sim, sb, "echo ready; exec sleep 1000")
    assert ticket.process is not None
    while b"ready" not in ticket.process.stdout:
        await asyncio.sleep(0.01)
    ticket.process.signal(signal.SIGINT)
    out = await done
    assert isinstance(out, ExecOutcome) and out.exit_code == 128 + signal.SIGINT


async def test_a_pty_is_a_terminal_of_the_asked_size(sim: VendorSimulator) -> None:
    sb = await running(sim)
    _, done = start(sim, sb, "test -t 0 && stty size; echo $TERM", pty=(120, 40))
    out = await done
    assert isinstance(out, ExecOutcome) and out.stdout.replace("\r\n", "\n") == "40 120\nxterm-256color\n"
    ticket, done = start(sim, sb, "stty -echo; echo ready; read line; stty size; echo got $line", pty=(80, 24))
    assert ticket.process is not None
    while b"ready" not in ticket.process.stdout:
        await asyncio.sleep(0.01)
    ticket.process.resize(100, 30)
    ticket.process.write_stdin(b"typed\n")
    out = await done
    assert isinstance(out, ExecOutcome) and out.stdout.replace("\r\n", "\n") == "ready\n30 100\ngot typed\n"


async def test_sleep_lasts_vendor_seconds_at_the_time_scale(sim: VendorSimulator) -> None:
    sb = await running(sim)
    began = time.perf_counter()
    out = await run(sim, sb, "sleep 2 3s; echo slept")
    real = time.perf_counter() - began
    assert out.stdout == "slept\n" and out.exit_code == 0
    assert out.duration_s >= 5.0  # vendor seconds: the overhead and 5 s of sleep
    assert real < 5.0  # 5 vendor seconds at 0.1 play in about 0.5 real ones
    out = await run(sim, sb, "sleep 1x")
    assert out.exit_code == 1 and "invalid time interval" in out.stderr  # bad input: coreutils' own answer


async def test_a_timeout_kills_the_command_and_leaves_nothing(sim: VendorSimulator) -> None:
    sb = await running(sim)
    ticket, done = start(sim, sb, "echo ready; sleep 1000", timeout_s=30)
    assert ticket.process is not None
    while b"ready" not in ticket.process.stdout:
        await asyncio.sleep(0.01)
    command_pid = ticket.process._group()
    assert command_pid is not None and ticket.process.pid is not None
    result = await done
    assert isinstance(result, ExecTimedOut)
    await ticket.process.wait()
    assert await gone(command_pid) and await gone(ticket.process.pid)
    out = await run(sim, sb, "ps -eo comm= | grep -c '^sleep' || true")
    assert out.stdout == "0\n"  # nothing of it is left in the sandbox either


async def test_background_jobs_outlive_their_command_until_the_sandbox_ends(sim: VendorSimulator) -> None:
    sb = await running(sim)
    out = await run(sim, sb, "nohup sh -c 'echo $$ > /tmp/job.pid; sleep 1000' > /dev/null 2>&1 & echo started")
    assert out.stdout == "started\n"
    out = await run(sim, sb, "sleep 1; kill -0 $(cat /tmp/job.pid) && echo alive")
    assert out.stdout == "alive\n"
    ticket, done = start(sim, sb, "echo ready; sleep 1000")
    assert ticket.process is not None
    while b"ready" not in ticket.process.stdout:
        await asyncio.sleep(0.01)
    command_pid = ticket.process._group()
    assert command_pid is not None
    shell = sim.real_shell
    assert shell is not None and shell.has_holder(sb)
    sim.terminate(sb)
    result = await done
    assert isinstance(result, SandboxDied)
    assert await gone(command_pid)
    assert not shell.has_holder(sb) and shell.running(sb) == 0


async def test_a_pause_ends_the_processes_and_keeps_the_files(sim: VendorSimulator) -> None:
    sb = await running(sim, SandboxUser())
    await run(sim, sb, "echo kept > ~/state")
    ticket, done = start(sim, sb, "echo ready; sleep 1000")
    assert ticket.process is not None
    while b"ready" not in ticket.process.stdout:
        await asyncio.sleep(0.01)
    command_pid = ticket.process._group()
    assert command_pid is not None
    sim.pause(sb)
    assert isinstance(await done, SandboxDied)
    assert await gone(command_pid)
    sim.resume(sb)
    for _ in range(1000):
        if sim.get(sb).status == SandboxStatus.RUNNING:
            break
        await asyncio.sleep(0.01)
    out = await run(sim, sb, "cat ~/state; pgrep -c sleep || true")
    assert out.stdout == "kept\n0\n"


async def test_sandboxes_are_isolated(sim: VendorSimulator) -> None:
    a, b = await running(sim, SandboxUser()), await running(sim, SandboxUser())
    await run(sim, a, "echo secret > /tmp/only-a; echo home > ~/only-a")
    out = await run(sim, b, "ls /tmp ~; cat /tmp/only-a")
    assert "only-a" not in out.stdout and out.exit_code == 1
    out = await run(sim, a, "touch /usr/bin/mine || echo refused; touch /etc/ok && echo etc-is-the-sandboxs")
    assert "Read-only file system" in out.stderr and out.stdout == "refused\netc-is-the-sandboxs\n"
    assert not Path("/usr/bin/mine").exists()
    with socket.socket() as listener:  # a server on the host's loopback: a sandbox's own loopback is another
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('reached')"
        out = await run(sim, a, f'python3 -c "{probe}" 2>/dev/null || echo unreachable')
    assert out.stdout == "unreachable\n"
    out = await run(sim, a, 'python3 -c "import socket; print(socket.gethostname())"; ps -e | wc -l')
    assert out.stdout.split()[0] == "sandbox" and int(out.stdout.split()[1]) < 10  # its own UTS and PID spaces


async def test_a_root_sandbox_runs_as_root_in_its_own_tree(sim: VendorSimulator) -> None:
    sb = await running(sim)  # no user: root, as Prime and Modal
    out = await run(sim, sb, "id -u; echo $HOME; pwd; touch /made-by-root && echo ok")
    assert out.stdout == "0\n/root\n/\nok\n"
    assert not Path("/made-by-root").exists()
    assert (sim.tree(sb).root / "made-by-root").exists()


async def test_memory_limit_fails_the_allocation_not_the_sandbox(sim: VendorSimulator) -> None:
    sb = await running(sim)
    out = await run(sim, sb, "python3 -c 'bytearray(8 * 1024**3)'")
    assert out.exit_code == 1 and "MemoryError" in out.stderr
    assert sim.get(sb).status == SandboxStatus.RUNNING


def test_a_virtual_clock_keeps_commands_modelled() -> None:
    profile = load_profile("ideal").with_overrides({"sandbox.commands": "real"})
    sim = VendorSimulator(profile, seed=1, clock=VirtualClock())
    sb = sim.create(CreateRequest(image="x"))
    clock = sim.clock
    assert isinstance(clock, VirtualClock)
    while sim.get(sb.id).status != SandboxStatus.RUNNING:
        clock.run_until(clock.now() + 1)
    results: list[ExecOutcome | BaseException] = []
    sim.exec_start(sb.id, "echo hi", timeout_s=60, on_done=results.append)
    clock.run_until(clock.now() + 60)
    assert [r.stdout for r in results if isinstance(r, ExecOutcome)] == ["hi\n"]
    assert sim.real_shell is None
    sim.close()


async def test_modelled_commands_start_no_process() -> None:
    sim = VendorSimulator(load_profile("ideal"), seed=1, clock=LoopClock(SCALE))
    sb = await running(sim)
    out = await run(sim, sb, "echo hi")
    assert out.stdout == "hi\n" and sim.real_shell is None
    sim.close()


def test_serve_with_real_commands_but_no_bubblewrap_says_what_to_install(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "providers.sim.e2b.serve", "--commands", "real"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "python -m providers.sim.e2b.serve: error: real commands need bubblewrap: apt-get install bubblewrap"
    ]


async def test_prime_sdk_runs_real_commands_and_background_jobs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from prime_sandboxes import AsyncSandboxClient, CreateSandboxRequest

    from providers.sim.prime.api import StubSettings, start_stub

    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("PRIME_TEAM_ID", "PRIME_CONTEXT", "PRIME_BASE_URL", "PRIME_USER_ID"):
        monkeypatch.delenv(name, raising=False)
    settings = StubSettings(
        profile="ideal", seed=5, token="real-token", overrides=(("sandbox.commands", "real"),), time_scale=SCALE
    )
    stub = await start_stub(settings)
    monkeypatch.setenv("PRIME_API_BASE_URL", stub.url)
    monkeypatch.setenv("PRIME_API_KEY", "real-token")
    client = AsyncSandboxClient(api_key="real-token")
    try:
        box = await client.create(CreateSandboxRequest(name="real", docker_image="python:3.11-slim"))
        await client.wait_for_creation(box.id)
        result = await client.execute_command(box.id, "seq 1 5 | paste -sd+ | bc 2>/dev/null || echo $((1+2+3+4+5))")
        assert (result.exit_code, result.stdout.strip()) == (0, "15")
        await client.execute_command(box.id, "mkdir -p /work && echo state > /work/kept")
        result = await client.execute_command(box.id, "cat kept", working_dir="/work")
        assert result.stdout == "state\n"
        job = await client.start_background_job(box.id, "sleep 2; echo from-job; exit 4")
        for _ in range(600):
            status = await client.get_background_job(box.id, job)
            if status.completed:
                break
            await asyncio.sleep(0.05)
        assert status.completed and status.exit_code == 4
        assert status.stdout == "from-job\n"  # the SDK reads the log's tail (a negative offset) through the gateway
        result = await client.execute_command(box.id, f"cat {job.stdout_log_file}")
        assert result.stdout == "from-job\n"
    finally:
        await client.aclose()
        await stub.close()
