"""The docker provider against a real daemon: lifecycle, isolation, classification, concurrency, cleanup."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator

import aiodocker
import pytest

from providers import create_provider
from providers.base import RUN_LABEL, FailureKind, ProviderConfigError, ProviderError, SandboxSpec
from providers.vendors.docker.provider import DockerProvider
from tests.docker_support import lifecycle, new_run_id

pytestmark = pytest.mark.docker


@pytest.fixture
def run_id() -> str:
    return new_run_id()


@pytest.fixture
async def provider(docker_host: str, run_id: str) -> AsyncIterator[DockerProvider]:
    prov = create_provider("docker", {"host": docker_host})
    assert isinstance(prov, DockerProvider)
    await prov.preflight()
    yield prov
    await prov.cleanup(run_id)
    await prov.aclose()


async def labelled(docker_host: str, run_id: str) -> list[str]:
    """Container ids carrying the run label, straight from the daemon (not through the provider)."""
    docker = aiodocker.Docker(url=docker_host)
    try:
        found = await docker.containers.list(all=True, filters={"label": [f"{RUN_LABEL}={run_id}"]})
        return [container.id for container in found]
    finally:
        await docker.close()


def spec(run_id: str, rollout: str, **kwargs: object) -> SandboxSpec:
    return SandboxSpec(run_id=run_id, rollout_id=rollout, **kwargs)  # type: ignore[arg-type]


async def test_full_lifecycle_stdout_stderr_exit_code(provider: DockerProvider, run_id: str) -> None:
    ref = await provider.create(spec(run_id, "r1"))
    assert ref.provider == "docker" and ref.run_id == run_id and ref.rollout_id == "r1"
    await provider.wait_ready(ref, 30)
    ok = await provider.exec(ref, ["echo", "hello sandbox"], 10)
    assert (ok.exit_code, ok.stdout, ok.stderr) == (0, "hello sandbox\n", "")
    mixed = await provider.exec(ref, ["sh", "-c", "echo to-out; echo to-err >&2; exit 7"], 10)
    assert (mixed.exit_code, mixed.stdout, mixed.stderr) == (7, "to-out\n", "to-err\n")
    big = await provider.exec(ref, ["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"], 10)
    assert big.stdout == "x" * 300_000  # many multiplexed frames come back whole
    await provider.terminate(ref)
    await provider.terminate(ref)  # idempotent: gone is success
    assert await provider.list_owned(run_id) == []


async def test_concurrent_terminates_return_once_it_is_gone(
    provider: DockerProvider, docker_host: str, run_id: str
) -> None:
    refs = await asyncio.gather(*(provider.create(spec(run_id, f"t{i}")) for i in range(5)))
    await asyncio.gather(*(provider.wait_ready(ref, 60) for ref in refs))
    # a cancelled rollout's own terminate racing the engine's sweep: every call returns only once it is gone
    await asyncio.gather(*(provider.terminate(ref) for ref in refs for _ in range(3)))
    assert await labelled(docker_host, run_id) == []


async def test_isolation_and_limits(provider: DockerProvider, docker_host: str, run_id: str) -> None:
    ref = await provider.create(spec(run_id, "iso", cpu=0.5, memory_mb=64, pids_limit=50, env={"A": "b"}))
    await provider.wait_ready(ref, 30)
    docker = aiodocker.Docker(url=docker_host)
    try:
        info = await docker.containers.container(ref.sandbox_id).show()
    finally:
        await docker.close()
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none" and host["Privileged"] is False
    assert not host.get("Binds") and not info.get("Mounts") and not host.get("CapAdd")
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert host["NanoCpus"] == 500_000_000 and host["PidsLimit"] == 50
    assert host["Memory"] == host["MemorySwap"] == 64 * 1024 * 1024
    assert info["Config"]["Labels"][RUN_LABEL] == run_id
    interfaces = await provider.exec(ref, ["ls", "/sys/class/net"], 10)
    assert interfaces.stdout.split() == ["lo"]
    env = await provider.exec(ref, ["sh", "-c", "echo $A"], 10)
    assert env.stdout == "b\n"
    forks = await provider.exec(ref, ["sh", "-c", "for i in $(seq 80); do sleep 5 & done; wait"], 20)
    assert forks.exit_code != 0 or "fork" in forks.stderr.lower()  # the pids limit holds
    await provider.terminate(ref)


async def test_exec_timeout_is_classified_and_killed(provider: DockerProvider, run_id: str) -> None:
    ref = await provider.create(spec(run_id, "slow"))
    await provider.wait_ready(ref, 30)
    with pytest.raises(ProviderError) as caught:
        await provider.exec(ref, ["sh", "-c", "sleep 77; echo never"], 0.5)
    assert caught.value.kind is FailureKind.EXEC_TIMEOUT
    assert provider.classify(caught.value) is FailureKind.EXEC_TIMEOUT
    for _ in range(50):  # the timed-out command does not keep running in the sandbox
        listing = await provider.exec(ref, ["ps", "-o", "args"], 10)
        if "sleep 77" not in listing.stdout:
            break
        await asyncio.sleep(0.1)
    assert "sleep 77" not in listing.stdout
    await provider.terminate(ref)


async def test_oom_in_exec_is_classified(provider: DockerProvider, run_id: str) -> None:
    ref = await provider.create(spec(run_id, "oom", memory_mb=32))
    await provider.wait_ready(ref, 30)
    with pytest.raises(ProviderError) as caught:
        await provider.exec(ref, ["sh", "-c", "head -c 200m /dev/zero | tail"], 30)
    assert caught.value.kind is FailureKind.OOM
    try:  # the sandbox usually survives its command's OOM; the kernel may also kill PID 1 on the way
        after = await provider.exec(ref, ["echo", "alive"], 10)
    except ProviderError as exc:
        assert exc.kind is FailureKind.OOM  # the container went with it: still an OOM, not a mystery
    else:
        assert after.stdout == "alive\n"
        killed = await provider.exec(ref, ["sh", "-c", "kill -9 $$"], 10)
        assert killed.exit_code == 137  # a plain SIGKILL is a result, not an old OOM blamed again
    await provider.terminate(ref)


async def test_oom_of_the_container_is_classified(docker_host: str, run_id: str) -> None:
    hog = ["sh", "-c", "sleep 0.5; head -c 200m /dev/zero | tail"]  # the container's own process OOMs
    prov = create_provider("docker", {"host": docker_host, "command": hog})
    record = await lifecycle(prov, spec(run_id, "oom-main", memory_mb=32), [["sleep", "20"]], ready_timeout=30)
    await prov.cleanup(run_id)
    await prov.aclose()
    assert (record.ok, record.kind, record.escaped) == (False, "oom", "")


async def test_container_that_exits_at_once_died_before_ready(docker_host: str, run_id: str) -> None:
    prov = create_provider("docker", {"host": docker_host, "command": ["false"]})
    # Whether the daemon still shows it running at wait_ready, refuses the exec, or kills the first command
    # as it goes, no command ever completed in it: it was never usable. (The command outlives any plausible delay
    # before `false` exits: a `sleep 1` once completed on a machine at load 20, its container not yet gone.)
    records = await asyncio.gather(*(lifecycle(prov, spec(run_id, f"d{i}"), [["sleep", "30"]]) for i in range(3)))
    await prov.cleanup(run_id)
    await prov.aclose()
    assert [(r.ok, r.kind, r.escaped) for r in records] == [(False, "died_before_ready", "")] * 3


async def test_ready_timeout_and_create_conflict_and_image(provider: DockerProvider, run_id: str) -> None:
    ref = await provider.create(spec(run_id, "dup"))
    with pytest.raises(ProviderError) as conflict:  # same run + rollout: the container name is taken
        await provider.create(spec(run_id, "dup"))
    assert conflict.value.kind is FailureKind.CREATE_ERROR
    with pytest.raises(ProviderError) as late:
        await provider.wait_ready(ref, 0.000_001)
    assert late.value.kind is FailureKind.READY_TIMEOUT
    with pytest.raises(ProviderError) as image:
        await provider.create(spec(run_id, "img", image="stampede-test/absent:0"))
    assert image.value.kind is FailureKind.IMAGE
    with pytest.raises(ProviderError) as empty:
        await provider.exec(ref, [], 5)
    assert empty.value.kind is FailureKind.INVALID_REQUEST


async def test_died_during_exec_and_after_terminate(provider: DockerProvider, run_id: str) -> None:
    ref = await provider.create(spec(run_id, "gone"))
    await provider.wait_ready(ref, 30)
    await provider.exec(ref, ["true"], 10)
    running = asyncio.create_task(provider.exec(ref, ["sleep", "30"], 60))
    await asyncio.sleep(0.5)
    await provider.terminate(ref)
    with pytest.raises(ProviderError) as during:
        await running
    assert during.value.kind is FailureKind.DIED_DURING_EXEC
    with pytest.raises(ProviderError) as after:
        await provider.exec(ref, ["true"], 10)
    assert after.value.kind is FailureKind.DIED_DURING_EXEC


async def test_unreachable_daemon_is_transport(run_id: str) -> None:
    prov = create_provider("docker", {"host": "unix:///tmp/stampede-no-such-docker.sock"})
    with pytest.raises(ProviderError) as pre:
        await prov.preflight()
    assert pre.value.kind is FailureKind.TRANSPORT and "unreachable at unix:///tmp/stampede-no-such" in str(pre.value)
    record = await lifecycle(prov, spec(run_id, "t"))
    assert (record.kind, record.phase, record.escaped) == ("transport", "create", "")
    await prov.aclose()


def test_bad_options_are_one_clear_line() -> None:
    with pytest.raises(ProviderConfigError, match="unknown option"):
        create_provider("docker", {"imagee": "x"})
    with pytest.raises(ProviderConfigError, match="max_connections"):
        create_provider("docker", {"max_connections": "lots"})
    with pytest.raises(ProviderConfigError, match="unsupported docker host"):
        create_provider("docker", {"host": "ssh://somewhere"})
    prov = create_provider("docker", {"max_connections": "5000", "init": "false", "cap_drop": "ALL"})
    assert isinstance(prov, DockerProvider)
    assert (prov.options.max_connections, prov.options.init, prov.options.cap_drop) == (5000, False, ("ALL",))


async def test_connection_pool_is_sized_for_thousands(provider: DockerProvider) -> None:
    connector = provider._connector
    assert connector is not None and connector.limit >= 4096


async def test_fifty_concurrent_lifecycles(provider: DockerProvider, docker_host: str, run_id: str) -> None:
    records = await asyncio.gather(
        *(lifecycle(provider, spec(run_id, f"c{i}"), ready_timeout=120, exec_timeout=60) for i in range(50))
    )
    failures = collections.Counter((r.kind, r.phase, r.error) for r in records if not r.ok)
    assert not failures, failures
    assert all(r.outputs == ["", "hi\n"] for r in records)
    assert await labelled(docker_host, run_id) == []


async def test_list_owned_and_cleanup_leave_nothing(provider: DockerProvider, docker_host: str, run_id: str) -> None:
    refs = await asyncio.gather(*(provider.create(spec(run_id, f"l{i}")) for i in range(6)))
    await asyncio.gather(*(provider.wait_ready(ref, 60) for ref in refs[:3]))  # some running, some created
    other = new_run_id("other")
    stranger = await provider.create(spec(other, "x"))
    owned = await provider.list_owned(run_id)
    assert sorted(ref.sandbox_id for ref in owned) == sorted(ref.sandbox_id for ref in refs)
    assert {ref.rollout_id for ref in owned} == {f"l{i}" for i in range(6)}
    assert await provider.cleanup(run_id) == 6
    assert await labelled(docker_host, run_id) == []
    assert await labelled(docker_host, other) == [stranger.sandbox_id]  # other runs are left alone
    await provider.cleanup(other)


async def test_versions_name_client_and_daemon(provider: DockerProvider) -> None:
    versions = provider.versions()
    assert versions["aiodocker"] == aiodocker.__version__
    assert versions["docker-daemon"] and versions["docker-api"]
