"""Baseline: Prime's SDK alone (`prime_sandboxes`), as its docs show, N lifecycles in flight on one client.

    PRIME_API_KEY=T PRIME_API_BASE_URL=URL python bench/baselines/sdk_prime.py --concurrency 64 --seconds 30 --out r.json

One `AsyncSandboxClient`, SDK defaults throughout (its gateway pool, its auth cache in ~/.prime: point HOME at a
scratch folder). A lifecycle: `create` -> `wait_for_creation` -> `execute_command("true")` -> `delete`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from prime_sandboxes import AsyncSandboxClient, CreateSandboxRequest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdk_driver import main


async def lifecycle(client: AsyncSandboxClient, index: int) -> tuple[str, float]:
    started = time.monotonic()
    sandbox = await client.create(CreateSandboxRequest(name=f"bench-{index}", docker_image="python:3.11-slim"))
    try:
        await client.wait_for_creation(sandbox.id)
        await client.execute_command(sandbox.id, "true")
        return sandbox.id, time.monotonic() - started
    finally:
        await client.delete(sandbox.id)


if __name__ == "__main__":
    main(AsyncSandboxClient, lifecycle, __doc__ or "")
