"""Image pulls by size: layers shared between images, a per-node layer cache, and bandwidth shared as pulls overlap.

Why: a cold image cache, more often than the VM, is what stretches a startup into minutes (issue 30: OpenHands pods
Pending 5-12 min at 300-instance evaluations). The model, when the profile's `[image]` gives a bandwidth and the
image has a size:

- an image is layers (`[image] catalogue`: SWE-bench's per-instance images share their OS and conda layers, so a
  node pulls those once); its size comes from the create's `stampede-image-mb` label (the rollout plan's
  `image_size_mb`), else the catalogue, else `[image] size_mb`; with a label, the image's own layer is what the
  label's size leaves after the shared layers;
- a node moves the layers it lacks; each layer moving to a node is a flow, and flows share bandwidth max-min fairly
  under two limits at once: `node_bandwidth_mb_s` shared by one node's flows, `registry_bandwidth_mb_s` shared by
  every flow of the account. So 960 cold starts of a multi-GB image queue behind the registry, and two pulls at
  once take about twice as long as one;
- a layer stays on the node after it arrived (the cache); past `cache_mb` the least recently used layers no pull
  and no placed sandbox needs are evicted.

Flows advance on the simulator's clock (one timer: the next flow to finish), so a pull is deterministic.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from providers.base import IMAGE_SIZE_LABEL
from providers.sim.core.clock import SimClock, TimerHandle
from providers.sim.core.profile import OWN_LAYER, Image, parse_catalogue

Layer = tuple[str, float]  # (layer name, MB)


def declared_size_mb(labels: Sequence[str]) -> float | None:
    """The image size a create's labels declare (`stampede-image-mb=8000`); None when none or unreadable."""
    prefix = IMAGE_SIZE_LABEL + "="
    for label in labels:
        if label.startswith(prefix):
            try:
                value = float(label[len(prefix) :])
            except ValueError:
                return None
            return value if value >= 0 and math.isfinite(value) else None
    return None


class ImageLayers:
    """Which layers (name, MB) make up an image, from the profile's `[image]`; () for an image of unknown size."""

    def __init__(self, spec: Image) -> None:
        self.spec = spec
        self._catalogue = parse_catalogue(spec.catalogue)
        self.sized = math.isfinite(spec.node_bandwidth_mb_s) or math.isfinite(spec.registry_bandwidth_mb_s)

    def of(self, image: str, labels: Sequence[str] = ()) -> tuple[Layer, ...]:
        """The image's layers; () when the pull is not modelled by size (no bandwidth, or no size known)."""
        if not self.sized:
            return ()
        declared = declared_size_mb(labels)
        for pattern, layers in self._catalogue:
            if fnmatch.fnmatchcase(image, pattern):
                shared = [(name, mb) for name, mb in layers if name != OWN_LAYER]
                own = sum(mb for name, mb in layers if name == OWN_LAYER)
                if declared is not None:
                    own = max(0.0, declared - sum(mb for _, mb in shared))
                return tuple(shared) + (((image, own),) if own > 0 else ())
        size = declared if declared is not None else self.spec.size_mb
        return ((image, size),) if size > 0 else ()


@dataclass(slots=True, eq=False)
class Flow:
    """One layer moving to one node; `on_done` runs when its last MB arrived."""

    node: int
    layer: str
    remaining_mb: float
    on_done: list[Callable[[], None]] = field(default_factory=list)
    rate: float = 0.0


class Registry:
    """The account's image registry: every layer flow in progress, sharing node and registry bandwidth."""

    def __init__(self, spec: Image, clock: SimClock) -> None:
        self.node_mb_s = spec.node_bandwidth_mb_s
        self.registry_mb_s = spec.registry_bandwidth_mb_s
        self.clock = clock
        self.flows: dict[tuple[int, str], Flow] = {}
        self._at = clock.now()
        self._timer: TimerHandle | None = None
        self.moved_mb = 0.0  # MB pulled so far (a stat)
        self.peak_flows = 0

    def moving(self, node: int, layer: str) -> Flow | None:
        return self.flows.get((node, layer))

    def start(self, node: int, layer: str, mb: float, on_done: Callable[[], None]) -> Flow:
        """Move `mb` of `layer` to `node` (or join the flow already moving it)."""
        flow = self.flows.get((node, layer))
        if flow is not None:
            flow.on_done.append(on_done)
            return flow
        self._advance()
        flow = Flow(node, layer, mb, [on_done])
        self.flows[(node, layer)] = flow
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
        """Max-min fair rates: a flow gets its node's bandwidth over the node's flows, unless the registry's level is
        lower; the level is set so the flows' rates add up to the registry's bandwidth (water-filling)."""
        per_node: dict[int, int] = {}
        for flow in self.flows.values():
            per_node[flow.node] = per_node.get(flow.node, 0) + 1
        caps = sorted((self.node_mb_s / per_node[f.node], key) for key, f in self.flows.items())
        budget, left = self.registry_mb_s, len(caps)
        level = math.inf
        for cap, _ in caps:
            if cap * left <= budget:
                budget -= cap
                left -= 1
            else:
                level = budget / left
                break
        for cap, key in caps:
            self.flows[key].rate = min(cap, level)

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
        finished = [self.flows.pop(key) for key in sorted(done)]
        self._reschedule()
        for flow in finished:
            for callback in flow.on_done:
                callback()
