"""A client-wide backoff for one vendor operation after a 429: Retry-After honoured, bounded, one probe at a time.

Without it a 429 storm meets every rollout's retry at once (the stub client kept creating at ~146/s through one,
issue 17 #9). Adapters share it (it imports only `providers.base`) without importing each other.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from providers.base import THROTTLE_DEFAULT_S, FailureKind, ProviderError

__all__ = ["THROTTLE_DEFAULT_S", "ThrottleGate"]


class ThrottleGate:
    """Client-wide backoff of one operation after a 429 (honours Retry-After, bounded by `max_s`).

    While the gate is closed, callers wait; once the backoff has passed, one request at a time goes out as a
    probe until one is answered with anything but a 429, which opens the gate for all. So a 429 storm meets
    one request per Retry-After instead of every rollout at once. A caller held longer than `max_s` fails as
    `rate_limited` without sending: bounded, and classified as what it is.
    """

    def __init__(self, max_s: float) -> None:
        self.max_s = max_s
        self._until = 0.0
        self._closed = False
        self._probe = asyncio.Lock()

    @property
    def closed(self) -> bool:
        return self._closed

    def throttled(self, retry_after: float | None) -> None:
        """A 429 answered: hold the operation for its Retry-After (THROTTLE_DEFAULT_S without one), at most max_s."""
        loop = asyncio.get_running_loop()
        wait = retry_after if retry_after is not None and retry_after > 0 else THROTTLE_DEFAULT_S
        self._until = max(self._until, loop.time() + min(wait, self.max_s))
        self._closed = True

    def answered(self) -> None:
        """Anything but a 429 answered: the gate opens for every caller."""
        self._closed = False

    @contextlib.asynccontextmanager
    async def passage(self) -> AsyncIterator[float]:
        """Hold the caller while the gate is closed; yield how long it waited (the probe holds the lock)."""
        if not self._closed:
            yield 0.0
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(self.max_s):
                await self._probe.acquire()
        except TimeoutError:
            raise ProviderError(
                FailureKind.RATE_LIMITED, f"still rate limited after {self.max_s:g}s waiting for the vendor's backoff"
            ) from None
        try:
            while self._closed and loop.time() < self._until:
                if loop.time() - started >= self.max_s:
                    raise ProviderError(
                        FailureKind.RATE_LIMITED,
                        f"still rate limited after {self.max_s:g}s waiting for the vendor's backoff",
                    )
                await asyncio.sleep(min(self._until, started + self.max_s) - loop.time())
            if self._closed:
                yield loop.time() - started  # this caller is the probe: the others wait for its answer
                return
        finally:
            self._probe.release()
        yield loop.time() - started
