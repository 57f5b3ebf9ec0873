"""Limits on what a user can ask a run to do: counts this machine can hold, and a token sent in clear.

`--users 99999999` once grew the Locust process to 4.6 GB in two minutes, and it ignored SIGTERM while it
spawned. So before Locust starts, the peak in flight the shape asks for (users of a ramp, steady or burst;
the open model's `--max-inflight`) is held against three budgets of this machine, and a larger one ends in
one line naming the tightest limit and `--allow-oversubscribe`:
- open files: every rollout in flight holds a vendor connection in its engine (1.0 fd per rollout measured
  with the stub client), out of the open-file limit an engine can raise itself to (`foundation.open_files`:
  the hard limit, or the kernel's nr_open for root), less a reserve;
- memory: what a rollout in flight costs in the Locust process (its user), its engine and a local vendor,
  out of the memory available now (the cgroup's limit when lower), less a margin for the OS and the
  analysis at the end. Measured by `bench/bench_run_limits.py --provider stub`: 14 KB, 26 KB and 20 KB;
  the engine's figure is taken at 80 KB since the vendors' SDK clients weigh more than the stub client;
- SIGTERM: one Locust process stops its users one greenlet at a time (each cancels its rollout over the
  engine socket): 10,000 took 3.7 s, 20,000 7.6 s, 30,000 9.4 s and 150,000 over two minutes here, so
  one process takes at most USERS_PER_LOCUST_PROCESS users and a stop stays within seconds.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from foundation.open_files import FD_RESERVE, FDS_PER_ROLLOUT, reachable_open_files
from harness.errors import UsageError
from harness.locust.setting_values import MAX_IN_FLIGHT
from harness.locust.settings import RunSettings

OVERRIDE_FLAG = "--allow-oversubscribe"
BYTES_PER_ROLLOUT = (16 + 80 + 24) * 1024  # Locust user + engine + local vendor (measured 14, 26, 20 KB)
MEMORY_SHARE = 0.7  # of what is available: the rest for the OS and reading the results back
USERS_PER_LOCUST_PROCESS = 20000  # a SIGTERM stops them within ~8 s on a busy 2-core machine


@dataclass(frozen=True, slots=True)
class MachineRoom:
    """What this machine lends a run: the open-file limit an engine can reach, and memory available now."""

    open_files: int
    memory_bytes: int

    @classmethod
    def measure(cls) -> MachineRoom:
        return cls(open_files=reachable_open_files(), memory_bytes=available_memory())

    def budgets(self, engines: int = 1) -> list[tuple[int, str]]:
        """Each limit as (most rollouts in flight, how the line names it), for `engines` Locust+engine pairs."""
        engines = max(1, engines)
        by_files = max(0, self.open_files - FD_RESERVE) // FDS_PER_ROLLOUT * engines
        by_memory = int(self.memory_bytes * MEMORY_SHARE) // BYTES_PER_ROLLOUT
        return [
            (by_files, f"open-file limit ({self.open_files} per engine, {FDS_PER_ROLLOUT} per rollout)"),
            (
                by_memory,
                f"memory ({self.memory_bytes / 2**30:.1f} GiB available, ~{BYTES_PER_ROLLOUT // 1024} KB per rollout)",
            ),
            (
                USERS_PER_LOCUST_PROCESS * engines,
                f"SIGTERM budget ({USERS_PER_LOCUST_PROCESS} users per Locust process stop within seconds)",
            ),
        ]


def available_memory() -> int:
    """MemAvailable, or the cgroup's remaining memory when that is lower (a container's limit)."""
    available = 0
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    for limit_path, usage_path in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        limit, usage = _read_int(limit_path), _read_int(usage_path)
        if limit and usage is not None and limit < 1 << 60:
            available = min(available, limit - usage) if available else limit - usage
            break
    return max(0, available)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def asked_peak(shape_peak: int | None, settings: RunSettings, *, shaped: bool = True) -> tuple[int | None, str]:
    """The most rollouts in flight the run asks for, and the flag that asked (for the error line)."""
    if not shaped:  # a plain locustfile: Locust runs --users of them
        return settings.users, "--users"
    if shape_peak is None:  # the open model: starts finding this many running are dropped
        return settings.max_inflight, "--max-inflight"
    if settings.batch and settings.group and shape_peak == settings.batch * settings.group:
        return shape_peak, "--batch x --group"
    if settings.users == shape_peak:
        return shape_peak, "--users"
    if shape_peak == max(settings.stages):
        return shape_peak, "--stages peak"
    return shape_peak, "the scenario's peak"


def check_in_flight(peak: int | None, what: str, room: MachineRoom, *, engines: int = 1, allow: bool = False) -> None:
    """One `UsageError` line naming the tightest limit when `peak` rollouts in flight exceed it (unless `allow`)."""
    if not peak:
        return
    if peak > MAX_IN_FLIGHT:  # the ceiling the command line holds each count to, oversubscribed or not
        raise UsageError(f"{what} {peak} is more rollouts in flight than any run may ask for: at most {MAX_IN_FLIGHT}")
    if allow:
        return
    most, limit = min(room.budgets(engines))
    if peak > most:
        raise UsageError(
            f"{what} {peak} is more rollouts in flight than this machine holds: at most {most} by its {limit}; "
            f"spread the load (--workers N, --master/--worker on more machines) or pass {OVERRIDE_FLAG}"
        )


def open_master_warning(bind_host: str) -> str | None:
    """A warning line when a master listens beyond loopback: Locust's master/worker protocol has no login, and the
    master hands its parsed options (the vendor token among them) to every worker that connects."""
    if bind_host in ("localhost", "") or bind_host.endswith(".localhost"):
        return None
    try:
        if ipaddress.ip_address(bind_host).is_loopback:
            return None
    except ValueError:
        pass  # "*" or a name: not known to be loopback
    return (
        f"the master listens on {bind_host}: any machine that reaches that port can join as a worker and is handed "
        "this run's options, the vendor token included (Locust's master has no login); bind it on a private network"
    )


def cleartext_token_warning(base_url: str | None) -> str | None:
    """A warning line when the bearer token would travel in clear: plain http to a host that is not loopback."""
    if not base_url:
        return None
    parts = urlsplit(base_url)
    if parts.scheme.lower() != "http":
        return None
    host = (parts.hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass  # a name: not known to be loopback
    return (
        f"warning: --base-url {parts.scheme}://{parts.netloc} is plain http to a host that is not loopback: "
        "the token is sent in clear (use https)"
    )
