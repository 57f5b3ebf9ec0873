"""A greenlet that calls one function every few seconds until stopped (or until the function says it is done).

The progress line and the live threshold watch both run this way; stopping one never blocks the run.
"""

from __future__ import annotations

from collections.abc import Callable

import gevent


class Periodic:
    """Calls `tick` every `interval_s` seconds; a tick returning True ends the loop."""

    def __init__(self, interval_s: float, tick: Callable[[], bool | None]) -> None:
        self.interval_s = interval_s
        self.tick = tick
        self._greenlet: gevent.Greenlet | None = None

    @property
    def running(self) -> bool:
        return self._greenlet is not None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _loop(self) -> None:
        while True:
            gevent.sleep(self.interval_s)
            if self.tick():
                self._greenlet = None
                return


__all__ = ["Periodic"]
