"""The contract's file steps through the E2B and Daytona adapters (their SDKs' `files` / `fs`) on the local planes,
the lean `stub` client's on the Prime-like gateway, and the clear refusal of a step an adapter has not.

The fronts keep each sandbox's files in its own tree, so bytes round-trip (binary, 1 MiB), a missing file is the
contract's FileNotFoundError with the SDK's own exception as its cause, and one sandbox never sees another's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from daytona import DaytonaNotFoundError
from e2b import FileNotFoundException

from providers.base import Provider, ProviderError, SandboxSpec, UnsupportedFeature
from providers.sim.daytona.server import DaytonaSettings, start_daytona
from providers.sim.e2b.server import E2BSettings, start_e2b
from providers.sim.prime.api import StubSettings, start_stub
from providers.vendors.daytona.provider import DaytonaProvider
from providers.vendors.e2b import E2BProvider
from providers.vendors.stub.provider import StubProvider

BINARY = bytes(range(256)) * 3 + b"\x00\r\n\xff"
TOKEN = "adapter-files"


@pytest.fixture(autouse=True)
def private_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DOMAIN", "E2B_DEBUG", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name in ("DAYTONA_API_KEY", "DAYTONA_API_URL", "DAYTONA_TARGET"):
        monkeypatch.delenv(name, raising=False)


async def round_trips(provider: Provider, cause: type[BaseException], home: str) -> None:
    one = await provider.create(SandboxSpec(run_id="files", rollout_id="a", lifetime_s=300))
    two = await provider.create(SandboxSpec(run_id="files", rollout_id="b", lifetime_s=300))
    await provider.wait_ready(one, 30)
    await provider.wait_ready(two, 30)
    big = os.urandom(1 << 20)
    await provider.upload_file(one, f"{home}/data/binary.bin", BINARY)
    await provider.upload_file(one, f"{home}/big.bin", big)
    assert await provider.download_file(one, f"{home}/data/binary.bin") == BINARY
    assert await provider.download_file(one, f"{home}/big.bin") == big
    await provider.upload_file(one, "relative.txt", b"home")  # the vendor's own rule: the user's home
    assert await provider.download_file(one, f"{home}/relative.txt") == b"home"
    with pytest.raises(FileNotFoundError) as missing:
        await provider.download_file(one, f"{home}/none.txt")
    assert isinstance(missing.value.__cause__, cause)
    with pytest.raises(FileNotFoundError):
        await provider.download_file(two, f"{home}/big.bin")  # another sandbox's file
    assert await provider.cleanup("files") == 2


async def test_e2b_files_write_and_read() -> None:
    e2b = await start_e2b(E2BSettings(profile="ideal", seed=5, token=TOKEN))
    provider = E2BProvider.from_options({"base_url": e2b.url, "token": e2b.token, "sandbox_url": e2b.url})
    try:
        await round_trips(provider, FileNotFoundException, "/home/user")
        ref = await provider.create(SandboxSpec(run_id="snap", rollout_id="origin", lifetime_s=300))
        await provider.wait_ready(ref, 30)
        await provider.upload_file(ref, "kept.bin", BINARY)
        template = await provider.snapshot(ref)  # create_snapshot: an id `create` takes as the template
        await provider.upload_file(ref, "kept.bin", b"changed after the snapshot")
        copy = await provider.create(SandboxSpec(run_id="snap", rollout_id="copy", lifetime_s=300, image=template))
        await provider.wait_ready(copy, 30)
        assert await provider.download_file(copy, "kept.bin") == BINARY
        assert await provider.cleanup("snap") == 2
    finally:
        await provider.aclose()
        await e2b.close()


async def test_daytona_fs_upload_and_download() -> None:
    front = await start_daytona(DaytonaSettings(seed=3, token=TOKEN))
    provider = DaytonaProvider.from_options({"base_url": front.api_url, "token": TOKEN})
    try:
        await round_trips(provider, DaytonaNotFoundError, "/home/daytona")
    finally:
        await provider.aclose()
        await front.close()


async def test_stub_gateway_files_and_a_step_it_lacks_said_plainly() -> None:
    stub = await start_stub(StubSettings(profile="ideal", seed=7))
    provider = StubProvider.from_options({"base_url": stub.url, "token": stub.token})
    try:
        await round_trips(provider, ProviderError, "/root")  # the lean client's error: HTTP 404 classified
        ref = await provider.create(SandboxSpec(run_id="files", rollout_id="s", lifetime_s=300))
        with pytest.raises(UnsupportedFeature, match="streamed exec is not supported by the stub provider"):
            await provider.exec_stream(ref, ["true"], 5)  # the lean client reads whole answers: said, not a failure
        assert isinstance(UnsupportedFeature("stub", "x"), NotImplementedError)
    finally:
        await provider.aclose()
        await stub.close()
