"""Baseline: E2B's SDK alone (`e2b.AsyncSandbox`), as its docs show, N lifecycles in flight.

    E2B_API_KEY=T E2B_API_URL=URL E2B_SANDBOX_URL=URL E2B_MAX_CONNECTIONS=1000 \
        python bench/baselines/sdk_e2b.py --concurrency 64 --seconds 30 --out r.json

E2B has no client object: the SDK keeps one connection pool per process (E2B_MAX_CONNECTIONS widens it past its
200, as a user at 960 in flight must over plain http). A lifecycle: `AsyncSandbox.create()` (answers once the
sandbox runs: that is its wait) -> `commands.run("true")` -> `kill`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from e2b import AsyncSandbox

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdk_driver import main


@asynccontextmanager
async def open_client() -> AsyncIterator[None]:
    yield None


async def lifecycle(_: None, index: int) -> tuple[str, float]:
    started = time.monotonic()
    sandbox = await AsyncSandbox.create()
    try:
        await sandbox.commands.run("true")
        return sandbox.sandbox_id, time.monotonic() - started
    finally:
        await sandbox.kill()


if __name__ == "__main__":
    main(open_client, lifecycle, __doc__ or "")
