"""A token never reaches the screen or another user's `ps`: a vendor that echoes it in an error has it masked in
what `stampede cleanup` prints, and the simulated vendors stampede starts read their token from the environment,
not their command line (`/proc/PID/cmdline` is world-readable; `/proc/PID/environ` is the owner's only)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from tests.support.commands import stampede_started
from tests.support.serve_process import finish, get_json, ready_line

REPO = Path(__file__).resolve().parents[2]
TOKEN = "Zq9xT0kenCanary1234"


class EchoingVendor(BaseHTTPRequestHandler):
    """A vendor's 500 that quotes the request's credentials back, as a careless error page does."""

    def _answer(self) -> None:
        auth = self.headers.get("Authorization", "")
        body = json.dumps({"detail": f"internal error for {auth}; key {auth.split()[-1] if auth else ''}"}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def echoing_vendor() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), EchoingVendor)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("how", ["--token", "STAMPEDE_TOKEN"])
def test_cleanup_masks_a_token_the_vendor_echoes(echoing_vendor: str, how: str) -> None:
    argv = [sys.executable, "-m", "harness.cli", "cleanup", "--base-url", echoing_vendor, "--run-id", "r1"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if how == "--token":
        argv += ["--token", TOKEN]
    else:
        env["STAMPEDE_TOKEN"] = TOKEN
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert result.returncode == 2 and "HTTP 500" in result.stderr, result.stderr
    assert TOKEN.lower() not in (result.stdout + result.stderr).lower(), result.stderr
    assert "***" in result.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_embedded_vendor_gets_its_token_by_environment_not_argv(tmp_path: Path) -> None:
    run = stampede_started(
        "run",
        "--profile",
        "ideal",
        "--stages",
        "4",
        "--hold",
        "4",
        "--commands",
        "true",
        "--out",
        str(tmp_path),
        "--progress-interval",
        "0",
    )
    vendor: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while not vendor and time.monotonic() < deadline and run.poll() is None:
            for child in psutil.Process(run.pid).children(recursive=True):
                try:
                    cmdline = Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if any(b"providers.sim.prime.serve" in part for part in cmdline):
                    vendor = [part.decode() for part in cmdline if part]
            time.sleep(0.1)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert vendor, "the embedded vendor was never seen"
    assert not [arg for arg in vendor if "token" in arg.lower()], vendor
    assert run.returncode == 0, err
    assert "ok" in out


def test_serve_reads_its_token_from_the_environment_and_warns_on_the_command_line() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "STAMPEDE_SERVE_TOKEN": TOKEN}
    argv = [sys.executable, "-m", "harness.cli", "stub", "serve", "--profile", "ideal", "--exit-on-stdin-eof"]
    served = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        info = ready_line(served)
        assert info["token"] == TOKEN and get_json(info["url"] + "/api/v1/sandbox", TOKEN)[0] == 200
        assert TOKEN not in Path(f"/proc/{served.pid}/cmdline").read_text()
    finally:
        assert served.stdin is not None
        served.stdin.close()
        rc, err = finish(served)
    assert rc == 0 and "warning" not in err.lower()
    on_argv = subprocess.Popen(
        [*argv, "--token", "userchosen"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert ready_line(on_argv)["token"] == "userchosen"  # still works for a user
    finally:
        assert on_argv.stdin is not None
        on_argv.stdin.close()
        rc, err = finish(on_argv)
    assert rc == 0 and "STAMPEDE_SERVE_TOKEN" in err and "ps" in err, err
