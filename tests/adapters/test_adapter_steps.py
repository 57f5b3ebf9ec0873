"""Contract 9's steps through each SDK adapter, against its local plane, through the vendor's own SDK.

For every vendor with a local plane: the adapter offers exactly the steps it was given (a step dropped or added
by accident is caught here), and each step it offers works end to end. A streamed command's output arrives in
pieces, the first before the last, and equals what a plain `exec` answers; a background process is running until
the test lets it finish, then polls to its own exit code; a fork of 3 from a snapshot starts three live copies
that hold the snapshot's file, each under its own rollout id, and none is left once they are terminated.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from providers.base import Capability, FailureKind, Phase, Provider, ProviderError, SandboxRef, SandboxSpec
from providers.sim.core.execution.isolated_shell import IsolatedShell

pytestmark = pytest.mark.skipif(not IsolatedShell.available(), reason="real sandbox commands need bwrap here")

TOKEN = "adapter-steps"
Overrides = tuple[tuple[str, Any], ...]
REAL: Overrides = (("sandbox.commands", "real"),)  # output streams as the command writes it
STREAM, BACKGROUND, FORK, SNAPSHOT = Capability.EXEC_STREAM, Capability.BACKGROUND, Capability.FORK, Capability.SNAPSHOT
FILES = {Capability.UPLOAD, Capability.DOWNLOAD}

EXPECTED: dict[str, set[Capability]] = {
    "e2b": FILES | {STREAM, BACKGROUND, SNAPSHOT, FORK},
    "daytona": FILES | {STREAM, BACKGROUND, SNAPSHOT, FORK},
    "modal": FILES | {STREAM, BACKGROUND, SNAPSHOT, FORK},
    "prime": FILES | {STREAM, BACKGROUND, SNAPSHOT, FORK},
    "runloop": FILES | {STREAM, BACKGROUND, SNAPSHOT, FORK},
    "vercel": FILES | {STREAM, BACKGROUND, SNAPSHOT, FORK},
    "coreweave": FILES | {STREAM, BACKGROUND},
    "agent-sandbox": FILES,
    "stub": FILES | {SNAPSHOT, FORK},
}
"""What each adapter offers (docs/vendors.md): a change here is a change users see in `stampede run`'s check."""

Opener = Callable[..., Awaitable[tuple[Provider, Callable[[], Awaitable[None]]]]]


async def _e2b(_: pytest.MonkeyPatch, real: Overrides = REAL) -> tuple[Provider, Callable[[], Awaitable[None]]]:
    from providers.sim.e2b.server import E2BSettings, start_e2b
    from providers.vendors.e2b import E2BProvider

    front = await start_e2b(E2BSettings(profile="ideal", seed=5, token=TOKEN, overrides=real))
    return E2BProvider.from_options(
        {"base_url": front.url, "token": front.token, "sandbox_url": front.url}
    ), front.close


async def _daytona(_: pytest.MonkeyPatch, real: Overrides = REAL) -> tuple[Provider, Callable[[], Awaitable[None]]]:
    from providers.sim.daytona.server import DaytonaSettings, start_daytona
    from providers.vendors.daytona.provider import DaytonaProvider

    front = await start_daytona(DaytonaSettings(seed=3, token=TOKEN, overrides=real))
    return DaytonaProvider.from_options({"base_url": front.api_url, "token": TOKEN}), front.close


async def _modal(_: pytest.MonkeyPatch, real: Overrides = REAL) -> tuple[Provider, Callable[[], Awaitable[None]]]:
    from providers.sim.modal.server import ModalSettings, start_modal
    from providers.vendors.modal.provider import ModalProvider

    front = await start_modal(ModalSettings(profile="ideal", token=TOKEN, overrides=real))
    provider = ModalProvider.from_options({"base_url": front.url, "token": TOKEN})
    await provider.preflight()
    return provider, front.close


async def _prime(_: pytest.MonkeyPatch, real: Overrides = REAL) -> tuple[Provider, Callable[[], Awaitable[None]]]:
    from providers.sim.prime.api import StubSettings, start_stub
    from providers.vendors.prime.provider import PrimeProvider

    front = await start_stub(StubSettings(profile="ideal", seed=5, overrides=real))
    return PrimeProvider.from_options({"base_url": front.url, "token": front.token}), front.close


