"""Awaiting a vendor SDK's call so that cancelling the caller still ends in `CancelledError`.

connectrpc (which prime-sandboxes and e2b ride on) turns a cancelled stream into `ConnectError(CANCELED)`, and
an SDK may wrap that in its own error or keep a command's stream in a task of its own: the cancellation is then
swallowed, `asyncio.timeout` never fires, and a rollout the harness cut off would be recorded as failed instead
of cancelled. Shared by adapters without one importing another; imports nothing of ours.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def cancellable(call: Awaitable[T]) -> T:
    """`await call`; an exception raised while this task is being cancelled becomes `CancelledError`."""
    try:
        return await call
    except Exception:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError from None
        raise
