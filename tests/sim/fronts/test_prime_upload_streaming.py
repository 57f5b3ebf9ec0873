"""The Prime-like gateway's upload route writes a file as it arrives, so 960 repositories in flight are not 960 forms
held in the simulator's memory; the stub provider sends the form without copying the data.

What a user relies on: a 32 MB upload lands intact (downloaded back byte for byte), the stub and its client together
hold a few chunks of it at a time, and nothing of a staged upload is left beside the sandbox's tree.
"""

from __future__ import annotations

import hashlib
import tracemalloc

from providers.base import SandboxSpec
from providers.sim.prime.api import StubSettings, start_stub
from providers.vendors.stub.provider import StubProvider

UPLOAD_BYTES = 32 * 1024 * 1024
PEAK_BOUND = 8 * 1024 * 1024  # client and gateway: their chunks and buffers (~256 KiB each), never the file


async def test_a_32_mb_upload_is_streamed_to_the_sandbox_tree_and_back() -> None:
    stub = await start_stub(StubSettings(profile="ideal", seed=3, overrides=(("sandbox.commands", "modelled"),)))
    provider = StubProvider.from_options({"base_url": stub.url, "token": stub.token, "poll_interval_s": 0.01})
    data = bytes(range(256)) * (UPLOAD_BYTES // 256)
    try:
        ref = await provider.create(SandboxSpec(run_id="big", rollout_id="r1", lifetime_s=600))
        await provider.wait_ready(ref, timeout=10)
        await provider.upload_file(ref, "/root/small.txt", b"warm the connection up")
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            await provider.upload_file(ref, "/root/repo/stampede-upload.tar", data)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        back = await provider.download_file(ref, "/root/repo/stampede-upload.tar")
        root = stub.simulator.tree(ref.sandbox_id).root
        staged = sorted(path.name for path in root.parent.iterdir() if path.name.startswith(".upload-"))
    finally:
        await provider.aclose()
        await stub.close()
    assert hashlib.sha256(back).digest() == hashlib.sha256(data).digest()
    assert peak - before < PEAK_BOUND, f"the stub and its client held {peak - before} bytes of a {UPLOAD_BYTES} upload"
    assert staged == []
