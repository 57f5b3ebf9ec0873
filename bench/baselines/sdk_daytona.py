"""Baseline: Daytona's SDK alone (`daytona.AsyncDaytona`), as its docs show, N lifecycles in flight on one client.

    DAYTONA_API_URL=URL DAYTONA_API_KEY=T DAYTONA_TARGET=us \
        python bench/baselines/sdk_daytona.py --concurrency 64 --seconds 30 --out r.json

One `AsyncDaytona` from the environment, its HTTP pool widened to 1000 (`connection_pool_maxsize`, the SDK's own
setting; its default 250 would queue a 960-wide loop in the client). A lifecycle: `create()` (answers once the
sandbox is started: the SDK's own wait) -> `process.exec("true")` -> `delete`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from daytona import AsyncDaytona, DaytonaConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdk_driver import main


@asynccontextmanager
async def open_client() -> AsyncIterator[AsyncDaytona]:
    async with AsyncDaytona(DaytonaConfig(connection_pool_maxsize=1000)) as daytona:
        yield daytona


async def lifecycle(daytona: AsyncDaytona, index: int) -> tuple[str, float]:
    started = time.monotonic()
    sandbox = await daytona.create()
    try:
        await sandbox.process.exec("true")
        return sandbox.id, time.monotonic() - started
    finally:
        await sandbox.delete()


if __name__ == "__main__":
    main(open_client, lifecycle, __doc__ or "")
