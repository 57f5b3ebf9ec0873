"""A command in a Docker container, for the `docker` adapter (`provider.py`): its streams, its exit code, its end
(an exec call that failed, the container dying under it, the OOM killer, a timed-out command killed).

The exec API gives the output on an attach stream and the exit code from inspect, a moment apart. When a command
ends badly, a local daemon's host says more than the daemon does yet: the container's cgroup counts OOM kills,
/proc shows whether its main process has exited, and a timed-out command's process tree can be killed (Docker has
no exec-kill call).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import aiodocker
import aiohttp
import psutil  # type: ignore[import-untyped]
from aiodocker.exceptions import DockerError
from aiodocker.execs import Exec

from providers.base import FailureKind, Phase, ProviderError
from providers.vendors.docker.errors import TRANSPORT_STATUS, docker_error_kind, short_error
from providers.vendors.docker.sandbox import Sandbox, running

SIGKILL_EXIT = 128 + 9
RUNTIME_REFUSED_EXIT = 126  # docker's exit code when the runtime could not start the exec'd command
DYING_HINTS = (b"stopped state", b"not running", b" not found: not found", b"container not found")
"""What a 126 answer says when the container was dying under the command (an exec into a stopped one)."""


async def collect_output(execution: Exec, on_frame: Callable[[int, bytes], None] | None = None) -> tuple[bytes, bytes]:
    """Start the exec attached and read its demultiplexed streams to the end (each frame also to `on_frame` with its
    stream, 1 stdout or 2 stderr, as it comes: a streamed exec's first byte)."""
    stdout, stderr = bytearray(), bytearray()
    async with execution.start(detach=False) as stream:
        while (message := await stream.read_out()) is not None:
            (stderr if message.stream == 2 else stdout).extend(message.data)
            if on_frame is not None and message.data:
                on_frame(2 if message.stream == 2 else 1, message.data)
    return bytes(stdout), bytes(stderr)


async def exec_exit_code(execution: Exec) -> int:
    """The exit code; the attach stream can close a moment before the daemon records the exit."""
    delay = 0.002
    while True:
        info = await execution.inspect()
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"])
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)


def parse_oom_kills(text: str) -> int | None:
    """`oom_kill N` from cgroup v1 memory.oom_control or v2 memory.events."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "oom_kill" and parts[1].isdigit():
            return int(parts[1])
    return None


def host_oom_kills(pid: int) -> int | None:
    """Read the OOM counter of the cgroup a local container's process lives in."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            candidates.append(f"/sys/fs/cgroup/memory{path}/memory.oom_control")
        elif controllers == "":
            candidates.append(f"/sys/fs/cgroup{path}/memory.events")
    for candidate in candidates:
        try:
            with open(candidate, encoding="utf-8") as handle:
                count = parse_oom_kills(handle.read())
        except OSError:
            continue
        if count is not None:
            return count
    return None


def kill_tree(pid: int, container_id: str) -> None:
    """SIGKILL a process and its descendants, after checking it is in this container's cgroup."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
            if container_id not in handle.read():
                return  # the pid was reused: never kill a stranger
        root = psutil.Process(pid)
        victims = [root, *root.children(recursive=True)]
    except (OSError, psutil.Error):
        return
    for victim in victims:
        try:
            victim.kill()
        except psutil.Error:
            pass


def main_process_gone(state: Mapping[str, Any]) -> bool:
    """The container's main process (its host pid, on a local daemon) has exited, whatever the daemon says yet."""
    pid = int(state.get("Pid") or 0)
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            fields = handle.read().rsplit(")", 1)[-1].split()
    except OSError:
        return True
    return bool(fields) and fields[0] in {"Z", "X"}  # a zombie waits for its shim: it has exited


