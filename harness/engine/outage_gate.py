"""The engine's one backoff for a vendor it cannot reach: creates held while connections are refused.

A rollout whose create fails at the connection level (`FailureKind.TRANSPORT`: refused, reset, DNS, TLS) ends at
once, and its user starts the next: a 3 s outage became ~2,200 failed rollouts a second, each a create the vendor
never saw, and the stage's failure and start rates were the outage's. So the first such failure closes this gate
for every rollout of the engine: creates wait out a backoff (from BASE_BACKOFF_S, doubled per failed probe up to
MAX_BACKOFF_S, each drawn with jitter so engines do not probe in step), then one create goes out as a probe while
the others wait for its answer; anything but a connection failure opens the gate for all. A create held longer
than its bound fails as `transport` without being sent. The 429 path (`providers.throttle_gate`) does the same
per adapter for a vendor that answers; this one is the engine's, whatever the adapter.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from providers.base import FailureKind, ProviderError

T = TypeVar("T")

BASE_BACKOFF_S = 0.25
MAX_BACKOFF_S = 2.0
MAX_HOLD_S = 30.0
"""The longest a create waits at a closed gate (and at most its own create timeout): a long outage still ends
rollouts, a few a minute per user, rather than holding them silent."""


class OutageGate:
    """Engine-wide: closed by a create's connection failure, opened by any create the vendor answers."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._closed = False
        self._until = 0.0
        self._backoff_s = 0.0
        self._probe = asyncio.Lock()
        self.last_error = ""
        self.refusals = 0  # connection failures seen (creates sent and refused)
        self.held = 0  # creates failed at the gate without being sent

    @property
    def closed(self) -> bool:
        return self._closed

    def unreachable(self, exc: BaseException) -> None:
        """A create failed at the connection level: back off (one escalation per backoff, not per failure: the
        creates already in flight when the vendor went away all fail at once)."""
        now = asyncio.get_running_loop().time()
        self.refusals += 1
        self.last_error = str(exc)[:200]
        if self._closed and now < self._until:
            return
        self._backoff_s = min(MAX_BACKOFF_S, 2 * self._backoff_s if self._closed else BASE_BACKOFF_S)
        self._until = now + self._backoff_s * self._rng.uniform(0.5, 1.0)
        self._closed = True

    def answered(self) -> None:
        """The vendor answered a create (success or any other failure): every create may go."""
        self._closed = False
        self._backoff_s = 0.0

    async def through(
        self, call: Callable[[], Awaitable[T]], is_unreachable: Callable[[BaseException], bool], max_hold_s: float
    ) -> T:
        """`call()` (one create), sent when the gate lets it: at once while open; while closed, after the backoff,
        one probe at a time. Held past `max_hold_s` (bounded by MAX_HOLD_S): ProviderError(TRANSPORT), unsent."""
        if not self._closed:
            return await self._observe(call, is_unreachable)
        loop = asyncio.get_running_loop()
        hold_s = min(max_hold_s, MAX_HOLD_S)
        deadline = loop.time() + hold_s
        try:
            async with asyncio.timeout_at(deadline):
                await self._probe.acquire()
        except TimeoutError:
            raise self._held(hold_s) from None
        try:
            while self._closed and loop.time() < self._until:
                if loop.time() >= deadline:
                    raise self._held(hold_s)
                await asyncio.sleep(min(self._until, deadline) - loop.time())
            if self._closed:
                return await self._observe(call, is_unreachable)  # the probe: the others wait for its answer
        finally:
            self._probe.release()
        return await self._observe(call, is_unreachable)

    async def _observe(self, call: Callable[[], Awaitable[T]], is_unreachable: Callable[[BaseException], bool]) -> T:
        try:
            result = await call()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if is_unreachable(exc):
                self.unreachable(exc)
            else:
                self.answered()
            raise
        self.answered()
        return result

    def _held(self, hold_s: float) -> ProviderError:
        self.held += 1
        return ProviderError(
            FailureKind.TRANSPORT,
            f"vendor unreachable: create held {hold_s:g}s by the engine's backoff, not sent (last: {self.last_error})",
        )


__all__ = ["BASE_BACKOFF_S", "MAX_BACKOFF_S", "MAX_HOLD_S", "OutageGate"]
