"""Baseline: Vercel Sandbox's SDK alone (`vercel.sandbox.SandboxClient`), as its docs show, N lifecycles in flight.

    VERCEL_TOKEN=T VERCEL_TEAM_ID=team VERCEL_PROJECT_ID=prj VERCEL_SANDBOX_API_URL=URL/api \
        python bench/baselines/sdk_vercel.py --concurrency 64 --seconds 30 --out r.json

One `SandboxClient` (its own pool of 100 connections, as shipped), its credentials from the environment; the API's
URL is `SandboxServiceOptions(base_url=...)` (the SDK reads none from the environment: `VERCEL_SANDBOX_API_URL` is
this script's). Telemetry is off (`VERCEL_SANDBOX_TELEMETRY_DISABLED`), as the vercel provider sets it. A lifecycle:
`create_sandbox()` (answers once the sandbox runs: the SDK's own poll) -> `run_process("true")` -> `destroy()`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from vercel.sandbox import SandboxClient, SandboxServiceOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdk_driver import main


@asynccontextmanager
async def open_client() -> AsyncIterator[SandboxClient]:
    os.environ.setdefault("VERCEL_SANDBOX_TELEMETRY_DISABLED", "1")
    client = SandboxClient.create(options=SandboxServiceOptions(base_url=os.environ.get("VERCEL_SANDBOX_API_URL")))
    try:
        yield client
    finally:
        await client.aclose()


async def lifecycle(client: SandboxClient, index: int) -> tuple[str, float]:
    started = time.monotonic()
    sandbox = await client.create_sandbox(tags={"bench": "bare"})
    try:
        await sandbox.run_process("true", [], capture_output=True)
        return sandbox.name, time.monotonic() - started
    finally:
        await sandbox.destroy()


if __name__ == "__main__":
    main(open_client, lifecycle, __doc__ or "")
