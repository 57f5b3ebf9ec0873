"""The `modal` provider through the real `modal` SDK against the local Modal control plane, both backends.

Real grpclib servers on 127.0.0.1 (control plane and command router) over the vendor simulator; the SDK
talks to them exactly as it talks to Modal (no mocks anywhere).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from typing import Any

import pytest

from providers.base import SandboxSpec
from providers.sim.modal.server import RunningModal
from tests.support.local_modal import TOKEN, local_modal

V1_ID = re.compile(r"^sb-[0-9A-Za-z]{22}$")


def truth_by_id(server: RunningModal) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in server.truth()}


@pytest.mark.parametrize("backend", ["v2", "v1"])
async def test_lifecycle_exec_terminate_list_and_cleanup(backend: str) -> None:
    async with local_modal(sandbox_v2="1" if backend == "v2" else "0") as (server, provider):
        assert provider.versions() == {"modal": "1.6.4", "modal_backend": backend}
        ref = await provider.create(SandboxSpec(run_id="run-a", rollout_id="r1"))
        assert bool(V1_ID.match(ref.sandbox_id)) == (backend == "v1")
        await provider.wait_ready(ref, 30)

        both = await provider.exec(ref, ["sh", "-c", "echo out; echo err >&2; exit 3"], 30)
        assert (both.exit_code, both.stdout, both.stderr) == (3, "out\n", "err\n")
        quoted = await provider.exec(ref, ["echo", "a  b", "c;d", "$HOME"], 30)
        assert (quoted.exit_code, quoted.stdout, quoted.stderr) == (0, "a  b c;d $HOME\n", "")
        assert (await provider.exec(ref, ["false"], 30)).exit_code == 1
        missing = await provider.exec(ref, ["no-such-tool", "x"], 30)
        assert missing.exit_code == 127 and "not found" in missing.stderr and missing.stdout == ""
        assert (await provider.exec(ref, ["pwd"], 30)).stdout == "/\n"
        big = await provider.exec(ref, ["sh", "-c", "printf '%090000d' 0; printf '%090000d' 1"], 30)
        assert len(big.stdout) == 180_000 and big.stdout.endswith("01")  # several stdio chunks, read to the end

        other = await provider.create(SandboxSpec(run_id="run-b", rollout_id="r2"))
        assert [r.sandbox_id for r in await provider.list_owned("run-a")] == [ref.sandbox_id]
        await provider.terminate(ref)
        await provider.terminate(ref)  # idempotent, also on a detached handle
        assert await provider.list_owned("run-a") == []
        truth = truth_by_id(server)
        assert truth[ref.sandbox_id]["status"] == "TERMINATED"
        assert truth[ref.sandbox_id]["backend"] == backend
        assert "stampede-run=run-a" in truth[ref.sandbox_id]["labels"]
        assert "stampede-rollout=r1" in truth[ref.sandbox_id]["labels"]

        refs = await asyncio.gather(
            *(provider.create(SandboxSpec(run_id="run-c", rollout_id=f"c{i}")) for i in range(3))
        )
        assert await provider.cleanup("run-c") == 3
        assert await provider.list_owned("run-c") == []
        truth = truth_by_id(server)
        assert {truth[r.sandbox_id]["status"] for r in refs} == {"TERMINATED"}
        assert truth[other.sandbox_id]["status"] == "RUNNING"  # another run's sandbox is left alone
        assert await provider.cleanup("run-b") == 1


async def test_spec_reaches_the_vendor_cpu_memory_lifetime_and_tags() -> None:
    async with local_modal() as (server, provider):
        spec = SandboxSpec(
            run_id="run-s", rollout_id="r9", cpu=2.0, memory_mb=4096, lifetime_s=1234, labels={"team": "rl"}
        )
        ref = await provider.create(spec)
        await provider.wait_ready(ref, 30)
        record = server.registry.by_id[ref.sandbox_id]
        assert (record.sim.cpu, record.sim.memory_mb, record.sim.lifetime_s) == (2.0, 4096, 1234.0)
        assert record.tags == {"team": "rl", "stampede-run": "run-s", "stampede-rollout": "r9"}
        assert record.has_readiness_probe
        # the sandbox's memory limit is the one asked for: 3 GiB fits in 4 GiB
        assert (await provider.exec(ref, ["memhog", "3072"], 30)).exit_code == 0
        await provider.terminate(ref)


async def test_list_pages_through_more_than_one_page() -> None:
    async with local_modal() as (_, provider):
        refs = await asyncio.gather(
            *(provider.create(SandboxSpec(run_id="run-p", rollout_id=f"p{i}")) for i in range(130))
        )
        owned = await provider.list_owned("run-p")
        assert sorted(r.sandbox_id for r in owned) == sorted(r.sandbox_id for r in refs)
        assert await provider.cleanup("run-p") == 130


@pytest.mark.parametrize("backend", ["v2", "v1"])
async def test_without_readiness_probe_the_first_command_waits_for_the_boot(backend: str) -> None:
    async with local_modal("boot.median_s=0.3", readiness="none", sandbox_v2="1" if backend == "v2" else "0") as (
        server,
        provider,
    ):
        loop = asyncio.get_running_loop()
        start = loop.time()
        ref = await provider.create(SandboxSpec(run_id="run-n", rollout_id="n1"))
        await provider.wait_ready(ref, 30)  # returns at once: nothing to wait on
        result = await provider.exec(ref, ["echo", "booted"], 30)
        assert result.stdout == "booted\n" and loop.time() - start >= 0.25
        assert server.registry.by_id[ref.sandbox_id].has_readiness_probe is False
        await provider.terminate(ref)


async def test_process_settings_are_set_for_the_sdk_and_restored() -> None:
    before = {name: os.environ.get(name) for name in ("MODAL_SANDBOX_V2", "MODAL_MAX_THROTTLE_WAIT")}
    async with local_modal(sandbox_v2="0") as _:
        assert os.environ["MODAL_SANDBOX_V2"] == "0"
        assert os.environ["MODAL_MAX_THROTTLE_WAIT"] == "0"
    assert {name: os.environ.get(name) for name in before} == before


@pytest.mark.parametrize("backend", ["v2", "v1"])
async def test_sandbox_env_reaches_commands(backend: str) -> None:
    # V1 sends `env` as an anonymous Secret (SecretGetOrCreate), V2 inline in the create request
    async with local_modal(sandbox_v2="1" if backend == "v2" else "0") as (_, provider):
        ref = await provider.create(SandboxSpec(run_id="run-e", rollout_id="e1", env={"GREETING": "hi there"}))
        await provider.wait_ready(ref, 30)
        result = await provider.exec(ref, ["sh", "-c", 'echo "$GREETING"; printenv GREETING'], 30)
        assert result.stdout == "hi there\nhi there\n"
        await provider.terminate(ref)


@pytest.mark.parametrize("backend", ["v2", "v1"])
async def test_the_sdks_own_wait_poll_and_tags_calls(backend: str) -> None:
    import modal

    async with local_modal(sandbox_v2="1" if backend == "v2" else "0") as (_, provider):
        ref = await provider.create(SandboxSpec(run_id="run-w", rollout_id="w1"))
        await provider.wait_ready(ref, 30)
        sandbox = ref.handle
        assert await sandbox.poll.aio() is None
        assert await sandbox.get_tags.aio() == {"stampede-run": "run-w", "stampede-rollout": "w1"}
        waiter = asyncio.ensure_future(sandbox.wait.aio(raise_on_termination=False))  # a long poll
        await asyncio.sleep(0.2)
        assert not waiter.done()
        await provider.terminate(ref)
        await asyncio.wait_for(waiter, 15)
        again = await modal.Sandbox.from_id.aio(ref.sandbox_id, client=await provider.client())
        assert again.returncode == 137  # Modal's code for a terminated sandbox


SDK_LOOP_SCRIPT = """
import asyncio, json, sys, threading
from providers.base import SandboxSpec
from providers.vendors.modal.provider import ModalProvider
from providers.vendors.modal.sdk_loop import runs_on_adopted_loop

