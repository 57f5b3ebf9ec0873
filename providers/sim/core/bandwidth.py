"""Bandwidth shared by flows on the simulator's clock: image layers moving to nodes, files moving in and out.

Each flow belongs to a group (a node, a sandbox's uploads) with its own bandwidth, and every flow shares one total
(the registry, the account). Rates are max-min fair: a flow gets its group's bandwidth over the group's flows, unless
the total's water level is lower; when a flow starts or ends the others' rates change. The remaining MB advance at
the rates they had; one timer waits for the next flow to finish, so a result is a function of the calls' times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from providers.sim.core.clock import SimClock, TimerHandle


@dataclass(slots=True, eq=False)
class Flow:
    """One flow (a layer moving to a node, a file to or from a sandbox); `on_done` runs when its last MB arrived."""

    group: Hashable
    name: Hashable
    remaining_mb: float
    on_done: list[Callable[[], None]] = field(default_factory=list)
    rate: float = 0.0


class SharedBandwidth:
    """Every flow in progress, keyed (group, name); `group_mb_s(group)` a group's bandwidth, `total_mb_s` all's."""

    def __init__(self, clock: SimClock, total_mb_s: float, group_mb_s: Callable[[Hashable], float]) -> None:
        self.total_mb_s = total_mb_s
        self.group_mb_s = group_mb_s
        self.clock = clock
        self.flows: dict[tuple[Hashable, Hashable], Flow] = {}
        self._at = clock.now()
        self._timer: TimerHandle | None = None
        self.moved_mb = 0.0  # MB moved so far (a stat)
        self.peak_flows = 0

    def moving(self, group: Hashable, name: Hashable) -> Flow | None:
        return self.flows.get((group, name))

    def start(self, group: Hashable, name: Hashable, mb: float, on_done: Callable[[], None]) -> Flow:
        """Move `mb` as flow `name` of `group` (or join the flow already moving it)."""
        flow = self.flows.get((group, name))
        if flow is not None:
            flow.on_done.append(on_done)
            return flow
        self._advance()
        flow = Flow(group, name, mb, [on_done])
        self.flows[(group, name)] = flow
        self.peak_flows = max(self.peak_flows, len(self.flows))
        self._reschedule()
        return flow

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flows.clear()

    def _advance(self) -> None:
        """Count what every flow moved since the last change, at the rates it had."""
        now = self.clock.now()
        elapsed = now - self._at
        self._at = now
        if elapsed <= 0:
            return
        for flow in self.flows.values():
            moved = min(flow.remaining_mb, flow.rate * elapsed)
            flow.remaining_mb -= moved
            self.moved_mb += moved

    def _share(self) -> None:
        """Max-min fair rates: a flow gets its group's bandwidth over the group's flows, unless the total's level is
        lower; the level is set so the flows' rates add up to the total bandwidth (water-filling)."""
        per_group: dict[Hashable, int] = {}
        for flow in self.flows.values():
            per_group[flow.group] = per_group.get(flow.group, 0) + 1
        caps = sorted(
            ((self.group_mb_s(f.group) / per_group[f.group], i) for i, f in enumerate(self.flows.values())),
        )
        keys = list(self.flows)
        budget, left = self.total_mb_s, len(caps)
        level = math.inf
        for cap, _ in caps:
            if cap * left <= budget:
                budget -= cap
                left -= 1
            else:
                level = budget / left
                break
        for cap, i in caps:
            self.flows[keys[i]].rate = min(cap, level)

    def _reschedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.flows:
            return
        self._share()
        soonest = min(f.remaining_mb / f.rate if f.rate > 0 else math.inf for f in self.flows.values())
        if math.isfinite(soonest):
            self._timer = self.clock.call_at(self._at + soonest, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._advance()
        done = [key for key, f in self.flows.items() if f.remaining_mb <= 1e-9 * max(1.0, f.rate)]
        finished = [self.flows.pop(key) for key in done]  # in start order (the dict's), not by key
        self._reschedule()
        for flow in finished:
            for callback in flow.on_done:
                callback()
