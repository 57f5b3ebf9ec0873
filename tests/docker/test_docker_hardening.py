"""Docker sandboxes are hardened, checked from inside a real container: not root, a read-only root filesystem,
one writable scratch tmpfs whose size cap holds, no capabilities, no new privileges, a pids limit."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiodocker
import pytest

from providers import create_provider
from providers.base import SandboxSpec
from providers.vendors.docker.image import SANDBOX_UID, SCRATCH_DIR
from providers.vendors.docker.options import DEFAULT_SCRATCH_MB
from providers.vendors.docker.provider import DockerProvider
from tests.docker_support import new_run_id

pytestmark = pytest.mark.docker


@pytest.fixture
async def sandbox(docker_host: str) -> AsyncIterator[tuple[DockerProvider, object, dict]]:
    """One running sandbox of the default image, with the daemon's own view of its container."""
    run_id = new_run_id()
    provider = create_provider("docker", {"host": docker_host, "scratch_mb": "8"})
    assert isinstance(provider, DockerProvider)
    await provider.preflight()
    ref = await provider.create(SandboxSpec(run_id=run_id, rollout_id="hardened", memory_mb=128, pids_limit=64))
    try:
        await provider.wait_ready(ref, 60)
        docker = aiodocker.Docker(url=docker_host)
        try:
            info = await docker.containers.container(ref.sandbox_id).show()
        finally:
            await docker.close()
        yield provider, ref, info
    finally:
        await provider.cleanup(run_id)
        await provider.aclose()


async def run(provider: DockerProvider, ref: object, script: str) -> tuple[int, str]:
    result = await provider.exec(ref, ["sh", "-c", script], 30)  # type: ignore[arg-type]
    return result.exit_code, (result.stdout + result.stderr).strip()


async def test_the_sandbox_runs_as_an_unprivileged_user(sandbox) -> None:
    provider, ref, info = sandbox
    assert await run(provider, ref, "id -u") == (0, str(SANDBOX_UID))
    assert await run(provider, ref, "echo $HOME; pwd") == (0, f"{SCRATCH_DIR}\n{SCRATCH_DIR}")
    # No capability in any set, and no way to gain one (no-new-privileges).
    code, status = await run(provider, ref, "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status")
    fields = dict(line.split(":\t") for line in status.splitlines())
    assert code == 0 and fields["CapEff"] == fields["CapPrm"] == fields["CapBnd"] == "0000000000000000"
    assert fields["NoNewPrivs"] == "1"
    host = info["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"] and host["PidsLimit"] == 64


async def test_the_root_filesystem_is_read_only(sandbox) -> None:
    provider, ref, info = sandbox
    for target in ("/probe", "/etc/probe", "/bin/probe", "/root/probe", "/var/probe"):
        code, output = await run(provider, ref, f"echo x > {target}")
        assert code != 0 and ("Read-only file system" in output or "Permission denied" in output), (target, output)
    code, output = await run(provider, ref, "mkdir /probe-dir")
    assert code != 0
    assert info["HostConfig"]["ReadonlyRootfs"] is True


async def test_the_scratch_is_writable_up_to_its_cap_and_no_further(sandbox) -> None:
    provider, ref, info = sandbox
    assert await run(provider, ref, f"echo kept > {SCRATCH_DIR}/note && cat {SCRATCH_DIR}/note") == (0, "kept")
    code, output = await run(provider, ref, f"dd if=/dev/zero of={SCRATCH_DIR}/fill bs=1M count=6 2>&1")
    assert code == 0, output  # within the 8 MB cap
    code, output = await run(provider, ref, f"dd if=/dev/zero of={SCRATCH_DIR}/more bs=1M count=16 2>&1")
    assert code != 0 and "No space left on device" in output
    code, df = await run(provider, ref, f"df -k {SCRATCH_DIR} | tail -1")
    assert code == 0 and int(df.split()[1]) == 8 * 1024  # the tmpfs is the size asked for
    assert info["HostConfig"]["Tmpfs"] == {SCRATCH_DIR: "rw,nosuid,nodev,size=8m,mode=1777"}


def test_the_defaults_are_the_hardened_ones() -> None:
    provider = create_provider("docker", {})
    assert isinstance(provider, DockerProvider)
    config = provider.container_config(SandboxSpec(run_id="r", rollout_id="x"))
    host = config["HostConfig"]
    assert host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"] and host["Privileged"] is False
    assert host["Tmpfs"] == {SCRATCH_DIR: f"rw,nosuid,nodev,size={DEFAULT_SCRATCH_MB}m,mode=1777"}
    relaxed = create_provider("docker", {"read_only": "0", "cap_drop": "", "user": "0"})
    assert isinstance(relaxed, DockerProvider)
    config = relaxed.container_config(SandboxSpec(run_id="r", rollout_id="x"))
    assert config["HostConfig"]["ReadonlyRootfs"] is False and config["HostConfig"]["CapDrop"] == []
    assert config["User"] == "0"
