"""The node pool's autoscaler: nodes asked for while sandboxes wait arrive after `scale_up_lag_s`; a node idle for
`scale_down_idle_s` beyond the initial ones goes away (the pool half of the control plane, `simulator.py`)."""

from __future__ import annotations

import math
from collections.abc import Callable

from providers.sim.core.clock import SimClock, TimerHandle
from providers.sim.core.pool import Node, NodePool
from providers.sim.core.profile import Pool


class Autoscaler:
    """Adds nodes for sandboxes that wait, removes idle ones; `on_arrival` runs when new nodes joined."""

    def __init__(self, pool: NodePool, spec: Pool, clock: SimClock, on_arrival: Callable[[], None]) -> None:
        self.pool = pool
        self.spec = spec
        self.clock = clock
        self.on_arrival = on_arrival
        self._timers: set[TimerHandle] = set()

    def scale_up(self, n_waiting: int) -> None:
        """Ask for the nodes `n_waiting` sandboxes need beyond those already booting, within `max_nodes`."""
        pool = self.pool
        spec = self.spec
        slots = spec.slots_per_node
        deficit = n_waiting - pool.booting * slots
        if deficit <= 0:
            return
        need = 1 if math.isinf(slots) else math.ceil(deficit / slots)
        room = spec.max_nodes - len(pool) - pool.booting
        add = int(min(need, room))
        if add <= 0:
            return
        pool.booting += add
        handle: TimerHandle | None = None

        def arrive() -> None:
            if handle is not None:
                self._timers.discard(handle)
            pool.booting -= add
            now = self.clock.now()
            for _ in range(add):
                node = pool.add(warm=False, now=now)
                self.maybe_idle(node)
            self.on_arrival()

        handle = self.clock.call_at(self.clock.now() + spec.scale_up_lag_s, arrive)
        self._timers.add(handle)

    def maybe_idle(self, node: Node) -> None:
        """Schedule scale-down of a node that has nothing to do, if the pool may shrink."""
        spec = self.spec
        if node.used or not math.isfinite(spec.scale_down_idle_s) or math.isinf(node.slots):
            return
        now = self.clock.now()
        node.idle_since = now

        def check() -> None:
            node.idle_timer = None
            if node.alive and node.used == 0 and node.idle_since == now and len(self.pool) > spec.initial_nodes:
                for pull in node.pulls.values():
                    if pull.timer is not None:
                        pull.timer.cancel()
                self.pool.remove(node)

        if node.idle_timer is not None:
            node.idle_timer.cancel()
        node.idle_timer = self.clock.call_at(now + spec.scale_down_idle_s, check)

    def close(self) -> None:
        """Cancel every pending arrival and scale-down."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        for node in self.pool.nodes.values():
            if node.idle_timer is not None:
                node.idle_timer.cancel()
