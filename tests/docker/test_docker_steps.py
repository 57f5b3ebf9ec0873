"""The rollout steps beyond create and exec on a real daemon: sized images pulled cold from the offline registry,
file trees in one tar, streamed and background commands, commit snapshots and forks; nothing left behind.

Images here are small (20-30 MB): a cold start costs a `docker load` of the whole archive, and on a vfs daemon
every container copies its image's layers. `bench/bench_docker_steps.py` measures the 200 MB case.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import aiodocker
import pytest
from aiodocker.exceptions import DockerError

from providers import create_provider
from providers.base import (
    Capability,
    FailureKind,
    Phase,
    ProviderConfigError,
    ProviderError,
    SandboxRef,
    SandboxSpec,
)
from providers.vendors.docker.image import busybox_path, ensure_sized_archive
from providers.vendors.docker.image import main as image_main
from providers.vendors.docker.provider import DockerProvider
from providers.vendors.docker.registry import SizedImage, archive_path
from tests.docker_support import new_run_id, unavailable

pytestmark = pytest.mark.docker


@pytest.fixture
def run_id() -> str:
    return new_run_id("steps")


@pytest.fixture
async def daemon(docker_host: str) -> AsyncIterator[aiodocker.Docker]:
    docker = aiodocker.Docker(url=docker_host)
    yield docker
    await docker.close()


async def _provider(docker_host: str, **options: object) -> DockerProvider:
    prov = create_provider("docker", {"host": docker_host, **options})
    assert isinstance(prov, DockerProvider)
    await prov.preflight()
    return prov


@pytest.fixture
async def hardened(docker_host: str, run_id: str, tmp_path: Path) -> AsyncIterator[DockerProvider]:
    prov = await _provider(docker_host, image_registry=str(tmp_path))
    yield prov
    await prov.cleanup(run_id)
    assert await prov.list_owned(run_id) == []
    await prov.aclose()


@pytest.fixture
async def writable(docker_host: str, run_id: str, tmp_path: Path) -> AsyncIterator[DockerProvider]:
    prov = await _provider(docker_host, read_only=False, image_registry=str(tmp_path))
    yield prov
    await prov.cleanup(run_id)
    assert await prov.list_owned(run_id) == []
    await prov.aclose()


async def _present(docker: aiodocker.Docker, tag: str) -> bool:
    try:
        await docker.images.inspect(tag)
    except DockerError as exc:
        assert exc.status == 404
        return False
    return True


async def _remove(docker: aiodocker.Docker, *tags: str) -> None:
    for tag in tags:
        try:
            await docker.images.delete(tag, force=True)
        except DockerError as exc:
            assert exc.status == 404


async def started(provider: DockerProvider, run_id: str, rollout: str, **spec: object) -> SandboxRef:
    ref = await provider.create(SandboxSpec(run_id=run_id, rollout_id=rollout, **spec))  # type: ignore[arg-type]
    await provider.wait_ready(ref, 120)
    return ref


async def test_a_declared_size_runs_from_a_sized_image_pulled_once_cold(
    hardened: DockerProvider, run_id: str, daemon: aiodocker.Docker
) -> None:
    spec = SandboxSpec(run_id=run_id, rollout_id="cold", image=f"task-{run_id}", image_size_mb=20)
    tag = hardened.image_for(spec)
    assert tag == SizedImage.of(20, f"task-{run_id}").tag and not await _present(daemon, tag)
    try:
        # cold: three sandboxes wait on one pull, each told how long it waited
        refs = await asyncio.gather(*(hardened.create(replace(spec, rollout_id=f"c{i}")) for i in range(3)))
        assert all(ref.meta.get("pull") for ref in refs)
        seen = await asyncio.gather(*(hardened.wait_ready(ref, 120) for ref in refs))
        assert all(obs is not None and obs.pull_s is not None and obs.pull_s > 0 for obs in seen)
        size = await hardened.exec(refs[0], ["sh", "-c", "cat /opt/stampede-image/*.bin | wc -c"], 60)
        assert int(size.stdout) == 20 * 1024 * 1024
        # warm: the image is there, nothing is pulled
        warm = await hardened.create(replace(spec, rollout_id="warm"))
        assert "pull" not in warm.meta and await hardened.wait_ready(warm, 60) is None
        assert len(await hardened.list_owned(run_id)) == 4
        # removed behind the adapter's back: the next sandbox pulls it again rather than failing
        await _remove(daemon, tag)
        again = await hardened.create(replace(spec, rollout_id="again"))
        seen_again = await hardened.wait_ready(again, 120)
        assert again.meta.get("pull") and seen_again is not None and seen_again.pull_s is not None
    finally:
        await hardened.cleanup(run_id)
        await _remove(daemon, tag)


async def test_sized_images_share_their_base_layer(
    docker_host: str, run_id: str, daemon: aiodocker.Docker, tmp_path: Path
) -> None:
    prov = await _provider(docker_host, shared_base_mb=10, image_registry=str(tmp_path))
    one = SandboxSpec(run_id=run_id, rollout_id="one", image=f"a-{run_id}", image_size_mb=25)
    two = SandboxSpec(run_id=run_id, rollout_id="two", image=f"b-{run_id}", image_size_mb=30)
    tags = (prov.image_for(one), prov.image_for(two))
    try:
        for spec in (one, two):
            await started(prov, run_id, spec.rollout_id, image=spec.image, image_size_mb=spec.image_size_mb)
        layers = [(await daemon.images.inspect(tag))["RootFS"]["Layers"] for tag in tags]
        assert len(layers[0]) == len(layers[1]) == 3  # busybox, the shared 10 MB, each one's own
        assert layers[0][:2] == layers[1][:2] and layers[0][2] != layers[1][2]
    finally:
        await prov.cleanup(run_id)
        await _remove(daemon, *tags)
        await prov.aclose()


async def test_a_broken_archive_fails_the_pull_and_leaves_nothing(
    hardened: DockerProvider, run_id: str, tmp_path: Path
) -> None:
    spec = SandboxSpec(run_id=run_id, rollout_id="bad", image=f"bad-{run_id}", image_size_mb=5)
    archive_path(tmp_path, hardened.image_for(spec)).write_bytes(b"not a docker save archive" * 100)
    ref = await hardened.create(spec)
    with pytest.raises(ProviderError) as failed:
        await hardened.wait_ready(ref, 60)
    assert failed.value.kind is FailureKind.IMAGE and failed.value.phase is Phase.PULL
    assert hardened.classify(failed.value, Phase.READY) is FailureKind.IMAGE
    await hardened.terminate(ref)  # idempotent on a container that never was
    assert await hardened.list_owned(run_id) == []


async def test_terminated_while_pulling_creates_nothing(hardened: DockerProvider, run_id: str) -> None:
    spec = SandboxSpec(run_id=run_id, rollout_id="gone", image=f"gone-{run_id}", image_size_mb=5)
    ref = await hardened.create(spec)
    await hardened.terminate(ref)
    with pytest.raises(ProviderError) as failed:
        await hardened.wait_ready(ref, 60)
    assert failed.value.kind is FailureKind.DIED_BEFORE_READY
    assert await hardened.list_owned(run_id) == []
    docker = hardened._client()
    await _remove(docker, hardened.image_for(spec))


def test_the_image_a_spec_runs_from_follows_the_options() -> None:
    sized = DockerProvider.from_options({"shared_base_mb": 50})
    plain = DockerProvider.from_options({"sized_images": False})
    spec = SandboxSpec(run_id="r", rollout_id="x", image="python:3.11", image_size_mb=199.5)
    assert sized.image_for(spec) == "stampede-size:200-s50-python.3.11"
    assert plain.image_for(spec) == "python:3.11"  # the named image itself, pulled or present
    assert plain.image_for(replace(spec, image="stampede-size:30")) == "stampede-size:30"
    assert sized.image_for(replace(spec, image_size_mb=None)) == "python:3.11"
    scaled = DockerProvider.from_options({"image_scale": 0.05})
    assert scaled.image_for(replace(spec, image_size_mb=4096)) == "stampede-size:205-python.3.11"
    with pytest.raises(ProviderConfigError, match="shared_base_mb"):
        DockerProvider.from_options({"shared_base_mb": -1})
    with pytest.raises(ProviderConfigError, match="image_scale"):
        DockerProvider.from_options({"image_scale": 2})


def test_sized_archives_are_the_same_bytes_every_time(tmp_path: Path) -> None:
    if not os.path.exists(busybox_path()):
        unavailable("busybox-static is not installed (scripts/ensure-docker installs it)")
    image = SizedImage.of(3, "same", 1)
    first, built = ensure_sized_archive(image, tmp_path / "a")
    second, _ = ensure_sized_archive(image, tmp_path / "b")
    assert built and first.read_bytes() == second.read_bytes()
    assert ensure_sized_archive(image, tmp_path / "a") == (first, False)  # present: not written again
    assert SizedImage.parse(image.tag) == image and SizedImage.parse("stampede/busybox:2") is None


async def test_a_file_tree_goes_in_whole(writable: DockerProvider, hardened: DockerProvider, run_id: str) -> None:
    tree = {f"/tmp/repo/pkg{i % 10}/mod{i}.py": f"value = {i}\n".encode() for i in range(1000)}
    ref = await started(hardened, run_id, "tree")
    await hardened.upload_files(ref, tree)
    listing = await hardened.exec(ref, ["sh", "-c", "find /tmp/repo -type f | wc -l; cat /tmp/repo/pkg7/mod997.py"], 60)
    assert listing.stdout.split("\n", 1) == ["1000", "value = 997\n"]
    assert await hardened.download_file(ref, "/tmp/repo/pkg3/mod3.py") == b"value = 3\n"
    await hardened.upload_files(ref, {"rel/a.txt": b"r"})  # relative: the working directory's (/tmp here)
    assert await hardened.download_file(ref, "/tmp/rel/a.txt") == b"r"
    with pytest.raises(ProviderError) as refused:  # the read-only root refuses the whole tree, clearly
        await hardened.upload_files(ref, {"/etc/x/y": b"1", "/tmp/ok": b"2"})
    assert refused.value.kind is FailureKind.INVALID_REQUEST
    # a writable root: archive-API paths and scratch paths in one call
    other = await started(writable, run_id, "mixed")
    await writable.upload_files(other, {"/work/src/a.py": b"a", "/work/src/b/c.py": b"c", "/tmp/t.txt": b"t"})
    for path, data in (("/work/src/b/c.py", b"c"), ("/tmp/t.txt", b"t"), ("/work/src/a.py", b"a")):
        assert await writable.download_file(other, path) == data


async def test_streamed_output_arrives_while_the_command_runs(hardened: DockerProvider, run_id: str) -> None:
    ref = await started(hardened, run_id, "stream")
    chunks: list[str] = []
    released: list[asyncio.Task[None]] = []

    def on_output(text: str) -> None:
        chunks.append(text)
        if not released:  # the command prints its second line only once its first one was read here
            released.append(asyncio.ensure_future(hardened.upload_file(ref, "/tmp/go", b"")))

    # é's two bytes written apart, with a stderr frame between them: decoded as one character, per stream
    script = (
        "echo first; while [ ! -f /tmp/go ]; do sleep 0.05; done; "
        "printf '\\303'; sleep 0.2; echo second >&2; sleep 0.2; printf '\\251'"
    )
    streamed = await hardened.exec_stream(ref, ["sh", "-c", script], 60, on_output)
    await released[0]
    assert streamed.result.exit_code == 0
    assert streamed.result.stdout == "first\né" and streamed.result.stderr == "second\n"
    joined = "".join(chunks)  # stdout and stderr are two pipes: their order after `first` is not kept
    assert joined.startswith("first\n") and joined[len("first\n") :] in ("second\né", "ésecond\n")
    assert streamed.first_byte_s is not None and streamed.last_byte_s is not None
    assert 0 < streamed.first_byte_s <= streamed.last_byte_s
    silent = await hardened.exec_stream(ref, ["true"], 30)
    assert silent.first_byte_s is None and silent.result.exit_code == 0


async def test_a_background_process_is_polled_to_its_exit(hardened: DockerProvider, run_id: str) -> None:
    ref = await started(hardened, run_id, "bg")
    handle = await hardened.start_process(ref, ["sh", "-c", "while [ ! -f /tmp/stop ]; do sleep 0.05; done; exit 7"])
    assert await hardened.process_exit(ref, handle) is None
    assert (await hardened.exec(ref, ["echo", "meanwhile"], 30)).stdout == "meanwhile\n"
    await hardened.upload_file(ref, "/tmp/stop", b"")
    for _ in range(400):
        code = await hardened.process_exit(ref, handle)
        if code is not None:
            break
        await asyncio.sleep(0.05)
    assert code == 7
    still = await hardened.start_process(ref, ["sleep", "600"])
    await hardened._client().containers.container(ref.sandbox_id).kill()
    with pytest.raises(ProviderError) as died:
        for _ in range(100):
            await hardened.process_exit(ref, still)
            await asyncio.sleep(0.05)
    assert died.value.kind is FailureKind.DIED_DURING_EXEC


async def test_capabilities_follow_the_options(hardened: DockerProvider, writable: DockerProvider) -> None:
    steps = {Capability.UPLOAD, Capability.DOWNLOAD, Capability.EXEC_STREAM, Capability.BACKGROUND}
    assert hardened.capabilities() == frozenset(steps)
    assert writable.capabilities() == frozenset(steps | {Capability.SNAPSHOT, Capability.FORK})


async def test_fork_starts_copies_of_a_snapshot_and_cleanup_takes_the_image(
    writable: DockerProvider, run_id: str, daemon: aiodocker.Docker
) -> None:
    origin = await started(writable, run_id, "origin")
    await writable.upload_files(origin, {"/work/state.json": json.dumps({"step": 3}).encode()})
    image = await writable.snapshot(origin)
    # the group's spec keeps the plan's image size (the engine's forks do): the copies still start from the snapshot
    forks = await writable.fork(image, SandboxSpec(run_id=run_id, rollout_id="g", image_size_mb=5), 3)
    assert sorted(ref.rollout_id for ref in forks) == ["g-0", "g-1", "g-2"]
    await asyncio.gather(*(writable.wait_ready(ref, 60) for ref in forks))
    for ref in forks:
        assert json.loads(await writable.download_file(ref, "/work/state.json")) == {"step": 3}
    await writable.upload_file(forks[0], "/work/state.json", b"{}")  # copies do not share their files
    assert json.loads(await writable.download_file(forks[1], "/work/state.json")) == {"step": 3}
    assert {ref.rollout_id for ref in await writable.list_owned(run_id)} == {"origin", "g-0", "g-1", "g-2"}
    assert await writable.cleanup(run_id) == 4
    assert not await _present(daemon, image)


async def test_a_fork_from_a_missing_snapshot_fails_and_leaks_nothing(writable: DockerProvider, run_id: str) -> None:
    with pytest.raises(ProviderError) as failed:
        await writable.fork("stampede-snapshot:never-made", SandboxSpec(run_id=run_id, rollout_id="g"), 3)
    assert failed.value.kind is FailureKind.IMAGE
    assert await writable.list_owned(run_id) == []


def test_the_image_command_writes_an_archive_and_refuses_bad_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not os.path.exists(busybox_path()):
        unavailable("busybox-static is not installed (scripts/ensure-docker installs it)")
    assert image_main(["--size-mb", "2", "--name", "Repo A", "--registry", str(tmp_path)]) == 0
    assert archive_path(tmp_path, "stampede-size:2-repo.a").exists()
    assert "stampede-size:2-repo.a" in capsys.readouterr().out
    assert image_main(["--size-mb", "5", "--shared-mb", "9", "--registry", str(tmp_path)]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "shared (9 MB) <= size (5 MB)" in said[0]


async def test_a_registry_image_is_pulled_in_readiness_and_its_failure_is_the_pulls(
    docker_host: str, run_id: str
) -> None:
    prov = await _provider(docker_host, pull=True)
    try:
        ref = await prov.create(SandboxSpec(run_id=run_id, rollout_id="p", image="127.0.0.1:9/nothing/here:1"))
        assert ref.meta.get("pull")  # acknowledged; the pull is readiness's, as a vendor's boot is
        with pytest.raises(ProviderError) as failed:  # a loopback port nothing listens on: refused at once
            await prov.wait_ready(ref, 60)
        assert failed.value.phase is Phase.PULL and failed.value.kind is FailureKind.IMAGE
        assert await prov.list_owned(run_id) == []
    finally:
        await prov.cleanup(run_id)
        await prov.aclose()
