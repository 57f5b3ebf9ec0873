"""Modal's SDK run on the engine's own event loop instead of its synchronizer's thread (option `sdk_loop=engine`).

Why: the `modal` SDK is written once, async, and `synchronicity` runs every `.aio` call of it on an event loop in a
thread of its own: each call hops there (`run_coroutine_threadsafe`) and its answer hops back
(`call_soon_threadsafe`), about eight calls a lifecycle, each paying two GIL hand-overs and wake-ups (py-spy at 960 in
flight: 61% of the engine's samples on that thread, `_write_to_self` alone 8.8%). Synchronicity awaits a call
directly when it is made on its own loop from its own thread, so the adapter makes the engine's loop that loop, once,
before the SDK has started one: its client, gRPC channels and every call then live on the engine's loop. Measured
through `bench/bench_sdk_overhead.py --vendors modal` at 64 in flight (2026-12-06): 4.42 CPU-ms a lifecycle against
5.11-5.19 on the SDK's thread, the bare loop's 4.71-5.14.

It sets the synchronizer's loop, thread and owner (the attributes its `_start_loop` sets; synchronicity 0.12) and
gives them back on `release`, which the provider's `aclose` calls: a loop that closed while still adopted would make
the SDK's next call anywhere in the process report its thread dead. Where the SDK's loop is already running (modal
used in the process before the provider), nothing is adopted and the SDK keeps its thread. Only `.aio` calls are
made on an adopted loop: a blocking call there is the deadlock synchronicity refuses.

Each call still runs in a task of its own (`in_own_task`), as synchronicity runs it on its thread: grpclib interrupts
a stream the server reset by cancelling the task that runs it, and never takes that cancel back (`uncancel`), so
awaited directly in a rollout's task it left the rollout "being cancelled": the adapter's `cancellable` then turned
the SDK's own error into a cancellation, and a dying command router ended rollouts as cancelled instead of
`transport` (tests/sim/fronts/test_faults_modal.py). A task costs a few µs; the thread hops it replaces, far more.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

from modal._utils.async_utils import synchronizer as _synchronizer

synchronizer: Any = _synchronizer  # its private attributes are set here; their types are synchronicity's own
T = TypeVar("T")


def adopt_running_loop() -> bool:
    """Make the running loop the SDK's, unless the SDK has one already; whether it did."""
    if synchronizer._loop is not None:  # synchronicity has no public way to give it a loop
        return False
    synchronizer._loop = asyncio.get_running_loop()
    synchronizer._thread = threading.current_thread()
    synchronizer._owner_pid = os.getpid()
    synchronizer._stopping = asyncio.Event()
    return True


def release_loop() -> None:
    """Give the SDK its own loop back (it starts a thread on its next call), if this thread's loop was adopted."""
    if synchronizer._thread is threading.current_thread():
        synchronizer._loop = synchronizer._thread = synchronizer._owner_pid = None
        synchronizer._stopping = None


def runs_on_adopted_loop() -> bool:
    """Whether the SDK's calls are made on the running loop (adopted), not on its own thread."""
    return synchronizer._thread is threading.current_thread()


async def in_own_task(call: Awaitable[T]) -> T:
    """`await call`, on an adopted loop in a task of its own (the module's docstring: grpclib's interrupts land there,
    not on the caller's task); cancelling the caller cancels it. On the SDK's own thread, just `await call`."""
    if synchronizer._thread is not threading.current_thread():
        return await call
    return await asyncio.ensure_future(call)
