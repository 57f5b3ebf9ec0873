"""Every vendor's local plane, started as a user starts it (`stampede <vendor>-local serve`), prints one JSON line
that is all a user's own script needs: with that line's environment alone, the vendor's real SDK creates a
sandbox, runs a command and deletes it, and the plane's truth saw it end. Bad input to `serve` is one line and
exit 2. One table for the six fronts that speak an SDK's wire (modal's and prime's serve tests sit with their
fronts in tests/sim/fronts)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from providers.sim.agent_sandbox.server import WARM_POOL
from tests.support.serve_process import ROOT, finish, get_json, ready_line, spawn_serve


@dataclass(frozen=True)
class UserScript:
    """A plane, the script a user would write against it, and what its ready line must hold."""

    front: str  # the `stampede <front> serve` command
    serve_args: tuple[str, ...]
    env_prefix: str  # the user's own settings for this vendor, dropped so the line's env is all it has
    script: str
    printed: str  # what the script prints when the sandbox ran its command
    check_line: Callable[[Mapping[str, Any]], None]
    script_args: Callable[[Mapping[str, Any]], list[str]] = field(default=lambda line: [])
    truth: bool = True  # the plane serves the truth endpoint (agent-sandbox's kubeconfig stands in for it)


def _e2b_line(line: Mapping[str, Any]) -> None:
    assert set(line["env"]) == {"E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL"}
    assert line["env"]["E2B_API_KEY"] == line["token"] and line["provider_options"] == {"sandbox_url": line["url"]}


def _daytona_line(line: Mapping[str, Any]) -> None:
    assert line["url"].endswith("/api") and line["toolbox_url"].endswith("/toolbox") and line["token"]
    assert line["env"] == {"DAYTONA_API_URL": line["url"], "DAYTONA_API_KEY": line["token"], "DAYTONA_TARGET": "us"}
    assert line["profile"] == "daytona-like" and line["time_scale"] == 1.0 and line["seed"] == 2
    assert get_json(f"{line['url']}/sandbox", "wrong")[0] == 401


def _runloop_line(line: Mapping[str, Any]) -> None:
    assert line["url"].startswith("http://127.0.0.1:") and line["token"]
    assert line["env"] == {"RUNLOOP_BASE_URL": line["url"], "RUNLOOP_API_KEY": line["token"]}
    assert line["profile"] == "runloop-like" and line["time_scale"] == 1.0 and line["seed"] == 2
    assert get_json(f"{line['url']}/v1/devboxes", "wrong")[0] == 401


def _vercel_line(line: Mapping[str, Any]) -> None:
    assert set(line["env"]) == {"VERCEL_TOKEN", "VERCEL_TEAM_ID", "VERCEL_PROJECT_ID"}
    assert line["env"]["VERCEL_TOKEN"] == line["token"] and line["base_url"] == line["url"] + "/api"


def _coreweave_line(line: Mapping[str, Any]) -> None:
    assert line["env"] == {"CWSANDBOX_BASE_URL": line["url"], "CWSANDBOX_API_KEY": line["token"]}
    assert line["url"].startswith("http://127.0.0.1:")
    assert line["provider_options"] == {"data_plane_mode": "gateway"}


def _agent_sandbox_line(line: Mapping[str, Any]) -> None:
    assert set(line["env"]) == {"KUBECONFIG", "AGENT_SANDBOX_ROUTER_URL"}


SCRIPTS = [
    UserScript(
        "e2b-local",
        ("--profile", "ideal"),
        "E2B_",
        "from e2b import Sandbox\n"
        "with Sandbox.create() as sandbox:\n"
        "    print(sandbox.commands.run('echo from-a-users-script').stdout, end='')\n",
        "from-a-users-script\n",
        _e2b_line,
    ),
    UserScript(
        "daytona-local",
        ("--port", "0", "--seed", "2"),
        "DAYTONA_",
        "from daytona import CreateSandboxFromSnapshotParams, Daytona\n"
        "daytona = Daytona()  # configured by the environment alone\n"
        "sandbox = daytona.create(CreateSandboxFromSnapshotParams(labels={'who': 'user'}))\n"
        "print(sandbox.process.exec('echo from-a-users-script').result, end='')\n"
        "daytona.delete(sandbox)\n",
        "from-a-users-script\n",
        _daytona_line,
    ),
    UserScript(
        "runloop-local",
        ("--port", "0", "--seed", "2"),
        "RUNLOOP_",
        "from runloop_api_client import Runloop\n"
        "client = Runloop()\n"
        "devbox = client.devboxes.create_and_await_running()\n"
        "result = client.devboxes.execute_and_await_completion(devbox.id, command='echo from-a-users-script')\n"
        "print(result.stdout, end='')\n"
        "client.devboxes.shutdown(devbox.id)\n",
        "from-a-users-script\n",
        _runloop_line,
    ),
    UserScript(
        "vercel-local",
        ("--profile", "ideal"),
        "VERCEL_",
        "import sys\n"
        "from vercel.sandbox.sync import SandboxServiceOptions, SyncSandboxClient\n"
        "client = SyncSandboxClient.create(options=SandboxServiceOptions(base_url=sys.argv[1]))\n"
        "with client.create_sandbox() as box:\n"
        "    print(box.run_process('echo', ['from-a-users-script'], capture_output=True).stdout, end='')\n"
        "client.close()\n",
        "from-a-users-script\n",
        _vercel_line,
        script_args=lambda line: [line["base_url"]],
    ),
    UserScript(
        "coreweave-local",
        ("--profile", "ideal"),
        "CWSANDBOX_",
        "from cwsandbox import Sandbox\n"
        "with Sandbox.run(container_image='python:3.11') as sandbox:\n"
        "    print(sandbox.exec(['echo', 'from-a-users-script']).result().stdout, end='')\n",
        "from-a-users-script\n",
        _coreweave_line,
    ),
    UserScript(
        "agent-sandbox-local",
        ("--profile", "ideal", "--warm-pool", "1"),
        "KUBE",
        "import os\n"
        "from k8s_agent_sandbox import SandboxClient\n"
        "from k8s_agent_sandbox.models import SandboxDirectConnectionConfig\n"
        "config = SandboxDirectConnectionConfig(api_url=os.environ['AGENT_SANDBOX_ROUTER_URL'])\n"
        "with SandboxClient(connection_config=config) as client:\n"
        f"    sandbox = client.create_sandbox({WARM_POOL!r})\n"
        "    print(sandbox.commands.run('echo from-a-users-script').stdout, end='')\n",
        "from-a-users-script\n",
        _agent_sandbox_line,
        truth=False,
    ),
]


@pytest.mark.parametrize("plane", SCRIPTS, ids=lambda plane: plane.front)
def test_a_users_script_needs_only_the_serve_line(plane: UserScript) -> None:
    proc = spawn_serve("harness.cli", plane.front, "serve", *plane.serve_args, "--exit-on-stdin-eof")
    try:
        line = ready_line(proc)
        plane.check_line(line)
        env = {k: v for k, v in os.environ.items() if not k.startswith(plane.env_prefix)} | line["env"]
        user = subprocess.run(
            [sys.executable, "-c", plane.script, *plane.script_args(line)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert user.returncode == 0, user.stderr[-2000:]
        assert user.stdout == plane.printed
        if plane.truth:
            status, truth = get_json(f"{line['truth_url']}/api/v1/_stampede/truth", line["token"])
            assert status == 200 and [row["status"] for row in truth["sandboxes"]] == ["TERMINATED"]
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
    rc, err = finish(proc)
    assert rc == 0, err[-2000:]
    if not plane.truth:  # the kubeconfig holds the token: gone with the server
        assert not os.path.exists(line["env"]["KUBECONFIG"])


BAD_INPUT = [
    ("e2b-local", ["--profile", "nope"], "nope"),
    ("e2b-local", ["--set", "quota.max_active"], "KEY=VALUE"),
    ("e2b-local", ["--port", "x"], "port"),
    ("vercel-local", ["--profile", "nope"], "nope"),
    ("vercel-local", ["--set", "quota.max_active"], "KEY=VALUE"),
    ("vercel-local", ["--port", "x"], "port"),
    ("coreweave-local", ["--profile", "nope"], "nope"),
    ("coreweave-local", ["--truth-port", "x"], "port"),
    ("agent-sandbox-local", ["--profile", "nope"], "nope"),
    ("agent-sandbox-local", ["--warm-pool", "-1"], "warm-pool"),
    ("agent-sandbox-local", ["--port", "x"], "port"),
    ("daytona-local", ["--set", "resource_pool.cpu=-1"], "resource_pool"),
    ("runloop-local", ["--set", "boot.median_s=-1"], "boot"),
]


@pytest.mark.parametrize(("front", "args", "needle"), BAD_INPUT, ids=lambda v: v if isinstance(v, str) else None)
def test_serve_bad_input_is_one_line_and_exit_2(front: str, args: list[str], needle: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", front, "serve", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and needle in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
