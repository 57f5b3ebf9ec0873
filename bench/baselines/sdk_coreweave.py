"""Baseline: CoreWeave Sandbox's SDK alone (`cwsandbox.Sandbox`), as its docs show, N lifecycles in flight.

    CWSANDBOX_BASE_URL=URL CWSANDBOX_API_KEY=T python bench/baselines/sdk_coreweave.py \
        --concurrency 64 --seconds 30 --out r.json

The SDK has no client object: each `Sandbox` talks gRPC from the SDK's own background loop, its endpoint and key
from the environment. Its SIGINT/SIGTERM handlers are turned off (as its docs ask of a host with its own: this
loop stops on SIGTERM). `data_plane_mode="gateway"`, as the local plane announces (no direct data plane). A
lifecycle: `Sandbox(...).start()` -> `await sandbox` (the SDK's own poll until RUNNING) -> `exec(["true"])` ->
`stop(missing_ok=True)`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from cwsandbox import Sandbox, disable_signal_handlers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdk_driver import main


@asynccontextmanager
async def open_client() -> AsyncIterator[None]:
    disable_signal_handlers()
    yield None


async def _running(sandbox: Sandbox) -> None:
    await sandbox


async def lifecycle(_: None, index: int) -> tuple[str, float]:
    started = time.monotonic()
    sandbox = Sandbox(container_image="python:3.11", tags=["bench=bare"], data_plane_mode="gateway")
    await sandbox.start()
    try:
        await _running(sandbox)
        await sandbox.exec(["true"])
        return str(sandbox.sandbox_id), time.monotonic() - started
    finally:
        await sandbox.stop(missing_ok=True)


if __name__ == "__main__":
    main(open_client, lifecycle, __doc__ or "")
