"""A simulated vendor's serve entry point (`python -m providers.sim.prime.serve`, `.modal_serve`) as a real child
process: start it, read its JSON ready line, stop it, and query its HTTP endpoints."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import Popen
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]


def spawn_serve(module: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def spawn_serve_logged(module: str, stderr: IO[bytes], *args: str, env: dict[str, str] | None = None) -> Popen[bytes]:
    """`spawn_serve`, its stderr written to a file (a pipe nobody reads would block a server that logs much)."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def stop_serve(proc: Popen[bytes], timeout: float = 15.0) -> int:
    """Close its stdin (`--exit-on-stdin-eof`) and wait for the exit, killing it if it hangs; its status."""
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def ready_line(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> dict[str, Any]:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no ready line from {proc.args}"
    line = proc.stdout.readline()
    assert line, proc.stderr.read().decode() if proc.stderr else "child exited"
    return json.loads(line)


def finish(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> tuple[int, str]:
    """Wait for the exit (kill it if it hangs) and return the status and everything it wrote to stderr."""
    try:
        rc = proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    return rc, proc.stderr.read().decode()


def get_json(url: str, token: str | None = None) -> tuple[int, Any]:
    """Status and JSON body, error statuses included."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@contextmanager
def standalone_stub(token: str, profile: str = "ideal") -> Iterator[str]:
    """`stampede stub serve` as its own process on a free loopback port (as on another machine): its URL, and the
    process stopped (SIGTERM) on leaving."""
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "stub", "serve", "--profile", profile, "--port", "0", "--token", token],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        yield str(json.loads(process.stdout.readline())["url"])
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
