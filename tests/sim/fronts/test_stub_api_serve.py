"""`python -m providers.sim.prime.serve` as a real child process: the JSON line, signals, stdin EOF, bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request

import pytest

from tests.support.serve_process import finish, get_json, ready_line, spawn_serve


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return spawn_serve("providers.sim.prime.serve", *args)


def test_ready_line_then_sigterm_exits_cleanly() -> None:
    proc = _spawn("--profile", "modal-like", "--seed", "7", "--token", "tk", "--set", "quota.max_active=100")
    try:
        info = ready_line(proc)
        assert set(info) == {"url", "token", "profile", "time_scale", "seed", "pid", "account_wide"}
        assert "quota.max_active" in info["account_wide"]  # set to 100 above: a limit a shard would apply alone
        assert info["url"].startswith("http://127.0.0.1:") and info["token"] == "tk"
        assert (info["profile"], info["time_scale"], info["seed"], info["pid"]) == (
            "modal-like",
            0.1,
            7,
            proc.pid,
        )
        assert get_json(info["url"] + "/openapi.json")[0] == 200
        status, stats = get_json(info["url"] + "/api/v1/_stampede/stats", "tk")
        assert status == 200 and stats["profile"] == "modal-like"
        proc.send_signal(signal.SIGTERM)
        rc, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0
    assert "listening on" in err and "Traceback" not in err


def test_sigint_exits_cleanly_and_token_defaults_to_random() -> None:
    proc = _spawn("--profile", "ideal", "--time-scale", "0.5")
    info = ready_line(proc)
    assert len(info["token"]) > 16 and info["time_scale"] == 0.5
    proc.send_signal(signal.SIGINT)
    rc, err = finish(proc)
    assert rc == 0 and "Traceback" not in err


def test_exits_when_stdin_closes() -> None:
    proc = _spawn("--profile", "ideal", "--exit-on-stdin-eof")
    ready_line(proc)
    assert proc.stdin is not None
    proc.stdin.close()
    rc, err = finish(proc)
    assert rc == 0 and "Traceback" not in err


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--profile", "nope-like"], "unknown profile 'nope-like'"),
        (["--profile", "/no/such/file.toml"], "profile file not found"),
        (["--seed", "x"], "not a whole number"),
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
    rc, err = finish(proc)
    assert rc == 2
    assert err.count("\n") == 1 and expected in err and "Traceback" not in err, err


def test_main_is_callable_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    from providers.sim.prime.serve import main

    assert main(["--profile", "nope-like"]) == 2
    assert "unknown profile" in capsys.readouterr().err


def _create_ids(seed: str, count: int) -> list[str]:
    """Start a served vendor with `seed`, create `count` sandboxes over its REST API, stop it: the ids it gave."""
    proc = _spawn("--profile", "ideal", "--seed", seed, "--exit-on-stdin-eof")
    try:
        info = ready_line(proc)
        body = json.dumps({"name": "t", "docker_image": "python:3.12-slim", "labels": ["r"], "timeout_minutes": 5})
        ids = []
        for _ in range(count):
            request = urllib.request.Request(
                info["url"] + "/api/v1/sandbox",
                data=body.encode(),
                headers={"Authorization": f"Bearer {info['token']}", "Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=10) as resp:
                ids.append(json.loads(resp.read())["id"])
        assert proc.stdin is not None
        proc.stdin.close()
        finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    return ids


def test_a_restarted_vendor_never_hands_out_an_id_again() -> None:
    """A vendor restarted with the same seed mid-run must not give a second rollout a sandbox id already recorded
    for another: the rollouts and truth tables are joined on it."""
    first, second = _create_ids("7", 5), _create_ids("7", 5)
    assert len(set(first)) == 5 and len(set(second)) == 5
    assert not set(first) & set(second), (first, second)