async def exec_failure(docker: aiodocker.Docker, exc: DockerError, box: Sandbox) -> ProviderError:
    """Why an exec call failed: a gone or stopped container is a death (or OOM), the rest exec_error."""
    if exc.status == TRANSPORT_STATUS:
        return ProviderError(FailureKind.TRANSPORT, f"exec: {short_error(exc)}")
    if exc.status == 404 or "not running" in exc.message:
        try:
            state = (await docker.containers.container(box.container_id).show())["State"]
        except DockerError as again:
            if again.status == TRANSPORT_STATUS:
                return ProviderError(FailureKind.TRANSPORT, f"exec: {short_error(again)}")
            state = {"Status": "removed"}
        return box.death(state, Phase.EXEC)
    return ProviderError(docker_error_kind(exc, Phase.EXEC), f"exec: {short_error(exc)}")


async def check_exit(
    docker: aiodocker.Docker, box: Sandbox, exit_code: int, stdout: bytes, *, local_pids: bool
) -> None:
    """Raise `oom` / `died_*` when a command's exit code says the container may have died under it."""
    if exit_code in (SIGKILL_EXIT, RUNTIME_REFUSED_EXIT):
        # SIGKILL: the OOM killer, or the container dying under the command. 126: the runtime could not
        # start the command; a dying container is one reason ("cannot exec in a stopped state").
        dying = exit_code == SIGKILL_EXIT or any(hint in stdout for hint in DYING_HINTS)
        await check_killed(docker, box, local_pids=local_pids, count_ooms=exit_code == SIGKILL_EXIT, patient=dying)


async def check_killed(
    docker: aiodocker.Docker, box: Sandbox, *, local_pids: bool, count_ooms: bool, patient: bool
) -> None:
    """Raise `oom` / `died_*` when an exec's end was the container dying or the OOM killer."""
    container = docker.containers.container(box.container_id)
    # The exec can end a moment before the daemon marks a dying container exited: look a few times. On a
    # loaded machine the daemon can take longer than that; on a local daemon the host then says whether the
    # container's main process has exited.
    gone = False
    for pause in (0.0, 0.05, 0.1, 0.2) if patient else (0.0,):
        await asyncio.sleep(pause)
        try:
            state = (await container.show())["State"]
        except DockerError as exc:
            if exc.status == 404:
                raise box.death({"Status": "removed"}, Phase.EXEC) from None
            return  # the command's exit code stands; the next call will tell what happened
        if not running(state):
            raise box.death(state, Phase.EXEC)
        gone = local_pids and main_process_gone(state)
        if gone:
            continue  # the daemon has yet to record how it ended (an OOM kill, say): look again
        kills = await oom_kills(docker, state, box, local_pids=local_pids) if count_ooms else None
        if kills is not None and kills > box.oom_kills:
            box.oom_kills = kills
            raise ProviderError(FailureKind.OOM, f"command killed by the OOM killer (memory limit {box.memory_mb} MB)")
    if gone:  # the daemon still says running, but the host says its main process has exited
        raise box.death({"Status": "stopped (its main process is gone)"}, Phase.EXEC)


async def oom_kills(
    docker: aiodocker.Docker, state: Mapping[str, Any], box: Sandbox, *, local_pids: bool
) -> int | None:
    """The container's cgroup oom_kill count: read on the host when local, else from inside."""
    pid = int(state.get("Pid") or 0)
    if local_pids and pid:
        count = host_oom_kills(pid)
        if count is not None:
            return count
    try:
        container = docker.containers.container(box.container_id)
        probe = await container.exec(
            ["cat", "/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"],
            stdout=True,
            stderr=False,
        )
        async with asyncio.timeout(10):
            out, _ = await collect_output(probe)
    except (DockerError, aiohttp.ClientError, OSError, TimeoutError):
        return None
    return parse_oom_kills(out.decode("utf-8", "replace"))


async def kill_exec(execution: Exec, box: Sandbox, *, local_pids: bool) -> None:
    """Best effort: SIGKILL the timed-out command and its children (Docker has no exec-kill call)."""
    if not local_pids:
        return  # a remote daemon: the processes go with the sandbox at terminate
    try:
        async with asyncio.timeout(5):
            pid = int((await execution.inspect()).get("Pid") or 0)
    except (DockerError, aiohttp.ClientError, OSError, TimeoutError):
        return
    if pid:
        await asyncio.to_thread(kill_tree, pid, box.container_id)