async def lifecycle(where):
    provider = ModalProvider.from_options({"base_url": sys.argv[1], "token": sys.argv[2], "sdk_loop": where})
    ref = await provider.create(SandboxSpec(run_id="loop", rollout_id=where))
    await provider.wait_ready(ref, 30)
    stdout = (await provider.exec(ref, ["echo", where], 30)).stdout
    seen = {"stdout": stdout, "adopted": runs_on_adopted_loop(), "threads": threading.active_count()}
    await provider.terminate(ref)
    await provider.aclose()
    return {**seen, "after_close": runs_on_adopted_loop()}

print(json.dumps([asyncio.run(lifecycle("engine")), asyncio.run(lifecycle("own"))]))
"""


async def test_the_sdk_runs_on_the_engines_loop_and_gets_its_own_thread_back() -> None:
    """`sdk_loop=engine` (the default), in a fresh interpreter as the engine is: the SDK's calls are made on the
    caller's loop, with no thread of its own; `aclose` gives the loop back, so the next loop (`sdk_loop=own`) gets
    the SDK's own thread and works."""
    async with local_modal() as (server, _):
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SDK_LOOP_SCRIPT, server.url, TOKEN, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(child.communicate(), 120)
    assert child.returncode == 0
    engine, own = json.loads(out)
    assert (engine["stdout"], engine["adopted"], engine["after_close"]) == ("engine\n", True, False)
    assert (own["stdout"], own["adopted"], own["after_close"]) == ("own\n", False, False)
    assert own["threads"] > engine["threads"]  # the SDK's synchronizer thread, started only where it is its own
