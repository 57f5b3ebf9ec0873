"""The offline busybox image (built in memory, `docker import`ed) and scripts/ensure-docker's idempotence."""

from __future__ import annotations

import io
import os
import tarfile
import uuid

import aiodocker
import pytest

from providers import create_provider
from providers.base import SandboxSpec
from providers.vendors.docker.image import DEFAULT_IMAGE, build_rootfs_tar, busybox_path, ensure_image_result, main
from tests.docker_support import lifecycle, new_run_id, run_ensure_docker, unavailable

pytestmark = pytest.mark.docker


def test_rootfs_tar_has_busybox_applets_and_etc() -> None:
    if not os.path.exists(busybox_path()):
        unavailable("busybox-static is not installed (scripts/ensure-docker installs it)")
    with tarfile.open(fileobj=io.BytesIO(build_rootfs_tar())) as tar:
        members = {member.name: member for member in tar.getmembers()}
    assert members["bin/busybox"].isfile() and members["bin/busybox"].mode == 0o755
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "/bin/busybox"
    assert members["usr/bin/env"].issym() and members["bin/sleep"].issym()
    assert members["tmp"].isdir() and members["tmp"].mode == 0o1777
    assert members["etc/passwd"].isfile()
    assert build_rootfs_tar() == build_rootfs_tar()  # deterministic bytes


async def test_ensure_image_builds_once_and_runs(docker_host: str) -> None:
    tag = f"stampede/busybox:test-{uuid.uuid4().hex[:8]}"
    docker = aiodocker.Docker(url=docker_host)
    try:
        first = await ensure_image_result(docker, tag)
        again = await ensure_image_result(docker, tag)
        assert first.built and not again.built and first.image_id == again.image_id
        assert first.image_id.startswith("sha256:")
        provider = create_provider("docker", {"host": docker_host, "image": tag})
        run_id = new_run_id("img")
        record = await lifecycle(provider, SandboxSpec(run_id=run_id, rollout_id="i"), [["cat", "/etc/os-release"]])
        await provider.cleanup(run_id)
        await provider.aclose()
        assert record.ok, record
        assert "stampede busybox" in record.outputs[0]
    finally:
        await docker.images.delete(tag, force=True)
        await docker.close()


def test_image_command_prints_tag_and_id(docker_host: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--host", docker_host]) == 0
    out = capsys.readouterr().out.strip()
    assert DEFAULT_IMAGE in out and "sha256:" in out and len(out.splitlines()) == 1


def test_image_command_without_daemon_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--host", "unix:///tmp/stampede-no-such-docker.sock"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("stampede docker image: docker daemon unreachable") and len(err.splitlines()) == 1


def test_image_command_without_busybox_is_one_line(
    docker_host: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAMPEDE_BUSYBOX", "/nonexistent/busybox")
    assert main(["--host", docker_host, "--tag", "stampede/busybox:never", "--rebuild"]) == 2
    err = capsys.readouterr().err.strip()
    assert "busybox-static" in err and len(err.splitlines()) == 1


def test_ensure_docker_is_a_noop_when_a_daemon_answers(docker_host: str) -> None:
    result = run_ensure_docker()
    assert result.returncode == 0, result.stderr
    assert "already answers" in result.stdout and "nothing to do" in result.stdout
    assert len(result.stdout.strip().splitlines()) == 1
    nothing = run_ensure_docker("--stop", "--socket", "/tmp/stampede-never-started/docker.sock")
    assert nothing.returncode == 0 and "nothing to stop" in nothing.stdout
    bad = run_ensure_docker("--bogus")
    assert bad.returncode == 2 and "unknown argument" in bad.stderr
