"""The garbage collector, tuned so its pauses do not land in the latencies the engine measures.

Every pause of the engine's loop delays every rollout in flight, and a cyclic collection walks every tracked
object: with thousands of rollouts in flight, a full one takes tens of milliseconds (profiling a ramp showed
the collector behind about half of the loop lag). Rollout garbage is almost all freed by reference counting,
so the engine (1) freezes what start-up built (modules, SDK tables, the provider: never garbage) into the
permanent generation, where no collection looks again, and (2) runs young collections less often.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000  # allocations between young collections (CPython's default: 700)
MIDDLE_THRESHOLD = 20
OLD_THRESHOLD = 20


def tune_for_latency() -> None:
    """After start-up and after each `configure`: what is alive now lives for the whole run."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
