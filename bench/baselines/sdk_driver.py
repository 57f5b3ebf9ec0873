"""The closed loop every `sdk_<vendor>.py` baseline runs: N workers, each one lifecycle after another, until the
deadline (then each worker finishes the lifecycle it is in), or SIGTERM/SIGINT (then the lifecycles in flight get
`STOP_GRACE_S` to finish and are cancelled: the bench throws their plane away).

A baseline module gives two things: `open_client()`, an async context manager yielding its SDK's one client
(whatever the SDK calls it), and `lifecycle(client, index)`, which makes the calls (create -> wait until
running, the SDK's own way -> `true` -> terminate) and answers (sandbox id, seconds from before create to the
command's answer). The loop writes JSON lines to --out: [t_submit epoch s, tti s, sandbox id] per lifecycle as
it goes (every `FLUSH_S`), and {"errors": n, "first_errors": [...]} last, when it ends; `bench/bench_sdk_overhead.py`
reads them (the last line may be missing if the loop was killed).

    python bench/baselines/sdk_prime.py --concurrency 64 --seconds 30 --out result.json   # plane from the env
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TextIO

STOP_GRACE_S = 5.0
FLUSH_S = 0.5  # records reach --out this often, so a loop killed at its stop bound still leaves them
Lifecycle = Callable[[Any, int], Awaitable[tuple[str, float]]]


async def closed_loop(
    open_client: Callable[[], AbstractAsyncContextManager[Any]],
    lifecycle: Lifecycle,
    concurrency: int,
    seconds: float,
    out: Path,
) -> None:
    """Run `concurrency` workers until `seconds` pass or a SIGTERM/SIGINT arrives; write the records to `out`
    before the client is closed (an SDK's close is no part of the loop, and may hang on a plane going away)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    deadline = time.monotonic() + seconds
    records: list[tuple[float, float, str]] = []
    errors: list[str] = []
    counter = iter(range(10**9))

    async def worker(client: Any) -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            submitted = time.time()
            try:
                sandbox_id, tti = await lifecycle(client, next(counter))
                records.append((submitted, tti, sandbox_id))
            except Exception as exc:  # a failed lifecycle is counted, as a user's loop would, and the loop goes on
                errors.append(f"{type(exc).__name__}: {exc}"[:200])

    async def flush_every(seconds: float, sink: TextIO) -> None:
        written = 0
        while True:
            await asyncio.sleep(seconds)
            sink.writelines(json.dumps(record) + "\n" for record in records[written:])
            sink.flush()
            written = len(records)

    sink = out.open("w")
    flusher = asyncio.ensure_future(flush_every(FLUSH_S, sink))
    async with open_client() as client:
        workers = [asyncio.ensure_future(worker(client)) for _ in range(concurrency)]
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([asyncio.gather(*workers), stopped], return_when=asyncio.FIRST_COMPLETED)
        late: set[asyncio.Future[None]] = set()
        if stop.is_set():  # a stop: the lifecycles in flight get a grace, then are cancelled (their plane goes too)
            _, late = await asyncio.wait(workers, timeout=STOP_GRACE_S)
        flusher.cancel()
        sink.close()
        out.write_text(
            "".join(json.dumps(record) + "\n" for record in records)
            + json.dumps({"errors": len(errors), "first_errors": errors[:5]})
            + "\n"
        )
        for task in (*late, stopped):
            task.cancel()
        await asyncio.wait([*late, stopped], timeout=STOP_GRACE_S)  # an SDK call may not heed its cancel at once


def main(open_client: Callable[[], AbstractAsyncContextManager[Any]], lifecycle: Lifecycle, doc: str) -> None:
    """The command line every baseline shares: --concurrency, --seconds (the bound), --out."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True, help="no lifecycle starts after this many seconds")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    asyncio.run(closed_loop(open_client, lifecycle, args.concurrency, args.seconds, Path(args.out)))
