"""The Docker daemon the docker tests run against, and a small lifecycle driver for them.

No mocks: the tests talk to a real dockerd. On a user's machine without one they skip; in CI
(`CI=true`) a missing daemon is a failure, since `.ci/run` brings one up with `scripts/ensure-docker`
(and this helper runs that script itself when CI=true or STAMPEDE_ALLOW_DOCKER_INSTALL=1).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

from providers.base import Phase, Provider, ProviderError, SandboxSpec

REPO = Path(__file__).resolve().parents[1]
ENSURE_DOCKER = REPO / "scripts" / "ensure-docker"
PRIVATE_SOCKET = "/tmp/stampede-test-dockerd/docker.sock"


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def may_start_daemon() -> bool:
    return in_ci() or os.environ.get("STAMPEDE_ALLOW_DOCKER_INSTALL") == "1"


def unavailable(reason: str) -> NoReturn:
    """Skip on a user's machine; fail in CI, where the daemon is part of the job."""
    if in_ci():
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


def default_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def ping(host: str, timeout: float = 2.0) -> bool:
    """Does a Docker daemon answer `GET /_ping` at this host URL?"""
    try:
        if host.startswith("unix://"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(host[len("unix://") :])
        else:
            url = urllib.parse.urlsplit(host.replace("tcp://", "http://", 1))
            sock = socket.create_connection((url.hostname or "localhost", url.port or 2375), timeout=timeout)
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            answer = sock.recv(64)
        return answer.startswith(b"HTTP/1.") and b" 200 " in answer.split(b"\r\n", 1)[0]
    except OSError:
        return False


def run_ensure_docker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ENSURE_DOCKER), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def wait_for(host: str, up: bool, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if ping(host, timeout=1.0) == up:
            return True
        time.sleep(0.1)
    return False


def machine_daemon() -> str:
    """The daemon at DOCKER_HOST (or the local socket); started through ensure-docker when allowed."""
    host = default_host()
    if ping(host):
        return host
    if not may_start_daemon():
        unavailable(f"no docker daemon at {host} (scripts/ensure-docker starts one)")
    result = run_ensure_docker()
    if result.returncode != 0 or not wait_for(host, up=True):
        unavailable(f"no docker daemon at {host}; ensure-docker said: {(result.stderr or result.stdout).strip()}")
    return host


@dataclass
class PrivateDaemon:
    """A dockerd of the tests' own (own socket, data root and containerd), safe to stop mid-run."""

    socket_path: str = PRIVATE_SOCKET

    @property
    def host(self) -> str:
        return f"unix://{self.socket_path}"

    def start(self) -> None:
        if ping(self.host):
            return
        result = run_ensure_docker("--socket", self.socket_path)
        if result.returncode != 0 or not wait_for(self.host, up=True):
            unavailable(f"could not start a private dockerd: {(result.stderr or result.stdout).strip()}")

    def stop(self) -> str:
        result = run_ensure_docker("--socket", self.socket_path, "--stop", timeout=60)
        return (result.stdout + result.stderr).strip()


def private_daemon_possible() -> str | None:
    """Why a private daemon cannot be had here, or None."""
    if os.geteuid() != 0:
        return "a private dockerd needs root"
    if subprocess.run(["sh", "-c", "command -v dockerd"], capture_output=True, check=False).returncode:
        return "dockerd is not installed (scripts/ensure-docker installs docker.io)"
    return None


def new_run_id(prefix: str = "test") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class Lifecycle:
    """One rollout's outcome as the engine would record it: classified, never an escaped exception."""

    rollout_id: str
    ok: bool = False
    kind: str = ""
    phase: str = ""
    error: str = ""
    escaped: str = ""  # an exception that was not a ProviderError (the adapter should never let one out)
    tti_s: float | None = None
    outputs: list[str] = field(default_factory=list)


async def lifecycle(
    provider: Provider,
    spec: SandboxSpec,
    commands: Sequence[Sequence[str]] = (("true",), ("echo", "hi")),
    *,
    ready_timeout: float = 60.0,
    exec_timeout: float = 30.0,
    pause_s: float = 0.0,
) -> Lifecycle:
    """create -> wait_ready -> exec each command -> terminate, recording the first failure like the engine."""
    record = Lifecycle(spec.rollout_id)
    phase = Phase.CREATE
    ref = None
    started = time.monotonic()
    try:
        ref = await provider.create(spec)
        phase = Phase.READY
        await provider.wait_ready(ref, ready_timeout)
        phase = Phase.EXEC
        for argv in commands:
            result = await provider.exec(ref, argv, exec_timeout)
            if record.tti_s is None:
                record.tti_s = time.monotonic() - started
            record.outputs.append(result.stdout)
            if pause_s:
                await asyncio.sleep(pause_s)
        record.ok = True
    except Exception as exc:
        record.kind, record.phase, record.error = str(provider.classify(exc, phase)), str(phase), str(exc)
        if not isinstance(exc, ProviderError):
            record.escaped = f"{type(exc).__name__}: {exc}"
    finally:
        if ref is not None:
            try:
                await provider.terminate(ref)
            except Exception as exc:
                if record.ok:
                    record.ok = False
                    record.kind, record.phase = str(provider.classify(exc, Phase.TERMINATE)), "terminate"
                    record.error = str(exc)
                if not isinstance(exc, ProviderError):
                    record.escaped = f"{type(exc).__name__}: {exc}"
    return record