async def _stub(_: pytest.MonkeyPatch, real: Overrides = REAL) -> tuple[Provider, Callable[[], Awaitable[None]]]:
    from providers.sim.prime.api import StubSettings, start_stub
    from providers.vendors.stub.provider import StubProvider

    front = await start_stub(StubSettings(profile="ideal", seed=5, overrides=real))
    return StubProvider.from_options({"base_url": front.url, "token": front.token}), front.close


async def _runloop(_: pytest.MonkeyPatch, real: Overrides = REAL) -> tuple[Provider, Callable[[], Awaitable[None]]]:
    from providers.sim.runloop.server import RunloopSettings, start_runloop
    from providers.vendors.runloop import RunloopProvider

    front = await start_runloop(RunloopSettings(seed=3, token=TOKEN, time_scale=0.2, overrides=real))
    return RunloopProvider.from_options({"base_url": front.url, "token": TOKEN}), front.close


async def _vercel(
    monkeypatch: pytest.MonkeyPatch, real: Overrides = REAL
) -> tuple[Provider, Callable[[], Awaitable[None]]]:
    from providers.sim.vercel.server import PROJECT_ID, TEAM_ID, VercelSettings, start_vercel
    from providers.vendors.vercel import VercelProvider

    front = await start_vercel(VercelSettings(profile="ideal", seed=5, token=TOKEN, overrides=real))
    for name, value in front.sdk_environment().items():
        monkeypatch.setenv(name, value)
    options = {"base_url": front.url, "token": front.token, "team_id": TEAM_ID, "project_id": PROJECT_ID}
    return VercelProvider.from_options(options), front.close


async def _coreweave(
    monkeypatch: pytest.MonkeyPatch, real: Overrides = REAL
) -> tuple[Provider, Callable[[], Awaitable[None]]]:
    from providers.sim.coreweave.server import CoreWeaveSettings, start_coreweave
    from providers.vendors.coreweave import CoreWeaveProvider

    front = await start_coreweave(CoreWeaveSettings(profile="ideal", seed=5, token=TOKEN, overrides=real))
    for name, value in front.sdk_environment().items():
        monkeypatch.setenv(name, value)
    return CoreWeaveProvider.from_options({"base_url": front.url, "token": front.token}), front.close


async def _agent_sandbox(
    _: pytest.MonkeyPatch, real: Overrides = REAL, warm_pool: int = 4
) -> tuple[Provider, Callable[[], Awaitable[None]]]:
    from providers.sim.agent_sandbox.server import AgentSandboxSettings, start_agent_sandbox
    from providers.vendors.agent_sandbox import AgentSandboxProvider

    front = await start_agent_sandbox(
        AgentSandboxSettings(profile="ideal", seed=3, token=TOKEN, warm_pool=warm_pool, overrides=real)
    )
    return AgentSandboxProvider.from_options({"base_url": front.url, "token": front.token}), front.close


OPENERS: dict[str, Opener] = {
    "e2b": _e2b,
    "daytona": _daytona,
    "modal": _modal,
    "prime": _prime,
    "stub": _stub,
    "runloop": _runloop,
    "vercel": _vercel,
    "coreweave": _coreweave,
    "agent-sandbox": _agent_sandbox,
}


