"""The contract walked against a vendor's real service (the live tests): two sandboxes under a fresh run id,
a command whose stdout, stderr and exit code must come back right, then each cheap step of contract 9 the provider
offers (a file written and read back, a streamed command, a background process polled to its exit code), an
idempotent terminate, then cleanup by run label leaving nothing behind. Snapshots and forks are left out: they
cost minutes and money on some vendors (tests/adapters/test_adapter_steps.py walks them on the local planes)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from providers.base import Capability, Provider, SandboxRef, SandboxSpec


async def check_live_lifecycle(provider: Provider, ready_timeout_s: float, **spec: Any) -> None:
    run_id = f"live-{uuid.uuid4().hex[:10]}"
    try:
        await provider.preflight()
        ref = await provider.create(SandboxSpec(run_id=run_id, rollout_id="r1", **spec))
        spare = await provider.create(SandboxSpec(run_id=run_id, rollout_id="r2", **spec))
        await provider.wait_ready(ref, ready_timeout_s)
        result = await provider.exec(ref, ["sh", "-c", "echo out; echo err >&2; exit 3"], 60)
        assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
        await check_cheap_steps(provider, ref)
        await provider.terminate(ref)
        await provider.terminate(ref)  # idempotent
        owned = {r.sandbox_id for r in await provider.list_owned(run_id)}
        assert ref.sandbox_id not in owned and spare.sandbox_id in owned
    finally:
        reaped = await provider.cleanup(run_id)
        assert await provider.list_owned(run_id) == []
        await provider.aclose()
    assert reaped >= 1


async def check_cheap_steps(provider: Provider, ref: SandboxRef) -> None:
    """The steps of contract 9 that cost a command or two, each where the provider offers it."""
    offered = provider.capabilities()
    if {Capability.UPLOAD, Capability.DOWNLOAD} <= offered:
        data = bytes(range(256)) * 4
        await provider.upload_file(ref, "/tmp/stampede-live/walk.bin", data)
        assert await provider.download_file(ref, "/tmp/stampede-live/walk.bin") == data
    if Capability.EXEC_STREAM in offered:
        chunks: list[str] = []
        streamed = await provider.exec_stream(ref, ["sh", "-c", "echo streamed"], 60, chunks.append)
        assert (streamed.result.exit_code, streamed.result.stdout, "".join(chunks)) == (0, "streamed\n", "streamed\n")
        assert streamed.first_byte_s is not None and streamed.last_byte_s is not None
        assert 0 < streamed.first_byte_s <= streamed.last_byte_s
    if Capability.BACKGROUND in offered:
        handle = await provider.start_process(ref, ["sh", "-c", "exit 5"])
        code = None
        async with asyncio.timeout(120):
            while code is None:
                code = await provider.process_exit(ref, handle)
                if code is None:
                    await asyncio.sleep(0.5)
        assert code == 5
