"""The garbage collector, tuned so its pauses do not land in the latencies a run measures.

Used by the engine and by every simulated vendor (`providers.sim.core.serving.serve_cli`): a pause of either loop
delays every rollout in flight, and a cyclic collection walks every tracked object it covers. Rollout garbage
is almost all freed by reference counting (a young collection in the engine finds 6-12 cyclic objects among
20,000 allocations; in the Prime-like vendor it is each closed connection's transport, five objects, and no
per-rollout garbage at all: 309 transports after 108,536 rollouts on 300 keep-alive connections), so each process:
1. freezes what start-up built (modules, SDK tables, the provider: never garbage) into the permanent
   generation, where no collection looks again;
2. runs young collections less often;
3. freezes what survived, every second while a run is on. Without it, the objects of thousands of rollouts
   in flight piled up in the middle generation, and each of its collections walked all of them: during a
   ramp to 10,000 in flight, three pauses of 150-180 ms, the loop's worst lag. Frozen, a collection only
   ever walks the last second's objects (the largest pause in the same ramp: 17 ms).
   The simulated vendor had the same pauses, growing with the sandboxes it holds: in a ramp to 10,000, a full
   collection every ~4 s of 16 ms at 1,000 sandboxes up to 287 ms at 8,000, each holding up every create that
   arrived meanwhile (the ramp's whole timing-error tail).
The price: cyclic garbage among frozen objects is only found at the engine's next run start (`tune_for_latency`
unfreezes, collects and freezes again), and never in a vendor, where it grows with the client connections that
closed, not with rollouts. bench/bench_soak.py measures both as the RSS slope of a long run.
"""

from __future__ import annotations

import asyncio
import gc

YOUNG_THRESHOLD = 20_000  # allocations between young collections (CPython's default: 700)
MIDDLE_THRESHOLD = 20
OLD_THRESHOLD = 20
FREEZE_INTERVAL_S = 1.0


def tune_for_latency() -> None:
    """After start-up and at each run's start: collect everything once (frozen objects included), then freeze
    what is alive now, which lives for the whole run."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)


async def freeze_survivors(interval_s: float = FREEZE_INTERVAL_S) -> None:
    """Until cancelled: every `interval_s`, move every tracked object to the permanent generation, so no
    collection walks the rollouts in flight again and again (an O(1) splice of the collector's lists)."""
    while True:
        await asyncio.sleep(interval_s)
        gc.freeze()
