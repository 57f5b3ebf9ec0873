"""Files in and out of docker sandboxes and a commit snapshot, against a real daemon (fails, not skips, in CI)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import aiodocker
import pytest

from providers import create_provider
from providers.base import FailureKind, ProviderError, SandboxRef, SandboxSpec, UnsupportedFeature
from providers.vendors.docker.provider import DockerProvider
from tests.docker_support import new_run_id

pytestmark = pytest.mark.docker

BINARY = bytes(range(256)) * 3 + b"\x00\r\n\xff"


@pytest.fixture
def run_id() -> str:
    return new_run_id("files")


async def _provider(docker_host: str, **options: object) -> DockerProvider:
    prov = create_provider("docker", {"host": docker_host, **options})
    assert isinstance(prov, DockerProvider)
    await prov.preflight()
    return prov


@pytest.fixture
async def hardened(docker_host: str, run_id: str) -> AsyncIterator[DockerProvider]:
    prov = await _provider(docker_host)
    yield prov
    await prov.cleanup(run_id)
    await prov.aclose()


@pytest.fixture
async def writable(docker_host: str, run_id: str) -> AsyncIterator[DockerProvider]:
    prov = await _provider(docker_host, read_only=False)
    yield prov
    await prov.cleanup(run_id)
    await prov.aclose()


async def started(provider: DockerProvider, run_id: str, rollout: str, image: str | None = None) -> SandboxRef:
    ref = await provider.create(SandboxSpec(run_id=run_id, rollout_id=rollout, image=image))
    await provider.wait_ready(ref, 60)
    return ref


async def test_hardened_sandbox_round_trips_bytes_through_its_scratch(hardened: DockerProvider, run_id: str) -> None:
    ref = await started(hardened, run_id, "r1")
    big = os.urandom(1 << 20)
    await hardened.upload_file(ref, "/tmp/in/binary.bin", BINARY)
    await hardened.upload_file(ref, "/tmp/big.bin", big)
    assert await hardened.download_file(ref, "/tmp/in/binary.bin") == BINARY
    assert await hardened.download_file(ref, "/tmp/big.bin") == big
    # what a command sees is what was uploaded, and what a command writes comes back
    seen = await hardened.exec(ref, ["sh", "-c", "wc -c < /tmp/big.bin; echo made > /tmp/made.txt"], 30)
    assert seen.stdout.strip() == str(1 << 20)
    assert await hardened.download_file(ref, "/tmp/made.txt") == b"made\n"
    await hardened.upload_file(ref, "/tmp/big.bin", b"short")  # replaced, not appended
    assert await hardened.download_file(ref, "/tmp/big.bin") == b"short"


async def test_missing_files_and_read_only_paths_answer_clearly(hardened: DockerProvider, run_id: str) -> None:
    ref = await started(hardened, run_id, "r2")
    with pytest.raises(FileNotFoundError) as missing:
        await hardened.download_file(ref, "/tmp/nothing-here")
    assert isinstance(missing.value.__cause__, OSError)
    with pytest.raises(FileNotFoundError) as missing_root:
        await hardened.download_file(ref, "/etc/nothing-here")  # outside the scratch: the archive API's 404
    assert isinstance(missing_root.value.__cause__, aiodocker.DockerError)
    with pytest.raises(ProviderError) as refused:
        await hardened.upload_file(ref, "/etc/motd", b"x")  # the root filesystem is read-only
    assert refused.value.kind is FailureKind.INVALID_REQUEST and "Read-only" in str(refused.value)
    await hardened.upload_file(ref, "relative/in.txt", b"x")  # the working directory's: stampede's image's is /tmp
    assert await hardened.download_file(ref, "/tmp/relative/in.txt") == b"x"
    assert await hardened.download_file(ref, "relative/in.txt") == b"x"
    with pytest.raises(UnsupportedFeature, match="snapshot"):
        await hardened.snapshot(ref)


async def test_sandboxes_do_not_share_files(hardened: DockerProvider, run_id: str) -> None:
    one, two = await started(hardened, run_id, "a"), await started(hardened, run_id, "b")
    await hardened.upload_file(one, "/tmp/mine.txt", b"one")
    with pytest.raises(FileNotFoundError):
        await hardened.download_file(two, "/tmp/mine.txt")


async def test_commit_snapshot_then_create_from_it_sees_the_files(
    writable: DockerProvider, run_id: str, docker_host: str
) -> None:
    ref = await started(writable, run_id, "origin")
    await writable.upload_file(ref, "/home/data/state.bin", BINARY)  # archive API: root's file, as docker cp
    image = await writable.snapshot(ref)
    docker = aiodocker.Docker(url=docker_host)
    try:
        assert (await docker.images.inspect(image))["Config"]["Labels"]["stampede-run"] == run_id
        await writable.upload_file(ref, "/home/data/state.bin", b"changed after the snapshot")
        copy = await started(writable, run_id, "copy", image=image)
        assert await writable.download_file(copy, "/home/data/state.bin") == BINARY
        assert await writable.download_file(ref, "/home/data/state.bin") == b"changed after the snapshot"
        await writable.terminate(copy)
        await writable.terminate(ref)
    finally:
        await docker.images.delete(image, force=True)
        await docker.close()
