"""Fixtures shared by the Docker tests (the machine's daemon, and a private one safe to stop mid-run), and the
fuzzers' settings under CI."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.docker_support import PrivateDaemon, machine_daemon, may_start_daemon, private_daemon_possible, unavailable

# CI must pass or fail on the code, not on the inputs a fuzzer happened to draw that day: under CI=true every property
# test and fuzzer draws the same inputs each run (derived from the test itself); elsewhere they draw new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def docker_host() -> str:
    """The daemon at DOCKER_HOST or the local socket: skips without one, fails under CI=true."""
    return machine_daemon()


@pytest.fixture(scope="session")
def private_daemon() -> Iterator[PrivateDaemon]:
    """A dockerd of the tests' own (own socket, data root, containerd), so stopping it touches nothing else."""
    if not may_start_daemon():
        pytest.skip("starts and stops a private dockerd: set STAMPEDE_ALLOW_DOCKER_INSTALL=1 (or CI=true)")
    reason = private_daemon_possible()
    if reason:
        unavailable(reason)
    daemon = PrivateDaemon()
    daemon.start()
    yield daemon
    daemon.stop()
