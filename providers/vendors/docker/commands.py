"""A command in a Docker container, for the `docker` adapter (`provider.py`): its streams, its exit code, its end.

The exec API gives the output on an attach stream and the exit code from inspect, a moment apart. When a command
ends badly, a local daemon's host says more than the daemon does yet: the container's cgroup counts OOM kills,
/proc shows whether its main process has exited, and a timed-out command's process tree can be killed (Docker has
no exec-kill call).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import psutil  # type: ignore[import-untyped]
from aiodocker.execs import Exec


async def collect_output(execution: Exec, on_frame: Callable[[bytes], None] | None = None) -> tuple[bytes, bytes]:
    """Start the exec attached and read its demultiplexed streams to the end (each frame also to `on_frame`, as it
    comes: a streamed exec's first byte)."""
    stdout, stderr = bytearray(), bytearray()
    async with execution.start(detach=False) as stream:
        while (message := await stream.read_out()) is not None:
            (stderr if message.stream == 2 else stdout).extend(message.data)
            if on_frame is not None and message.data:
                on_frame(message.data)
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
