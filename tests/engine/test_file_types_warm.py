"""A run's first rollout never meets the engine's start-up imports.

`warm_file_types` imports pyarrow's pandas and compute modules in a thread while Locust's side starts; an extension
module's init holds the interpreter for all of it. Left running, it overlapped a burst's first creates in 2 of 3 runs
of 140 (phase marks: it ended 0.01 and 0.26 s after the first rollout), so `configure` waits for it.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from harness.engine.server import Engine
from harness.wire.messages import EngineConfig


def config(tmp_path: Path) -> EngineConfig:
    return EngineConfig(
        run_id="run-warm",
        worker="t0",
        out_dir=str(tmp_path),
        provider="tests.support.scripted_provider:ScriptedProvider",
        provider_options={"ledger": str(tmp_path / "ledger.jsonl")},
        profile="scripted",
        scenario="test",
        plan={"commands": [["true"]]},
        flush_interval_s=0.2,
    )


async def test_a_run_is_configured_only_once_the_file_types_are_warm(tmp_path: Path) -> None:
    warm = threading.Event()
    engine = Engine("t0", warm)
    configuring = asyncio.ensure_future(engine.configure(config(tmp_path).to_wire()))
    await asyncio.sleep(0.5)
    assert not configuring.done() and engine.run is None  # still importing: no run yet, so no rollout
    warm.set()
    answer = await asyncio.wait_for(configuring, 30)
    assert answer["worker"] == "t0" and engine.run is not None
    await engine.drain()
    await engine.close_connections()


async def test_an_engine_with_nothing_warming_is_configured_at_once(tmp_path: Path) -> None:
    engine = Engine("t0")
    answer = await asyncio.wait_for(engine.configure(config(tmp_path).to_wire()), 30)
    assert answer["worker"] == "t0"
    await engine.drain()
    await engine.close_connections()