@pytest.fixture(autouse=True)
def private_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing of the user's is read: no SDK's key or URL from the environment, a private home."""
    monkeypatch.setenv("HOME", str(tmp_path))
    prefixes = ("E2B_", "DAYTONA_", "MODAL_", "PRIME_", "RUNLOOP_", "VERCEL_", "CWSANDBOX_", "KUBECONFIG")
    for name in list(os.environ):
        if name.startswith(prefixes):
            monkeypatch.delenv(name, raising=False)


@contextlib.asynccontextmanager
async def opened(vendor: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Provider]:
    provider, close = await OPENERS[vendor](monkeypatch)
    try:
        yield provider
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(provider.cleanup("steps"), 60)
        await provider.aclose()
        await close()


async def _ready(provider: Provider, rollout: str, **spec: Any) -> SandboxRef:
    ref = await provider.create(SandboxSpec(run_id="steps", rollout_id=rollout, lifetime_s=300, **spec))
    await provider.wait_ready(ref, 60)
    return ref


def _needs(provider: Provider, capability: Capability) -> None:
    if capability not in provider.capabilities():
        pytest.skip(f"{provider.name} does not offer {capability}")


VENDORS = sorted(OPENERS)


@pytest.mark.parametrize("vendor", VENDORS)
async def test_an_adapter_offers_the_steps_it_implements(vendor: str, monkeypatch: pytest.MonkeyPatch) -> None:
    provider, close = await OPENERS[vendor](monkeypatch)
    try:
        assert provider.capabilities() == EXPECTED[vendor]
    finally:
        await provider.aclose()
        await close()


@pytest.mark.parametrize("vendor", [v for v in VENDORS if STREAM in EXPECTED[v]])
async def test_a_streamed_command_answers_piece_by_piece_what_exec_answers(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(vendor, monkeypatch) as provider:
        _needs(provider, STREAM)
        ref = await _ready(provider, "stream")
        argv = ["sh", "-c", "echo one; sleep 0.5; echo two"]
        chunks: list[str] = []
        streamed = await asyncio.wait_for(provider.exec_stream(ref, argv, 30, chunks.append), 60)
        plain = await provider.exec(ref, argv, 30)
        assert streamed.result.exit_code == plain.exit_code == 0
        assert streamed.result.stdout == plain.stdout and "one\n" in plain.stdout and "two\n" in plain.stdout
        assert "".join(chunks).count("one") == 1 and "two" in "".join(chunks)
        assert streamed.first_byte_s is not None and streamed.last_byte_s is not None
        assert 0 < streamed.first_byte_s < streamed.last_byte_s  # "one" came before the sleep, "two" after it
        failed = await asyncio.wait_for(provider.exec_stream(ref, ["sh", "-c", "exit 3"], 30), 60)
        assert failed.result.exit_code == 3 and failed.first_byte_s is None  # an exit code is a result; no output


@pytest.mark.parametrize("vendor", [v for v in VENDORS if BACKGROUND in EXPECTED[v]])
async def test_a_background_process_runs_until_it_exits_with_its_code(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(vendor, monkeypatch) as provider:
        _needs(provider, BACKGROUND)
        ref = await _ready(provider, "background")
        gate = "/tmp/stampede-go"
        handle = await provider.start_process(ref, ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done; exit 7"])
        assert await provider.process_exit(ref, handle) is None  # waits on the gate: still running
        done = await provider.exec(ref, ["sh", "-c", f"echo > {gate}"], 30)  # a command runs beside it
        assert done.exit_code == 0
        code = None
        async with asyncio.timeout(60):
            while code is None:
                code = await provider.process_exit(ref, handle)
                if code is None:
                    await asyncio.sleep(0.2)
        assert code == 7


@pytest.mark.parametrize("vendor", [v for v in VENDORS if FORK in EXPECTED[v]])
async def test_a_fork_of_three_starts_three_copies_of_the_snapshot(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(vendor, monkeypatch) as provider:
        _needs(provider, FORK)
        origin = await _ready(provider, "origin")
        await provider.upload_file(origin, "/tmp/prepared.txt", b"prepared state")
        snapshot = await asyncio.wait_for(provider.snapshot(origin), 120)
        await provider.terminate(origin)
        copies = await asyncio.wait_for(provider.fork(snapshot, SandboxSpec("steps", "group", lifetime_s=300), 3), 120)
        assert sorted(ref.rollout_id for ref in copies) == ["group-0", "group-1", "group-2"]
        assert len({ref.sandbox_id for ref in copies}) == 3
        for ref in copies:
            await provider.wait_ready(ref, 60)
            read = await provider.exec(ref, ["cat", "/tmp/prepared.txt"], 30)
            assert (read.exit_code, read.stdout) == (0, "prepared state")
        assert {ref.sandbox_id for ref in await provider.list_owned("steps")} >= {ref.sandbox_id for ref in copies}
        await asyncio.gather(*(provider.terminate(ref) for ref in copies))
        assert not {ref.sandbox_id for ref in await provider.list_owned("steps")} & {ref.sandbox_id for ref in copies}


# --- the new steps' failures, classified ---------------------------------------------------------------------


def _ordinary_failures() -> list[tuple[str, Callable[[BaseException, Phase], FailureKind], BaseException, Phase, str]]:
    """(vendor, its classify, an exception its SDK raises in ordinary failure, the step, the kind it must be)."""
    import cwsandbox
    import httpx
    import httpx2
    import modal.exception as mexc
    import runloop_api_client as rl
    from daytona.common.errors import DaytonaError, DaytonaNotFoundError, DaytonaRateLimitError, DaytonaTimeoutError
    from e2b import NotFoundException, RateLimitException, SandboxException, SandboxNotFoundException, TimeoutException
    from k8s_agent_sandbox.exceptions import SandboxRequestError
    from vercel.sandbox import SandboxApiError

    from providers.vendors.agent_sandbox import classify_agent_sandbox
    from providers.vendors.coreweave import classify_coreweave
    from providers.vendors.daytona.errors import classify_daytona
    from providers.vendors.e2b import classify_e2b
    from providers.vendors.modal.errors import classify_modal
    from providers.vendors.prime.errors import classify_prime
    from providers.vendors.runloop import classify_runloop
    from providers.vendors.vercel import classify_vercel

    def runloop(cls: type[rl.APIStatusError], status: int) -> rl.APIStatusError:
        response = httpx.Response(status, request=httpx.Request("POST", "http://127.0.0.1:9/v1/devboxes/x"))
        return cls(f"HTTP {status}", response=response, body=None)

    def vercel(status: int) -> SandboxApiError:
        return SandboxApiError(httpx2.Response(status, request=httpx2.Request("POST", "http://127.0.0.1:9/x")), "no")

    def prime(status: int) -> BaseException:
        from prime_sandboxes import APIError

        return APIError(f"HTTP {status}: refused")

    up, down, snap, fork = Phase.UPLOAD, Phase.DOWNLOAD, Phase.SNAPSHOT, Phase.FORK
    transfer, snapshot, gone = "transfer_error", "snapshot_error", "died_during_exec"
    return [
        ("e2b", classify_e2b, SandboxException("too large", status_code=413), up, transfer),
        ("e2b", classify_e2b, SandboxNotFoundException("gone"), down, gone),
        ("e2b", classify_e2b, RateLimitException("slow down"), up, "rate_limited"),
        ("e2b", classify_e2b, TimeoutException("timed out"), up, transfer),
        ("e2b", classify_e2b, TimeoutException("timed out"), snap, snapshot),
        ("e2b", classify_e2b, NotFoundException("no template"), fork, snapshot),
        ("daytona", classify_daytona, DaytonaError("too large", status_code=413), up, transfer),
        ("daytona", classify_daytona, DaytonaNotFoundError("gone", status_code=404), down, gone),
        ("daytona", classify_daytona, DaytonaRateLimitError("slow down", status_code=429), up, "rate_limited"),
        ("daytona", classify_daytona, DaytonaTimeoutError("timed out"), down, transfer),
        ("daytona", classify_daytona, DaytonaError("failed", status_code=500), snap, snapshot),
        ("modal", classify_modal, mexc.NotFoundError("no such path"), up, transfer),
        ("modal", classify_modal, mexc.SandboxTerminatedError("terminated"), down, gone),
        ("modal", classify_modal, mexc.TimeoutError("deadline"), snap, snapshot),
        ("modal", classify_modal, mexc.ResourceExhaustedError("slow down"), up, "rate_limited"),
        ("prime", classify_prime, prime(413), up, transfer),
        ("prime", classify_prime, prime(404), down, gone),
        ("prime", classify_prime, prime(429), up, "rate_limited"),
        ("prime", classify_prime, TimeoutError(), down, transfer),
        ("runloop", classify_runloop, runloop(rl.APIStatusError, 413), up, transfer),
        ("runloop", classify_runloop, runloop(rl.NotFoundError, 404), down, gone),
        ("runloop", classify_runloop, runloop(rl.RateLimitError, 429), up, "rate_limited"),
        ("runloop", classify_runloop, runloop(rl.InternalServerError, 500), snap, snapshot),
        ("runloop", classify_runloop, rl.APITimeoutError(httpx.Request("GET", "http://127.0.0.1:9")), down, transfer),
        ("vercel", classify_vercel, vercel(413), up, transfer),
        ("vercel", classify_vercel, vercel(404), down, gone),
        ("vercel", classify_vercel, vercel(429), up, "rate_limited"),
        ("vercel", classify_vercel, vercel(500), snap, snapshot),
        ("coreweave", classify_coreweave, cwsandbox.SandboxNotFoundError("gone"), up, gone),
        ("coreweave", classify_coreweave, cwsandbox.SandboxRequestTimeoutError("deadline"), down, transfer),
        ("coreweave", classify_coreweave, cwsandbox.CWSandboxError("failed"), up, transfer),
        ("agent-sandbox", classify_agent_sandbox, SandboxRequestError("too large", status_code=413), up, transfer),
        ("agent-sandbox", classify_agent_sandbox, SandboxRequestError("gone", status_code=404), down, gone),
        ("agent-sandbox", classify_agent_sandbox, SandboxRequestError("slow", status_code=429), up, "rate_limited"),
        ("agent-sandbox", classify_agent_sandbox, TimeoutError(), up, transfer),
    ]


def test_the_new_steps_failures_are_classified_by_step_never_unknown() -> None:
    wrong = [
        (vendor, type(exc).__name__, str(phase), str(classify(exc, phase)), want)
        for vendor, classify, exc, phase, want in _ordinary_failures()
        if classify(exc, phase) != want
    ]
    assert wrong == []


def test_the_stub_classifies_an_unreadable_upload_answer_as_a_transfer_error() -> None:
    from providers.vendors.stub.provider import StubProvider

    provider = StubProvider.from_options({"base_url": "http://127.0.0.1:9", "token": "t"})
    assert provider.classify(ValueError("not JSON"), Phase.UPLOAD) is FailureKind.TRANSFER_ERROR
    assert provider.classify(ValueError("not JSON"), Phase.EXEC) is FailureKind.EXEC_ERROR


async def test_daytona_readiness_reports_the_pull_it_saw() -> None:
    """The states the SDK saw: `pulling_snapshot` from the create's answer until a look found it `starting`."""
    from providers.vendors.daytona.provider import _Start

    start = _Start(acked=asyncio.get_running_loop().create_future())
    start.acknowledge("sb-1", "pulling_snapshot")
    at = start.acked_at
    start.looks += [(at + 1.0, "pulling_snapshot"), (at + 2.5, "starting"), (at + 3.0, "started")]
    observed = start.observation()
    assert observed.pull_s == pytest.approx(2.5) and observed.polls == 3
    quick = _Start(acked=asyncio.get_running_loop().create_future())
    quick.acknowledge("sb-2", "starting")
    quick.looks.append((quick.acked_at + 0.5, "started"))
    assert quick.observation().pull_s is None  # the vendor never said it pulled
    assert not quick.pulled() and start.looks[-1][1] == "started" and not start.pulled()


