"""A workload from each vendor's own docs, written as their docs write it, run by the real SDK against the local
plane with real commands (`serve --commands real`): what a user tries first must work in a simulated sandbox.

E2B's quickstart writes a file and runs it (`files.write`, `commands.run`); Daytona's getting-started runs code
(`process.code_run`) and a shell command (`process.exec`). The planes start as a user starts them, from the serve
command, and the SDK gets only the environment its ready line prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.sim.core.execution.isolated_shell import IsolatedShell

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not IsolatedShell.available(), reason="real commands need bubblewrap"),
]


def serving(vendor: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    argv = [sys.executable, "-m", "harness.cli", f"{vendor}-local", "serve", "--commands", "real"]
    argv += ["--profile", "ideal", "--exit-on-stdin-eof"]
    env = {**os.environ, "STAMPEDE_SERVE_TOKEN": "docs-workload-token"}
    plane = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO, env=env)
    try:
        assert plane.stdout is not None
        ready = json.loads(plane.stdout.readline())
        for key, value in ready["env"].items():
            monkeypatch.setenv(key, value)
        yield
    finally:
        assert plane.stdin is not None
        plane.stdin.close()
        try:
            plane.wait(timeout=60)
        except subprocess.TimeoutExpired:
            plane.kill()
            plane.wait()


@pytest.fixture
def e2b_local(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield from serving("e2b", monkeypatch)


@pytest.fixture
def daytona_local(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield from serving("daytona", monkeypatch)


def test_e2b_quickstart_writes_a_file_and_runs_it(e2b_local: None) -> None:
    from e2b import Sandbox

    sandbox = Sandbox.create()
    try:
        sandbox.files.write("/home/user/hello.py", "import platform\nprint('hello from', platform.python_version())\n")
        result = sandbox.commands.run("python3 /home/user/hello.py && ls -l /home/user")
    finally:
        sandbox.kill()
    assert result.exit_code == 0
    assert result.stdout.startswith("hello from 3.")
    assert " user user " in result.stdout and "hello.py" in result.stdout  # written as the sandbox's user


def test_daytona_getting_started_runs_code_and_a_command(daytona_local: None) -> None:
    from daytona import Daytona

    daytona = Daytona()
    sandbox = daytona.create()
    try:
        code = sandbox.process.code_run('print("Hello World from code!")')
        shell = sandbox.process.exec("echo $HOME && whoami && python3 -c 'print(6*7)'")
    finally:
        daytona.delete(sandbox)
    assert (code.exit_code, code.result.strip()) == (0, "Hello World from code!")
    assert (shell.exit_code, shell.result.split()) == (0, ["/home/daytona", "daytona", "42"])
