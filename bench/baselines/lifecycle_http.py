"""The one sandbox lifecycle every overhead side makes, as HTTP calls against the Prime-like stub.

create (POST /sandbox, which answers with the gateway's auth) -> readiness (POST /sandbox/status:batchGet
until RUNNING, on the `stub` provider's schedule: a first look after 10 ms, each later one twice as late, up
to 50 ms) -> one command (POST {gateway}/exec) -> delete (DELETE /sandbox/{id}). The same calls, in the same
order, on the same schedule as the `stub` provider, so a side's rate and CPU differ only by what wraps them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

POLL_INTERVAL_S = 0.05  # the stub provider's default poll interval (its longest wait between two looks)
FIRST_LOOK_S = 0.01  # the stub provider's first look (providers.vendors.stub.status_poller.FIRST_LOOK_S)
COMMAND = "true"


def look_delays() -> Iterator[float]:
    """Seconds before each status look: 10, 20, 40, 50, 50, ... ms."""
    delay = FIRST_LOOK_S
    while True:
        yield delay
        delay = min(2 * delay, POLL_INTERVAL_S)


def create_body(index: int) -> dict[str, Any]:
    return {
        "name": f"bench-{index}",
        "docker_image": "python:3.11-slim",
        "start_command": {"executable": "tail", "args": ["-f", "/dev/null"]},
        "cpu_cores": 1.0,
        "memory_gb": 1.0,
        "disk_size_gb": 5,
        "timeout_minutes": 60,
        "labels": ["stampede-run=bench-overhead"],
        "idempotency_key": uuid.uuid4().hex,
    }


def gateway_url(auth: dict[str, Any]) -> str:
    return f"{str(auth['gateway_url']).rstrip('/')}/{auth['user_ns']}/{auth['job_id']}/exec"


def exec_body(sandbox_id: str) -> dict[str, Any]:
    return {"command": COMMAND, "timeout": 30, "sandbox_id": sandbox_id, "working_dir": None, "env": {}}
