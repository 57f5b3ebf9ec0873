"""A progress line every few seconds while a run goes, from the engine's own counters (not Locust's)."""

from __future__ import annotations

import sys
import time
from typing import Any

import gevent


def format_progress(elapsed_s: float, stage: str, users: int, target: int, stats: dict[str, Any] | None) -> str:
    head = f"[{elapsed_s:6.0f}s] {stage or '-':<14} users {users}/{target}"
    if not stats:
        return head
    failures = stats.get("failures") or {}
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(failures.items(), key=lambda kv: -kv[1])[:3])
    p50, p99 = stats.get("recent_tti_p50_s"), stats.get("recent_tti_p99_s")
    tti = f"TTI p50 {p50:.2f}s p99 {p99:.2f}s" if p50 is not None and p99 is not None else "TTI -"
    health = stats.get("health") or {}
    return (
        f"{head} | in flight {stats.get('inflight', 0)} | ok {stats.get('ok', 0)} failed {stats.get('failed', 0)}"
        + (f" ({kinds})" if kinds else "")
        + f" | {tti} (last 10s) | loop lag p99 {health.get('loop_lag_p99_ms', 0):.0f}ms"
        f" cpu {health.get('cpu_percent', 0):.0f}%"
    )


class ProgressPrinter:
    """Prints to stderr from its own greenlet; stopping it never blocks the run."""

    def __init__(self, session: Any, interval_s: float) -> None:
        self.session = session
        self.interval_s = interval_s
        self.t0 = time.monotonic()
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _loop(self) -> None:
        while True:
            gevent.sleep(self.interval_s)
            print(self.line(), file=sys.stderr, flush=True)

    def line(self) -> str:
        session = self.session
        runner = session.environment.runner
        shape = session.shape
        stage = shape.stage if shape is not None else None
        stats = None
        if session.engine is not None and session.engine.alive:
            try:
                stats = session.engine.stats(timeout=5)
            except Exception:
                stats = None
        return format_progress(
            time.monotonic() - self.t0,
            stage.name if stage else "",
            int(getattr(runner, "user_count", 0)),
            stage.target_users if stage else int(getattr(runner, "target_user_count", 0) or 0),
            stats,
        )
