"""The one sandbox lifecycle every overhead side makes, as HTTP calls against the Prime-like stub.

create (POST /sandbox, which answers with the gateway's auth) -> readiness (POST /sandbox/status:batchGet
every POLL_INTERVAL_S until RUNNING) -> one command (POST {gateway}/exec) -> delete (DELETE /sandbox/{id}).
The same calls, in the same order, at the same poll interval as the `stub` provider, so a side's rate and CPU
differ only by what wraps the calls.
"""

from __future__ import annotations

import uuid
from typing import Any

POLL_INTERVAL_S = 0.05  # the stub provider's default poll interval
COMMAND = "true"


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
