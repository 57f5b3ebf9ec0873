"""`python -m providers.sim.serve` as a real child process: the JSON line, signals, stdin EOF, bad input."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "providers.sim.serve", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )


def _ready_line(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> dict[str, Any]:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no ready line from the stub"
    line = proc.stdout.readline()
    assert line, proc.stderr.read().decode() if proc.stderr else "child exited"
    return json.loads(line)


def _get(url: str, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return resp.status, json.loads(resp.read())


def _finish(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> tuple[int, str]:
    try:
        rc = proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    return rc, proc.stderr.read().decode()


def test_ready_line_then_sigterm_exits_cleanly() -> None:
    proc = _spawn("--profile", "modal-like", "--seed", "7", "--token", "tk", "--set", "quota.max_active=100")
    try:
        info = _ready_line(proc)
        assert set(info) == {"url", "token", "profile", "time_scale", "seed", "pid"}
        assert info["url"].startswith("http://127.0.0.1:") and info["token"] == "tk"
        assert (info["profile"], info["time_scale"], info["seed"], info["pid"]) == (
            "modal-like",
            0.1,
            7,
            proc.pid,
        )
        assert _get(info["url"] + "/openapi.json")[0] == 200
        status, stats = _get(info["url"] + "/api/v1/_stampede/stats", "tk")
        assert status == 200 and stats["profile"] == "modal-like"
        proc.send_signal(signal.SIGTERM)
        rc, err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0
    assert "listening on" in err and "Traceback" not in err


def test_sigint_exits_cleanly_and_token_defaults_to_random() -> None:
    proc = _spawn("--profile", "ideal", "--time-scale", "0.5")
    info = _ready_line(proc)
    assert len(info["token"]) > 16 and info["time_scale"] == 0.5
    proc.send_signal(signal.SIGINT)
    rc, err = _finish(proc)
    assert rc == 0 and "Traceback" not in err


def test_exits_when_stdin_closes() -> None:
    proc = _spawn("--profile", "ideal", "--exit-on-stdin-eof")
    _ready_line(proc)
    assert proc.stdin is not None
    proc.stdin.close()
    rc, err = _finish(proc)
    assert rc == 0 and "Traceback" not in err


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--profile", "nope-like"], "unknown profile 'nope-like'"),
        (["--profile", "/no/such/file.toml"], "profile file not found"),
        (["--seed", "x"], "not an integer"),
        (["--time-scale", "-1"], "must be a positive finite number"),
        (["--port", "70000"], "port must be 0..65535"),
        (["--set", "quota.nope=1"], "unknown profile key 'quota.nope'"),
        (["--set", "quota.max_active=lots"], "expected a number"),
        (["--set", "novalue"], "--set expects KEY=VALUE"),
        (["--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], expected: str) -> None:
    proc = _spawn(*args)
    rc, err = _finish(proc)
    assert rc == 2
    assert err.count("\n") == 1 and expected in err and "Traceback" not in err, err


def test_main_is_callable_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    from providers.sim.serve import main

    assert main(["--profile", "nope-like"]) == 2
    assert "unknown profile" in capsys.readouterr().err
