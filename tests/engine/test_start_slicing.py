"""A burst's flood of starts leaves the engine's loop a turn every slice, so answers already back (and the lag
probe) wait for at most STARTS_PER_TURN first steps, not for the whole burst's."""

from __future__ import annotations

import asyncio

from harness.engine.server import STARTS_PER_TURN, StartSlicer


async def test_a_flood_of_starts_gives_the_loop_a_turn_after_each_slice() -> None:
    slicer = StartSlicer()
    started = 0
    turns: list[int] = []

    def note_turn() -> None:
        turns.append(started)
        if len(turns) < 3:
            asyncio.get_running_loop().call_soon(note_turn)

    asyncio.get_running_loop().call_soon(note_turn)  # runs at the loop's next turn, whenever the reader yields
    for _ in range(3 * STARTS_PER_TURN + 10):
        await slicer.before_start()
        started += 1
    assert turns == [STARTS_PER_TURN, 2 * STARTS_PER_TURN, 3 * STARTS_PER_TURN]


async def test_starts_below_a_slice_never_wait_for_the_loop() -> None:
    slicer = StartSlicer(per_turn=8)
    ran: list[bool] = []
    asyncio.get_running_loop().call_soon(lambda: ran.append(True))
    for _ in range(8):
        await slicer.before_start()
    assert ran == []
