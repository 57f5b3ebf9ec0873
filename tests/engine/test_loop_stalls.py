"""A rollout is charged the worst stall of the engine's loop since it began, whichever step it waited on, and not
again for a stall its readiness poll window already holds: a freeze while a create call was in flight delayed the
create answer as much as one during the first command delays that command's."""

from __future__ import annotations

import asyncio
import time

from harness.engine.health import LoopHealth

# a freeze far above the stalls a busy machine gives an idle loop (a CPU quota's throttled periods are ~100 ms): the
# ordinary probes' lags are told apart from it at half of it
FREEZE_S = 1.0


async def _stalled_loop(block_s: float) -> tuple[LoopHealth, float, float, float]:
    health = LoopHealth(interval_s=0.01)
    health.start()
    await asyncio.sleep(0.05)
    began = time.monotonic()
    await asyncio.sleep(0.05)  # the rollout waits on its create answer ...
    blocked_from = time.monotonic()
    time.sleep(block_s)  # ... while the loop is frozen
    blocked_to = time.monotonic()
    for _ in range(10):  # then many ordinary probes: the stall is no longer the latest one
        await asyncio.sleep(0.01)
    await health.stop()
    return health, began, blocked_from, blocked_to


def test_a_stall_before_the_first_command_is_charged() -> None:
    health, began, blocked_from, blocked_to = asyncio.run(_stalled_loop(FREEZE_S))
    measured = blocked_to - blocked_from
    charged = health.lag_since(began)
    assert 0.8 * measured <= charged <= measured + 0.2, (charged, measured)


def test_a_stall_inside_the_poll_window_is_not_charged_again() -> None:
    health, began, blocked_from, blocked_to = asyncio.run(_stalled_loop(FREEZE_S))
    # the poll window spans the freeze: the provider's last look may have been that late, already counted there
    charged = health.lag_since(began, (blocked_from - 0.001, blocked_to + 0.05))
    assert charged < 0.5 * (blocked_to - blocked_from), charged  # ordinary probes: far below the freeze


def test_a_stall_before_the_rollout_began_is_not_its_own() -> None:
    health, _, blocked_from, blocked_to = asyncio.run(_stalled_loop(FREEZE_S))
    charged = health.lag_since(blocked_to + 0.02)
    assert charged < 0.5 * (blocked_to - blocked_from), charged  # ordinary probes: far below the freeze
