"""One docker sandbox's state on this side: which container it is, what it was given and what was seen of it,
kept in `SandboxRef.handle` (the ref itself is frozen); the lifecycle (`provider.py`) and a command's end
(`commands.py`) both read and update it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from providers.base import Phase, ProviderError, SandboxRef, SandboxSpec
from providers.vendors.docker.errors import container_death


@dataclass(slots=True)
class Sandbox:
    """Mutable per-sandbox state, kept in `SandboxRef.handle` (the ref itself is frozen)."""

    container_id: str
    memory_mb: int = 0
    owner: Mapping[str, str] = field(default_factory=dict)  # its owner labels, which its snapshots carry too
    pending: tuple[dict[str, Any], str] | None = None  # (config, name): created once its image is pulled
    workdir: str | None = None  # where relative file paths lead (asked once)
    terminated: bool = False
    started: bool = False
    execs_ok: int = 0  # a container that dies before any command ran was never usable
    oom_kills: int = 0  # last cgroup oom_kill count seen, so an old OOM is not blamed on a new exit

    def death(self, state: Mapping[str, Any], phase: Phase) -> ProviderError:
        """This container found gone or stopped: OOM, or died before or after it ran a command."""
        return container_death(state, phase, memory_mb=self.memory_mb, ran_a_command=self.execs_ok > 0)


def box_of(ref: SandboxRef) -> Sandbox:
    """The ref's sandbox state, made (and kept on the ref) for a ref this provider did not create."""
    if isinstance(ref.handle, Sandbox):
        return ref.handle
    # a ref from list_owned or another process: no local state yet
    box = Sandbox(ref.sandbox_id)
    object.__setattr__(ref, "handle", box)
    return box


def running(state: Mapping[str, Any]) -> bool:
    """A container state (`show()["State"]`) that can run a command."""
    return bool(state.get("Running")) and not state.get("Restarting") and not state.get("Paused")


_NAME_BAD = re.compile(r"[^a-zA-Z0-9_.-]+")


def container_name(spec: SandboxSpec) -> str:
    """stampede-<run>-<rollout>, so `docker ps` reads as the run (option `name_containers`)."""
    name = _NAME_BAD.sub("-", f"stampede-{spec.run_id}-{spec.rollout_id}").strip("-.")
    return name[:200]
