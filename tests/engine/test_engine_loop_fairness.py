"""The engine's loop stays on time for the rollouts it is timing while thousands of others stop or pile up.

Counted in loop iterations and collector generations, not milliseconds: the same on a busy machine.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import weakref

from foundation.gc_freezing import freeze_survivors, tune_for_latency
from harness.engine.paced_cancel import CancelPacer


class IterationCounter:
    """Counts turns of the event loop (a callback that reschedules itself once per turn)."""

    def __init__(self) -> None:
        self.turn = 0
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.turn += 1
        self._handle = self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._handle.cancel()


def test_a_wave_of_cancels_unwinds_a_slice_per_loop_turn_and_every_task_ends() -> None:
    async def scenario() -> tuple[dict[int, int], int]:
        counter = IterationCounter()
        unwound_in_turn: dict[int, int] = {}

        async def rollout() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                unwound_in_turn[counter.turn] = unwound_in_turn.get(counter.turn, 0) + 1
                raise

        tasks = [asyncio.ensure_future(rollout()) for _ in range(1_000)]
        await asyncio.sleep(0)
        pacer = CancelPacer(per_iteration=32)
        for task in tasks:  # what a run's stop does: a thousand cancels in one go
            pacer.cancel(task)
        await asyncio.wait(tasks, timeout=30)
        counter.stop()
        return unwound_in_turn, sum(task.cancelled() for task in tasks)

    unwound_in_turn, cancelled = asyncio.run(scenario())
    assert cancelled == 1_000
    assert max(unwound_in_turn.values()) <= 32 + 1  # unpaced, all 1,000 unwound in one turn
    assert len(unwound_in_turn) >= 1_000 // 33


def test_a_lone_cancel_takes_effect_in_the_next_turn() -> None:
    async def scenario() -> bool:
        task = asyncio.ensure_future(asyncio.sleep(3600))
        await asyncio.sleep(0)
        CancelPacer().cancel(task)
        await asyncio.sleep(0)
        return task.cancelled()

    assert asyncio.run(scenario())


def test_survivors_are_frozen_each_interval_and_a_new_run_collects_cycles_among_them() -> None:
    class Node:
        def __init__(self) -> None:
            self.other: Node | None = None

    async def scenario() -> tuple[int, bool, bool]:
        tune_for_latency()
        frozen_at_start = gc.get_freeze_count()
        first, second = Node(), Node()
        first.other, second.other = second, first  # a cycle: only the collector can free it
        gone = weakref.ref(first)
        freezer = asyncio.ensure_future(freeze_survivors(interval_s=0.01))
        await asyncio.sleep(0.1)
        freezer.cancel()
        grew = gc.get_freeze_count() > frozen_at_start
        del first, second
        gc.collect()  # a collection in the run does not walk frozen objects: the cycle stays
        kept_in_run = gone() is not None
        tune_for_latency()  # the next run's start unfreezes and collects everything
        return grew, kept_in_run, gone() is None

    try:
        grew, kept_in_run, freed_at_next_run = asyncio.run(scenario())
    finally:
        gc.unfreeze()
        gc.set_threshold(700, 10, 10)
    assert grew and kept_in_run and freed_at_next_run


def test_a_simulated_vendor_freezes_what_it_built_and_then_its_survivors() -> None:
    """The vendor's full collections walked every sandbox it held (287 ms at 8,000): it freezes them as the engine
    does, at its start and then every second."""
    from providers.sim.core.serving.serve_cli import serve_until_stopped

    class Server:
        closed = False

        async def close(self) -> None:
            self.closed = True

    seen: dict[str, int] = {}
    sandboxes: list[list[int]] = []

    async def scenario() -> Server:
        server = Server()

        async def start() -> Server:
            return server

        def on_ready(_: object) -> None:
            seen["at_ready"] = gc.get_freeze_count()
            sandboxes.extend([index] for index in range(1_000))  # what the first second's requests leave alive
            loop = asyncio.get_running_loop()
            given_up_at = loop.time() + 30  # a hang guard: a freeze a second in is what is looked for, however late

            def look() -> None:
                seen["after_a_second"] = gc.get_freeze_count()
                if seen["after_a_second"] >= seen["at_ready"] + 1_000 or loop.time() > given_up_at:
                    os.kill(os.getpid(), signal.SIGTERM)
                else:
                    loop.call_later(0.1, look)

            loop.call_later(0.5, look)

        await serve_until_stopped(start, on_ready, exit_on_stdin_eof=False)
        return server

    threshold = gc.get_threshold()
    try:
        server = asyncio.run(scenario())
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
    assert server.closed
    assert seen["at_ready"] > 0  # start-up's objects frozen before the first request
    assert seen["after_a_second"] >= seen["at_ready"] + 1_000  # and the survivors of the first second
