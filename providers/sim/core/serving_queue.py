"""The vendor's API server as one serving queue: every request it serves takes its turn (issue #31).

Why a queue of every request, not of creates alone: a burst's creates slow down when its first sandboxes are ready
while creates are still going through, because their requests take turns at the same server. On this harness's own
records (the kept runs of issue #31, 2026-12-06, a `--local` vendor on 2 cores), a burst of 960 whose sandboxes boot
in seconds takes its creates at the pace a burst of 100 does (prime-like 0.18 ms a create at both widths), while one
whose sandboxes are ready in tens of milliseconds does not (ideal: 0.16 ms at 100, 0.57 at 960; accepted over 0.96 s
against 0.37 s for prime-like's 960). And in the trial's ramp of `ideal`, where creates overlap live sandboxes' polls,
commands and terminates all along, a create's wait at the vendor grows with the requests of each kind queued ahead
of it (0.47 ms a create, 0.23 an exec, 0.31 a terminate ahead, pooled over the ramp; harness/fitting/serving.py
fits them), and the ramp's rollouts level off at ~1,000 a second, about one per (0.47 + 0.23 + 0.31) ms.

The model is the simplest that carries that: one server, first come first served, each request of kind `k`
holding it `Serving.cost(k)` vendor seconds. The kinds are the calls the harness records for a rollout (its ops):
the create, the readiness wait's requests once the sandbox is RUNNING (the look that sees it, the gateway's auth),
the command, and the terminate. A queue without costs (every field 0) serves at once, as before it existed.

Offline only (the virtual clock's experiments, `experiments._ProbeWorkload`): a served front on a live clock is
itself a serving loop on the machine that runs it, so charging the queue there as well would count it twice.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from providers.sim.core.clock import SimClock

KINDS = ("create", "ready", "exec", "terminate")
"""The requests a rollout makes of the vendor's server, in the order it makes them."""


@dataclass(frozen=True, slots=True)
class Serving:
    """Profile section `[serving]`: vendor seconds of the API server's one loop each request of a kind holds it.
    Absent from a profile: no queue (every request served the moment it is made). No shipped profile has one: a
    real vendor's API serves from many machines, and what a fit finds against a `--local` vendor is the trial
    machine's own serving loop (the fitted profile says so)."""

    create_s: float = 0.0
    ready_s: float = 0.0  # the readiness wait's requests once RUNNING: the status look that sees it, the auth
    exec_s: float = 0.0
    terminate_s: float = 0.0

    def __post_init__(self) -> None:
        for kind in KINDS:
            value = getattr(self, f"{kind}_s")
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{kind}_s must be a finite number of seconds >= 0, got {value}")

    def cost(self, kind: str) -> float:
        """Vendor seconds a request of `kind` holds the server (KeyError-free: an unknown kind is a programming
        error, a ValueError)."""
        if kind not in KINDS:
            raise ValueError(f"unknown request kind {kind!r} (kinds: {', '.join(KINDS)})")
        return float(getattr(self, f"{kind}_s"))

    @property
    def per_rollout_s(self) -> float:
        """Server seconds one rollout of one command costs: the most rollouts a second it can serve is 1 / this."""
        return sum(self.cost(kind) for kind in KINDS)


class ServingQueue:
    """One server, first come first served, on a clock: `submit(kind, then)` runs `then` when the request has had its
    turn. A request's turn starts when it is made or when the one before it is done, whichever is later, so
    assigning it at `submit` is first come first served (requests are made in clock order)."""

    def __init__(self, serving: Serving, clock: SimClock) -> None:
        self.serving = serving
        self.clock = clock
        self.free_at: float = -math.inf  # when the request in service (the last one submitted) is done
        self.served: Counter[str] = Counter()
        self.busy_s = 0.0  # server seconds spent, every kind
        self.waited_s: dict[str, float] = dict.fromkeys(KINDS, 0.0)  # seconds each kind's requests waited their turn

    def submit(self, kind: str, then: Callable[[], None]) -> None:
        """Queue a request of `kind`; `then()` when it has been served (at once, synchronously, when it costs
        nothing and the server is free: exactly as without a queue)."""
        cost = self.serving.cost(kind)
        now = self.clock.now()
        start = max(now, self.free_at)
        done = start + cost
        self.served[kind] += 1
        self.busy_s += cost
        self.waited_s[kind] += start - now
        if cost <= 0 and start <= now:
            then()
            return
        self.free_at = done
        self.clock.call_at(done, then)


__all__ = ["KINDS", "Serving", "ServingQueue"]
