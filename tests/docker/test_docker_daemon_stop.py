"""The daemon stopped in the middle of a batch: every failure classified, nothing escapes, nothing leaks.

Runs on a private dockerd (its own socket, data root and containerd, started with scripts/ensure-docker
--socket), so stopping it never touches the machine's daemon or other tests.
"""

from __future__ import annotations

import asyncio
import collections

import pytest

from providers import create_provider
from providers.base import SandboxSpec
from tests.docker_support import (
    PrivateDaemon,
    lifecycle,
    new_run_id,
)

pytestmark = pytest.mark.docker


async def test_daemon_stopped_mid_batch_gives_classified_failures(private_daemon: PrivateDaemon) -> None:
    run_id = new_run_id("stop")
    provider = create_provider("docker", {"host": private_daemon.host})
    await provider.preflight()  # also builds the offline image into this daemon
    commands = [["true"]] + [["sleep", "0.2"]] * 15  # ~3 s of tool calls per rollout

    async def staggered(index: int) -> object:
        await asyncio.sleep(index * 0.05)  # some creating, some starting, some in exec when the stop lands
        spec = SandboxSpec(run_id=run_id, rollout_id=f"s{index}", memory_mb=64)
        return await lifecycle(provider, spec, commands, ready_timeout=30, exec_timeout=30)

    batch = [asyncio.create_task(staggered(i)) for i in range(40)]
    await asyncio.sleep(1.2)
    said = await asyncio.to_thread(private_daemon.stop)
    assert "stopped dockerd" in said or "killed" in said, said
    records = await asyncio.wait_for(asyncio.gather(*batch), timeout=90)
    after = [
        await lifecycle(provider, SandboxSpec(run_id=run_id, rollout_id=f"after{i}"), ready_timeout=5) for i in range(3)
    ]
    await provider.aclose()

    records = [*records, *after]  # type: ignore[list-item]
    assert not [r.escaped for r in records if r.escaped]  # every failure came out as a ProviderError
    kinds = collections.Counter(r.kind for r in records if not r.ok)  # type: ignore[attr-defined]
    assert kinds, "the stop landed after the batch: nothing failed"
    assert kinds["transport"] > 0, kinds
    assert not {"unknown", "harness", ""} & set(kinds), kinds
    assert all((r.kind, r.phase) == ("transport", "create") for r in after)

    private_daemon.start()  # back up: what the stop left behind is reaped by the run label
    provider = create_provider("docker", {"host": private_daemon.host})
    try:
        await provider.cleanup(run_id)
        assert await provider.list_owned(run_id) == []
    finally:
        await provider.aclose()
    print("outcomes:", collections.Counter((r.ok, r.kind, r.phase) for r in records))  # type: ignore[attr-defined]
