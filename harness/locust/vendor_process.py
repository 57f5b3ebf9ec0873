"""The embedded simulated vendor: started for a run on 127.0.0.1 (a free port), stopped with it.

The Prime-like stub by default; for `--local` runs of other providers, the simulated vendor that speaks their
wire protocol (`providers.LOCAL_VENDORS`). It runs in its own plain-asyncio interpreter, not inside the Locust
process: that process is gevent-patched, and the server's CPU would otherwise distort the very latencies it
serves. The child watches its stdin, so it never outlives the harness that started it.

A serve module takes `--profile --seed --host --port --exit-on-stdin-eof [--time-scale] [--set K=V]` and its token
in `STAMPEDE_SERVE_TOKEN` (never on the command line, which every local user can read) and, once listening, prints one JSON line: `url`, `time_scale`, `profile`, and optionally `truth_url` (an
HTTP base serving `/api/v1/_stampede/truth`; defaults to `url`), `provider_options` (merged into the
provider's options, e.g. credentials the local vendor accepts) and `account_wide` (the profile's account-wide
limits, named: what a sharded vendor applies per shard).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
import gevent.subprocess

from foundation.phase_marks import mark
from harness.errors import UsageError
from harness.locust import early_processes

VENDOR_START_TIMEOUT_S = 30.0

# Work for the caller while the vendor's shards start, told whether they still are (it stops when they are up).
Meanwhile = Callable[[Callable[[], bool]], None]


def new_token() -> str:
    """A fresh token for a vendor this run starts (its clients send it; nothing else knows it)."""
    return secrets.token_urlsafe(24)


def vendor_argv(
    module: str, profile: str, *, seed: int, time_scale: float | None, overrides: dict[str, str] | None = None
) -> list[str]:
    """A simulated vendor's command line (`--opt=value` throughout: a value may begin with "-")."""
    argv = [
        sys.executable,
        "-m",
        module,
        f"--profile={profile}",
        f"--seed={seed}",
        "--host=127.0.0.1",
        "--port=0",
        "--exit-on-stdin-eof",
    ]
    if time_scale is not None:
        argv.append(f"--time-scale={time_scale!r}")
    for key, value in (overrides or {}).items():
        argv.append(f"--set={key}={value}")
    return argv


UNPACED = {"STAMPEDE_SIM_BURST_PACING": "0"}
"""A simulated vendor that plays no burst 1:1: `providers.sim.core.clock.BURST_PACING_ENV`, spelled out here because
importing the simulator would delay `stampede run`'s head start (harness.cli.head_start) by ~40 ms."""


def vendor_env(burst_pacing: bool = True) -> dict[str, str]:
    """A simulated vendor's environment, but its token: this process's, this checkout first on its path; without
    `burst_pacing`, one that plays no burst 1:1 (`harness.locust.setting_values.PACED_BY_THE_USER` says why)."""
    env = dict(os.environ)
    if not burst_pacing:
        env.update(UNPACED)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    return env


def launch_vendor(argv: list[str], env: dict[str, str], token: str) -> gevent.subprocess.Popen:
    """The vendor's process, started (not yet listening); its token by environment: a command line is
    world-readable (ps), a process's environment is not."""
    mark("vendor: spawned")
    return gevent.subprocess.Popen(
        argv,
        stdin=gevent.subprocess.PIPE,
        stdout=gevent.subprocess.PIPE,
        stderr=gevent.subprocess.PIPE,
        env={**env, "STAMPEDE_SERVE_TOKEN": token},
        start_new_session=True,
    )


