"""Baseline: Modal's SDK alone (`modal`, `.aio`), as its docs show, N lifecycles in flight on one client.

    MODAL_SERVER_URL=URL MODAL_TOKEN_ID=I MODAL_TOKEN_SECRET=T MODAL_SANDBOX_V2=1 \
        python bench/baselines/sdk_modal.py --concurrency 64 --seconds 30 --out r.json

The SDK's one client from the environment; the app looked up and the image built once. A lifecycle:
`Sandbox.create(readiness_probe=Probe.with_exec("true"))` -> `wait_until_ready` -> `exec("true")` (both streams
read, exit code waited for) -> `terminate`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import modal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdk_driver import main


@asynccontextmanager
async def open_client() -> AsyncIterator[tuple[Any, Any]]:
    app = await modal.App.lookup.aio("bench-sdk-overhead", create_if_missing=True)
    image = await modal.Image.debian_slim().build.aio(app)
    yield app, image


async def lifecycle(client: tuple[Any, Any], index: int) -> tuple[str, float]:
    app, image = client
    started = time.monotonic()
    sandbox = await modal.Sandbox.create.aio(app=app, image=image, readiness_probe=modal.Probe.with_exec("true"))
    try:
        await sandbox.wait_until_ready.aio()
        process = await sandbox.exec.aio("true")
        await asyncio.gather(process.stdout.read.aio(), process.stderr.read.aio())
        await process.wait.aio()
        return sandbox.object_id, time.monotonic() - started
    finally:
        await sandbox.terminate.aio()
        await sandbox.detach.aio()


if __name__ == "__main__":
    main(open_client, lifecycle, __doc__ or "")
