"""`python -m providers.sim.modal.serve` as a real child process: the JSON line, signals, stdin EOF, bad input,
and the real SDK pointed at it through `MODAL_SERVER_URL` in a process of its own (as a user would)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.support.serve_process import finish, get_json, ready_line, spawn_serve


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return spawn_serve("providers.sim.modal.serve", *args)


def test_ready_line_truth_endpoint_then_sigterm() -> None:
    proc = _spawn("--profile", "modal-like", "--seed", "7", "--token", "tk", "--set", "quota.max_active=100")
    try:
        info = ready_line(proc)
        assert set(info) == {
            "url",
            "router_url",
            "truth_url",
            "token",
            "token_id",
            "provider_options",
            "profile",
            "time_scale",
            "seed",
            "pid",
        }
        assert info["url"].startswith("http://127.0.0.1:") and info["router_url"].startswith("http://127.0.0.1:")
        assert (info["profile"], info["time_scale"], info["seed"], info["pid"], info["token"]) == (
            "modal-like",
            0.1,
            7,
            proc.pid,
            "tk",
        )
        assert info["provider_options"] == {"token_id": info["token_id"]}
        status, truth = get_json(info["truth_url"] + "/api/v1/_stampede/truth", "tk")
        assert status == 200 and truth["sandboxes"] == [] and truth["profile"] == "modal-like"
        assert get_json(info["truth_url"] + "/api/v1/_stampede/stats", "tk")[1]["stats"]["created"] == 0
        assert get_json(info["truth_url"] + "/api/v1/_stampede/truth", "wrong")[0] == 401
        proc.send_signal(signal.SIGTERM)
        rc, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0
    assert "MODAL_SERVER_URL" in err and "Traceback" not in err


def test_exits_when_stdin_closes() -> None:
    proc = _spawn("--exit-on-stdin-eof", "--profile", "ideal")
    ready_line(proc)
    assert proc.stdin is not None
    proc.stdin.close()
    rc, err = finish(proc)
    assert rc == 0 and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--profile", "no-such-profile"], "no-such-profile"),
        (["--set", "quota.max_active"], "KEY=VALUE"),
        (["--set", "quota.nope=1"], "nope"),
        (["--time-scale", "-1"], "time-scale"),
        (["--port", "70000"], "port"),
        (["--token-id", " "], "token-id"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    proc = _spawn(*args)
    rc, err = finish(proc)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("python -m providers.sim.modal.serve: error:")


def test_the_sdk_finds_it_through_modal_server_url_in_another_process() -> None:
    proc = _spawn("--profile", "ideal", "--token", "sekret", "--exit-on-stdin-eof")
    try:
        info = ready_line(proc)
        script = textwrap.dedent(
            """
            import modal
            app = modal.App.lookup("readme", create_if_missing=True)
            sb = modal.Sandbox.create(app=app)
            p = sb.exec("sh", "-c", "echo hello from $0; exit 4")
            print(p.stdout.read().strip(), p.wait())
            sb.terminate()
            """
        )
        env = {
            **os.environ,
            "MODAL_SERVER_URL": info["url"],
            "MODAL_TOKEN_ID": info["token_id"],
            "MODAL_TOKEN_SECRET": "sekret",
        }
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "hello from sh 4"
        status, truth = get_json(info["truth_url"] + "/api/v1/_stampede/truth", "sekret")
        assert status == 200
        assert [row["status"] for row in truth["sandboxes"]] == ["TERMINATED"]
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        finish(proc)
