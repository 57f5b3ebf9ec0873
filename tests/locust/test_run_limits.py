"""Limits on what a user can ask: counts this machine cannot hold end in one line before Locust spawns anyone,
a SIGTERM during the spawn of the largest allowed count ends the run within seconds, and plain http to a host
that is not loopback warns that the token travels in clear."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.locust.run_limits import (
    USERS_PER_LOCUST_PROCESS,
    MachineRoom,
    check_in_flight,
    cleartext_token_warning,
    open_master_warning,
)
from tests.support.commands import stampede

REPO = Path(__file__).resolve().parents[2]
SCRIPTED = "tests.support.scripted_provider:ScriptedProvider"


@pytest.mark.parametrize(
    ("scenario", "flags", "named"),
    [
        ("burst", ["--users", "900000"], "--users 900000"),
        ("ramp", ["--stages", "900000"], "--stages peak 900000"),
        ("arrival", ["--max-inflight", "900000"], "--max-inflight 900000"),
    ],
)
def test_a_count_this_machine_cannot_hold_is_one_line_naming_the_limit_and_the_override(
    tmp_path, scenario, flags, named
):
    result = stampede("run", "--scenario", scenario, *flags, "--provider", SCRIPTED, "--out", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr  # one line, no traceback, no spread note
    assert named in result.stderr and "this machine holds" in result.stderr
    assert "--allow-oversubscribe" in result.stderr
    assert list(tmp_path.iterdir()) == []  # refused before a run folder (or a user) existed


def test_more_stages_than_a_run_can_hold_are_refused(tmp_path):
    stages = ",".join(str(level) for level in range(1, 1202))
    result = stampede("run", "--stages", stages, "--provider", SCRIPTED, "--out", str(tmp_path))
    assert result.returncode == 2 and "--stages lists 1201 stages, more than 1000" in result.stderr


def test_the_tightest_budget_is_the_one_named():
    plenty = 64 * 2**30
    with pytest.raises(UsageError, match=r"at most 488 by its open-file limit"):
        check_in_flight(1000, "--users", MachineRoom(open_files=1000, memory_bytes=plenty))
    with pytest.raises(UsageError, match=r"by its memory \(0.1 GiB available"):
        check_in_flight(5000, "--users", MachineRoom(open_files=10**6, memory_bytes=100 * 2**20))
    with pytest.raises(UsageError, match="SIGTERM budget"):
        check_in_flight(USERS_PER_LOCUST_PROCESS + 1, "--users", MachineRoom(open_files=10**6, memory_bytes=plenty))
    # Two Locust processes with an engine each hold twice the users and open files (memory is shared).
    check_in_flight(USERS_PER_LOCUST_PROCESS + 1, "--users", MachineRoom(10**6, plenty), engines=2)
    check_in_flight(10**6, "--users", MachineRoom(1000, 2**20), allow=True)  # --allow-oversubscribe
    with pytest.raises(UsageError, match="more rollouts in flight than any run may ask for"):
        check_in_flight(10**6 + 1, "--users", MachineRoom(1000, 2**20), allow=True)  # not past the ceiling
    assert MachineRoom.measure().open_files > 0 and MachineRoom.measure().memory_bytes > 0


def test_a_master_listens_on_loopback_unless_told_and_warns_beyond_it():
    """Locust's master has no login and hands its options (the token too) to any worker: loopback by default."""
    from harness.cli.main import build_parser

    args = build_parser(only="run").parse_args(["run", "--master"])
    assert args.master_bind_host == "127.0.0.1" and open_master_warning(args.master_bind_host) is None
    for quiet in ("127.0.0.1", "::1", "localhost"):
        assert open_master_warning(quiet) is None, quiet
    for loud in ("*", "0.0.0.0", "192.0.2.7", "master.example.com"):
        assert "vendor token" in (open_master_warning(loud) or ""), loud


def test_plain_http_to_a_host_that_is_not_loopback_warns_that_the_token_travels_in_clear(tmp_path):
    for quiet in ("http://127.0.0.1:8080", "http://localhost:1/api", "http://[::1]:9", "https://api.example.com", None):
        assert cleartext_token_warning(quiet) is None, quiet
    for loud in ("http://203.0.113.9:8080", "http://api.example.com/v1", "HTTP://10.0.0.1"):
        assert "token is sent in clear" in (cleartext_token_warning(loud) or ""), loud
    result = stampede(
        "run",
        "--scenario",
        "burst",
        "--users",
        "900000",
        "--provider",
        "prime",
        "--base-url",
        "http://203.0.113.9:8080",
        "--token",
        "t0k3n-value",
        "--out",
        str(tmp_path),
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 2, result.stderr
    assert "warning: --base-url http://203.0.113.9:8080 is plain http" in lines[0]
    assert "t0k3n-value" not in result.stderr


@pytest.mark.slow
def test_sigterm_while_the_largest_allowed_burst_spawns_ends_the_run_within_seconds(tmp_path):
    """Before the limits, 99,999,999 users grew Locust to 4.6 GB and a SIGTERM waited 80 s. At the budget,
    20,000 users at the gate (each rollout held in flight) stopped in ~8 s here: 45 s leaves room for a busy
    machine and still fails the old behaviour."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "--scenario",
            "burst",
            "--users",
            str(USERS_PER_LOCUST_PROCESS),
            "--provider",
            SCRIPTED,
            "--provider-option",
            "ready_delay_s=600",
            "--out",
            str(tmp_path),
            "--progress-interval",
            "0",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("*/run.json")) and time.monotonic() < deadline:
            time.sleep(0.2)  # the run has begun: Locust is spawning its users
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        time.sleep(2.0)
        start = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=45)
        assert time.monotonic() - start < 45
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
