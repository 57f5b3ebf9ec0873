"""The `stub` adapter's readiness waits: every sandbox being waited for, looked at in `status:batchGet` rounds.

Prime's own SDK coalesces status looks the same way: one request asks about up to 100 sandboxes, so a 960-wide
burst costs a few requests a round, not 960. Each sandbox keeps its own look schedule, and a look lost on the way
(hung, reset, 5xx, garbage) is asked again soon while its poll window stays open.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from providers.base import FailureKind, ProviderError, ReadyObservation

BATCH_LIMIT = 100
TERMINAL_STATUSES = frozenset({"ERROR", "TERMINATED", "TIMEOUT"})
FIRST_LOOK_S = 0.01
"""A sandbox's first status look comes this long after its create was acknowledged; each later one waits twice
as long as the one before, up to the poll interval, and once the sandbox has waited long, a fixed share of its
wait so far (up to a ceiling). A fast vendor is seen ready within milliseconds; a slow start's poll window stays
the same small share of its TTI (the timing-error budget is relative too) while it costs a few looks a minute,
not twenty a second."""
COALESCE_S = 0.005  # sandboxes due this soon ride in the same batch request
MIN_ROUND_GAP_S = 0.005  # at most 200 batch rounds a second, however many sandboxes wait

AskStatuses = Callable[[list[str], str | None], Awaitable[dict[str, Any]]]
"""One `status:batchGet` for these ids (at this vendor shard, None: the one vendor): its answer body."""


@dataclass(slots=True)
class _Waiting:
    """One sandbox being waited for: when to look next, and when it was last seen not ready."""

    futures: list[asyncio.Future[tuple[dict[str, Any], ReadyObservation]]]
    due: float
    delay: float
    seen_not_ready_at: float  # when the last look that found it not ready was sent (or the create returned)
    since: float  # when the wait began
    looks: int = 0
    in_flight: bool = False


class StatusPoller:
    """Coalesces readiness waits into `status:batchGet` requests of up to 100 ids, each sandbox on its own
    backoff schedule (FIRST_LOOK_S doubling up to the poll interval, then `share` of the wait so far, up to
    `max_s`).

    Requests are fire-and-forget tasks with their own timeout: one slow or hung answer delays only the
    sandboxes it asked about, and only until `status_timeout_s`, never the rest of the fleet.
    """

    def __init__(
        self,
        ask: AskStatuses,
        interval_s: float,
        share: float = 0.01,
        max_s: float = 2.0,
        *,
        shard_of: Callable[[str], str] | None = None,
    ) -> None:
        self.ask = ask
        self.shard_of = shard_of
        self.interval_s = interval_s
        self.share = share
        self.max_s = max(max_s, interval_s)
        self._waiting: dict[str, _Waiting] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._backoff_until = 0.0
        # (due, seq, sandbox id): the next look of each sandbox; stale entries are skipped when reached
        self._schedule: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._wake_at = math.inf  # when the scheduler will look again unless woken earlier

    def _plan(self, sandbox_id: str, due: float) -> None:
        heapq.heappush(self._schedule, (due, next(self._seq), sandbox_id))
        if due < self._wake_at:
            self._wake.set()

    def _usable(self, entry: tuple[float, int, str]) -> bool:
        waiting = self._waiting.get(entry[2])
        return waiting is not None and not waiting.in_flight and waiting.due == entry[0]

    def _pop_due(self, limit: float) -> list[str]:
        """The sandboxes whose look is due by `limit`, each once (O(log n) a sandbox, never a scan of all)."""
        due: list[str] = []
        while self._schedule and self._schedule[0][0] <= limit:
            entry = heapq.heappop(self._schedule)
            if self._usable(entry):
                self._waiting[entry[2]].in_flight = True
                due.append(entry[2])
        return due

    def _next_due(self) -> float | None:
        while self._schedule and not self._usable(self._schedule[0]):
            heapq.heappop(self._schedule)
        return self._schedule[0][0] if self._schedule else None

    async def wait(self, sandbox_id: str) -> tuple[dict[str, Any], ReadyObservation]:
        """The first status snapshot that is RUNNING or terminal, and how promptly it was seen."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[dict[str, Any], ReadyObservation]] = loop.create_future()
        now = loop.time()
        waiting = self._waiting.get(sandbox_id)
        if waiting is None:
            first = min(FIRST_LOOK_S, self.interval_s)
            self._waiting[sandbox_id] = _Waiting(
                [future], due=now + first, delay=first, seen_not_ready_at=now, since=now
            )
            self._plan(sandbox_id, now + first)
        else:
            waiting.futures.append(future)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        try:
            return await future
        finally:
            waiting = self._waiting.get(sandbox_id)
            if waiting is not None:
                with contextlib.suppress(ValueError):
                    waiting.futures.remove(future)
                if not waiting.futures:
                    del self._waiting[sandbox_id]

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_round = -math.inf
        try:
            while self._waiting:
                self._wake.clear()
                now = loop.time()
                if now >= self._backoff_until and now - last_round >= MIN_ROUND_GAP_S:
                    due = self._pop_due(now + COALESCE_S)
                    for base, ids in self._by_vendor(due):
                        for start in range(0, len(ids), BATCH_LIMIT):
                            task = loop.create_task(self._look(ids[start : start + BATCH_LIMIT], now, base))
                            self._requests.add(task)
                            task.add_done_callback(self._requests.discard)
                    if due:
                        last_round = now
                next_due = self._next_due()
                self._wake_at = max(
                    next_due if next_due is not None else now + self.interval_s,
                    last_round + MIN_ROUND_GAP_S,
                    self._backoff_until,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=max(0.0, self._wake_at - loop.time()))
        finally:
            self._wake_at = math.inf
            if not self._waiting:
                self._schedule.clear()

    def _by_vendor(self, ids: list[str]) -> list[tuple[str | None, list[str]]]:
        """The due sandboxes grouped by the shard that owns them (one group when the vendor is not sharded)."""
        if self.shard_of is None:
            return [(None, ids)]
        groups: dict[str, list[str]] = {}
        for sandbox_id in ids:
            groups.setdefault(self.shard_of(sandbox_id), []).append(sandbox_id)
        return list(groups.items())

    async def _look(self, ids: list[str], sent_at: float, base: str | None = None) -> None:
        """One batch request: resolve the sandboxes that settled, reschedule the rest."""
        loop = asyncio.get_running_loop()
        body: dict[str, Any] = {}
        try:
            body = await self.ask(ids, base)
        except ProviderError as exc:
            if exc.kind is FailureKind.AUTH:
                self._fail(ids, exc)
            if exc.retry_after:
                self._backoff_until = max(self._backoff_until, loop.time() + exc.retry_after)
        except (TimeoutError, OSError):
            pass  # one lost look is not a failed rollout; the rollout's own deadline still holds
        received_at = loop.time()
        answered = {snapshot.get("sandbox_id") for snapshot in body.get("statuses", [])} | {
            error.get("sandbox_id") for error in body.get("errors", [])
        }
        settled: set[str] = set()
        for snapshot in body.get("statuses", []):
            status = snapshot.get("status")
            sandbox_id = snapshot.get("sandbox_id")
            waiting = self._waiting.get(sandbox_id)
            if waiting is None:
                continue
            waiting.looks += 1
            if status == "RUNNING" or status in TERMINAL_STATUSES:
                observation = ReadyObservation(received_at - waiting.seen_not_ready_at, waiting.looks)
                self._resolve(waiting, (snapshot, observation))
                settled.add(sandbox_id)
            else:
                waiting.seen_not_ready_at = sent_at
        for error in body.get("errors", []):
            sandbox_id = error.get("sandbox_id")
            settled.add(sandbox_id)
            self._fail(
                [sandbox_id],
                ProviderError(FailureKind.DIED_BEFORE_READY, f"{error.get('code')}: {error.get('message')}"),
            )
        for sandbox_id in ids:
            waiting = self._waiting.get(sandbox_id)
            if waiting is not None and sandbox_id not in settled:
                waiting.in_flight = False
                if sandbox_id in answered:
                    waiting.delay = self.next_delay(waiting.delay, received_at - waiting.since)
                    waiting.due = received_at + waiting.delay
                else:  # a lost look (hung, reset, 5xx, garbage): ask again soon; its window stays open meanwhile
                    waiting.due = received_at + min(waiting.delay, self.interval_s)
                self._plan(sandbox_id, waiting.due)

    def next_delay(self, delay: float, waited: float) -> float:
        """The gap before the next look at a sandbox not ready after `waited` seconds (see FIRST_LOOK_S)."""
        return min(max(min(2 * delay, self.interval_s), self.share * waited), self.max_s)

    @staticmethod
    def _resolve(waiting: _Waiting, result: tuple[dict[str, Any], ReadyObservation]) -> None:
        for future in waiting.futures:
            if not future.done():
                future.set_result(result)

    def _fail(self, ids: Sequence[str], exc: BaseException) -> None:
        for sandbox_id in ids:
            waiting = self._waiting.get(sandbox_id)
            for future in waiting.futures if waiting is not None else ():
                if not future.done():
                    future.set_exception(exc)

    async def close(self) -> None:
        for task in [self._task, *self._requests]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