@pytest.mark.parametrize("vendor", ["prime", "coreweave", "agent-sandbox", "modal"])
async def test_an_image_the_vendor_could_not_pull_fails_in_the_pull_step(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vendor says the pull failed (Prime's IMAGE_PULL_FAILED, the pod's or Modal's "Failed to pull image"): `image`, placed
    in the `pull` step inside readiness, so the report counts it against the image, not the boot."""
    cold = (("image.pull_failure_prob", 1.0), ("pool.initial_nodes_warm", False))
    cold_pool = {"warm_pool": 0} if vendor == "agent-sandbox" else {}  # no warm pod: the claim's own pod pulls
    provider, close = await OPENERS[vendor](monkeypatch, REAL + cold, **cold_pool)
    try:
        with pytest.raises(ProviderError) as failed:
            ref = await provider.create(
                SandboxSpec("steps", "cold", image="registry.local/never-pulled:1", lifetime_s=60)
            )
            await provider.wait_ready(ref, 30)
        assert (failed.value.kind, failed.value.phase) == (FailureKind.IMAGE, Phase.PULL)
        assert provider.classify(failed.value, Phase.READY) is FailureKind.IMAGE
    finally:
        with contextlib.suppress(Exception):
            await provider.cleanup("steps")
        await provider.aclose()
        await close()
