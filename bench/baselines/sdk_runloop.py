"""Baseline: Runloop's SDK alone (`runloop_api_client.AsyncRunloop`), as its docs show, N lifecycles in flight.

    RUNLOOP_BASE_URL=URL RUNLOOP_API_KEY=T python bench/baselines/sdk_runloop.py --concurrency 64 --seconds 30 --out r.json

One `AsyncRunloop` from the environment, on the SDK's own shared sharded pools as shipped. A lifecycle:
`devboxes.create()` -> `devboxes.await_running` (the SDK's long poll on `wait_for_status`) ->
`devboxes.execute_and_await_completion("true")` -> `devboxes.shutdown`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from runloop_api_client import AsyncRunloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdk_driver import main


@asynccontextmanager
async def open_client() -> AsyncIterator[AsyncRunloop]:
    async with AsyncRunloop() as runloop:
        yield runloop


async def lifecycle(runloop: AsyncRunloop, index: int) -> tuple[str, float]:
    started = time.monotonic()
    devbox = await runloop.devboxes.create(metadata={"bench": "bare"})
    try:
        await runloop.devboxes.await_running(devbox.id)
        await runloop.devboxes.execute_and_await_completion(devbox.id, command="true")
        return devbox.id, time.monotonic() - started
    finally:
        await runloop.devboxes.shutdown(devbox.id)


if __name__ == "__main__":
    main(open_client, lifecycle, __doc__ or "")