@dataclass(slots=True)
class EmbeddedVendor:
    process: gevent.subprocess.Popen
    url: str
    token: str
    profile: str
    time_scale: float
    seed: int
    truth_url: str
    provider_options: dict[str, Any]
    account_wide: list[str]  # the profile's account-wide limits, as the vendor announced them
    asked_to_stop: bool = False

    @classmethod
    def start(
        cls,
        module: str,
        profile: str,
        *,
        seed: int,
        time_scale: float | None,
        overrides: dict[str, str] | None = None,
        token: str | None = None,
        burst_pacing: bool = True,
    ) -> EmbeddedVendor:
        """Started and listening. Without a `token` (a vendor of one shard), one `stampede run` started ahead for
        exactly this (`harness.locust.early_processes`) is taken instead, with the token it was given."""
        argv = vendor_argv(module, profile, seed=seed, time_scale=time_scale, overrides=overrides)
        env = vendor_env(burst_pacing)
        early = early_processes.take(early_processes.key_of("vendor", argv, env)) if token is None else None
        if early is not None:
            mark("vendor: taken from the head start")
            process, token = early.process, early.facts["token"]
        else:
            token = token or new_token()
            process = launch_vendor(argv, env, token)
        try:
            with gevent.Timeout(VENDOR_START_TIMEOUT_S, UsageError(f"{module} did not start in time")):
                line = process.stdout.readline().decode(errors="replace").strip()
                if not line:
                    process.wait()
                    complaint = process.stderr.read().decode(errors="replace").strip().splitlines()
                    raise UsageError(complaint[-1] if complaint else f"{module} exited with {process.returncode}")
                info = json.loads(line)
                mark("vendor: listening")
        except BaseException:
            if process.poll() is None:
                process.kill()
                process.wait()
            raise
        # Keep draining its stderr so a chatty server can never block on a full pipe.
        gevent.spawn(_drain, process.stderr)
        return cls(
            process,
            info["url"],
            token,
            info.get("profile", profile),
            float(info["time_scale"]),
            seed,
            info.get("truth_url") or info["url"],
            dict(info.get("provider_options") or {}),
            [str(name) for name in info.get("account_wide") or []],
        )

    def fetch_json(self, path: str, timeout: float = 30.0) -> Any:
        request = urllib.request.Request(f"{self.truth_url}{path}", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def truth(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The simulator's own record of each sandbox (when it was accepted, usable, ended), and how late its own
        loop ran (providers/sim/core/loop_watch.py; empty from a vendor that does not say)."""
        data = self.fetch_json("/api/v1/_stampede/truth")
        loop = data.get("loop") if isinstance(data, dict) else None
        if isinstance(data, dict):
            data = data.get("sandboxes", [])
        return list(data), [loop] if isinstance(loop, dict) else []

    def ask_to_stop(self) -> None:
        """Tell the vendor to stop (stdin closed, SIGTERM) without waiting for it; once (a second SIGTERM could land
        after its loop has ended, and end it with a signal instead of its own exit)."""
        if self.asked_to_stop or self.process.poll() is not None:
            return
        self.asked_to_stop = True
        try:
            self.process.stdin.close()
        except OSError:
            pass
        self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        self.ask_to_stop()
        if self.process.poll() is not None:
            return
        try:
            self.process.wait(timeout=15)
        except gevent.subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


SHARD_SEED_STRIDE = 1_000_003  # shard i simulates with seed + i x this: its own draws, its own sandbox ids


@dataclass(slots=True)
class ShardedVendor:
    """One simulated vendor spread over processes, each holding its share of the connections.

    A process holds at most its open-file limit of connections, one per rollout in flight (this machine's root
    is held at 20,000). Each shard is a whole simulator with its own sandboxes, on its own port, sharing the
    token; the stub client spreads creates round-robin over them (`base_url` lists every shard). So account-wide
    behaviour (a quota, the create rate, a pool, congestion) applies per shard: `account_wide_note` says so
    when the profile has any.
    """

    shards: list[EmbeddedVendor]

    @classmethod
    def start(
        cls,
        module: str,
        profile: str,
        *,
        shards: int,
        seed: int,
        time_scale: float | None,
        overrides: dict[str, str] | None = None,
        meanwhile: Meanwhile | None = None,
        burst_pacing: bool = True,
    ) -> ShardedVendor:
        """Every shard started and listening; `meanwhile` runs once their processes are forked, while they start."""
        # shards share one token; a vendor of one shard picks its own (or the head start's: early_processes)
        token = new_token() if shards > 1 else None
        jobs = [
            gevent.spawn(
                EmbeddedVendor.start,
                module,
                profile,
                seed=seed + index * SHARD_SEED_STRIDE,
                time_scale=time_scale,
                overrides=overrides,
                token=token,
                burst_pacing=burst_pacing,
            )
            for index in range(max(1, shards))
        ]
        if meanwhile is not None:
            gevent.sleep(0)  # each job forks its shard, then waits for its line: the shards start from here on
            meanwhile(lambda: not all(job.ready() for job in jobs))
        gevent.joinall(jobs)
        started = [job.value for job in jobs if job.successful()]
        failed = [job.exception for job in jobs if not job.successful()]
        if failed:
            for vendor in started:
                vendor.stop()
            raise failed[0] if isinstance(failed[0], BaseException) else UsageError(f"{module} did not start")
        return cls(started)

    @property
    def first(self) -> EmbeddedVendor:
        return self.shards[0]

    @property
    def process(self) -> gevent.subprocess.Popen:
        return self.first.process

    @property
    def url(self) -> str:
        """Every shard's API base, comma-separated (the stub client's `base_url`); one shard: its own."""
        return ",".join(vendor.url for vendor in self.shards)

    @property
    def token(self) -> str:
        return self.first.token

    @property
    def profile(self) -> str:
        return self.first.profile

    @property
    def time_scale(self) -> float:
        return self.first.time_scale

    @property
    def seed(self) -> int:
        return self.first.seed

    @property
    def provider_options(self) -> dict[str, Any]:
        return self.first.provider_options

    def truth(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every shard's records, and each shard's loop tagged with its shard's index (a shard that does not say
        leaves no gap that would renumber the rest)."""
        sandboxes: list[dict[str, Any]] = []
        loops: list[dict[str, Any]] = []
        for index, vendor in enumerate(self.shards):
            shard_sandboxes, shard_loops = vendor.truth()
            sandboxes += shard_sandboxes
            loops += [{**loop, "shard": index} for loop in shard_loops]
        return sandboxes, loops

    def stop(self) -> None:
        # every shard told at once, before the first wait: the caller may hold the loop right after (a run's end)
        for vendor in self.shards:
            vendor.ask_to_stop()
        gevent.joinall([gevent.spawn(vendor.stop) for vendor in self.shards])


def account_wide_note(vendor: ShardedVendor) -> str | None:
    """A line saying what a sharded vendor simulates per shard instead of account-wide (None: nothing shared)."""
    shared = vendor.first.account_wide
    if len(vendor.shards) <= 1 or not shared:
        return None
    return (
        f"the simulated vendor runs as {len(vendor.shards)} shards (open files), and this profile's "
        f"account-wide {', '.join(shared)} apply to each shard's share, not to the whole run"
    )


def _drain(stream: Any) -> None:
    try:
        while stream.read(65536):
            pass
    except (OSError, ValueError):
        pass


def probe(url: str, token: str | None, timeout: float = 10.0) -> str | None:
    """None when the Prime-like API at `url` answers with this token, else one line saying what is wrong."""
    request = urllib.request.Request(
        f"{url.rstrip('/')}/api/v1/sandbox?page=1&per_page=1",
        headers={"Authorization": f"Bearer {token}"} if token else {},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return None
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return f"{url} refused the token (HTTP {exc.code}); pass --token or set STAMPEDE_TOKEN"
        return f"{url} answered HTTP {exc.code} to a list request"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{url} is unreachable: {reason}"
