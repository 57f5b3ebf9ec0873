"""Files through Prime's own SDK (prime-sandboxes 0.5.1) and the `prime` provider, against the Prime-like stub.

Real aiohttp gateway on 127.0.0.1; each simulated sandbox holds its own file tree, so what one call writes the
next reads, a real command (under bubblewrap, where it runs) sees it, and no other sandbox does.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prime_sandboxes import APIError, SandboxNotRunningError

from providers.base import SandboxSpec
from providers.sim.core.execution.isolated_shell import IsolatedShell
from providers.sim.prime.api import RunningStub, StubSettings, start_stub
from providers.vendors.prime.provider import PrimeProvider

BINARY = bytes(range(256)) * 3 + b"\x00\r\n\xff"


@pytest.fixture(autouse=True)
def private_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("PRIME_API_KEY", "PRIME_TEAM_ID", "PRIME_CONTEXT", "PRIME_API_BASE_URL", "PRIME_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
async def local_prime() -> AsyncIterator[tuple[RunningStub, PrimeProvider]]:
    commands = "real" if IsolatedShell.available() else "modelled"
    overrides = (("sandbox.commands", commands),)
    stub = await start_stub(StubSettings(profile="ideal", seed=5, overrides=overrides))
    provider = PrimeProvider.from_options({"base_url": stub.url, "token": stub.token})
    yield stub, provider
    await provider.aclose()
    await stub.close()


async def test_bytes_round_trip_through_the_provider_and_the_sdk(
    local_prime: tuple[RunningStub, PrimeProvider], tmp_path: Path
) -> None:
    stub, provider = local_prime
    ref = await provider.create(SandboxSpec(run_id="files", rollout_id="r1", lifetime_s=600))
    await provider.wait_ready(ref, timeout=10)
    big = os.urandom(1 << 20)
    await provider.upload_file(ref, "/data/binary.bin", BINARY)
    await provider.upload_file(ref, "/data/big.bin", big)
    assert await provider.download_file(ref, "/data/binary.bin") == BINARY
    assert await provider.download_file(ref, "/data/big.bin") == big
    await provider.upload_file(ref, "notes.txt", b"relative")  # Prime runs as root: relative to /root
    assert await provider.download_file(ref, "/root/notes.txt") == b"relative"
    assert (stub.simulator.tree(ref.sandbox_id).root / "root/notes.txt").read_bytes() == b"relative"

    sdk = provider.sdk
    local = tmp_path / "local.txt"
    local.write_text("from disk\n")
    answer = await sdk.upload_file(ref.sandbox_id, "/data/from-disk.txt", str(local))
    assert (answer.success, answer.path, answer.size) == (True, "/data/from-disk.txt", 10)
    window = await sdk.read_file(ref.sandbox_id, "/data/from-disk.txt", offset=5, length=4)
    assert (window.content, window.size, window.total_size, window.truncated) == ("disk", 4, 10, True)
    if IsolatedShell.available():  # a real command sees what was uploaded, and writes what is downloaded
        seen = await provider.exec(ref, ["sh", "-c", "wc -c < /data/big.bin; echo made > /data/made.txt"], 10)
        assert seen.stdout.strip() == str(1 << 20)
        assert await provider.download_file(ref, "/data/made.txt") == b"made\n"


async def test_missing_files_folders_and_ended_sandboxes_answer_as_prime_does(
    local_prime: tuple[RunningStub, PrimeProvider], tmp_path: Path
) -> None:
    _stub, provider = local_prime
    ref = await provider.create(SandboxSpec(run_id="files", rollout_id="r2", lifetime_s=600))
    await provider.wait_ready(ref, timeout=10)
    with pytest.raises(FileNotFoundError) as missing:
        await provider.download_file(ref, "/nowhere/file.txt")
    assert isinstance(missing.value.__cause__, APIError) and "404" in str(missing.value.__cause__)
    with pytest.raises(APIError, match="400"):
        await provider.sdk.download_file(ref.sandbox_id, "/root", str(tmp_path / "x"))
    with pytest.raises(APIError, match="403"):
        await provider.upload_file(ref, "/usr/bin/planted", b"x")  # the host's system folders are read-only
    await provider.terminate(ref)
    with pytest.raises(SandboxNotRunningError):
        await provider.sdk.download_file(ref.sandbox_id, "/root/notes.txt", str(tmp_path / "y"))


async def test_sandboxes_do_not_share_files(local_prime: tuple[RunningStub, PrimeProvider]) -> None:
    _stub, provider = local_prime
    one = await provider.create(SandboxSpec(run_id="files", rollout_id="a", lifetime_s=600))
    two = await provider.create(SandboxSpec(run_id="files", rollout_id="b", lifetime_s=600))
    await provider.wait_ready(one, timeout=10)
    await provider.wait_ready(two, timeout=10)
    await provider.upload_file(one, "/data/mine.txt", b"one")
    with pytest.raises(FileNotFoundError):
        await provider.download_file(two, "/data/mine.txt")


async def test_paths_never_leave_the_sandbox_and_special_files_are_refused(
    local_prime: tuple[RunningStub, PrimeProvider], tmp_path: Path
) -> None:
    stub, provider = local_prime
    ref = await provider.create(SandboxSpec(run_id="files", rollout_id="h", lifetime_s=600))
    await provider.wait_ready(ref, timeout=10)
    root = stub.simulator.tree(ref.sandbox_id).root
    await provider.upload_file(ref, "/../../../tmp/escape.txt", b"kept inside")  # `..` stops at the sandbox's `/`
    assert (root / "tmp/escape.txt").read_bytes() == b"kept inside"
    (root / "tmp/link").symlink_to("/etc/hostname")  # an absolute target names the sandbox's own /etc
    assert await provider.download_file(ref, "/tmp/link") == b"sandbox\n"
    os.mkfifo(root / "tmp/pipe")
    with pytest.raises(APIError, match=r"400.*Not a regular file"):
        await provider.download_file(ref, "/tmp/pipe")  # would block the gateway if it were opened
    with pytest.raises(APIError, match="422"):
        await provider.sdk.download_file(ref.sandbox_id, "/tmp/a\x00b", str(tmp_path / "z"))
