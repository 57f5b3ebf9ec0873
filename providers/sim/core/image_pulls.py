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

Flows advance on the simulator's clock (`bandwidth.py`: one timer, the next flow to finish), so a pull is
deterministic.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence

from providers.base import IMAGE_SIZE_LABEL
from providers.sim.core.bandwidth import SharedBandwidth
from providers.sim.core.clock import SimClock
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


def registry(spec: Image, clock: SimClock) -> SharedBandwidth:
    """The account's image registry: layer flows keyed (node id, layer), `node_bandwidth_mb_s` a node,
    `registry_bandwidth_mb_s` in all."""
    node_mb_s = spec.node_bandwidth_mb_s
    return SharedBandwidth(clock, spec.registry_bandwidth_mb_s, lambda node: node_mb_s)
