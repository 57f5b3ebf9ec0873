"""k8s-agent-sandbox 1.0.8, unmodified, against the local agent-sandbox (the Kubernetes API for its custom
resources, watches, the warm pool and the router), sync and async, then the `agent-sandbox` provider on it.

The SDK is pointed only the way a user points it: `KUBECONFIG` (the file the local plane writes) and
`SandboxDirectConnectionConfig(api_url=<router>)`. Everything listens on loopback.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import kubernetes.config
import kubernetes_asyncio.config
import pytest
from k8s_agent_sandbox import AsyncSandboxClient, SandboxClient
from k8s_agent_sandbox.exceptions import (
    SandboxClaimFailedError,
    SandboxNotFoundError,
    SandboxRequestError,
    SandboxWarmPoolNotFoundError,
)
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from kubernetes_asyncio.client.exceptions import ApiException

from providers.base import FailureKind, Phase, ProviderError, SandboxSpec
from providers.sim.agent_sandbox.server import WARM_POOL, AgentSandboxSettings, RunningAgentSandbox, start_agent_sandbox
from providers.vendors.agent_sandbox import AgentSandboxProvider, classify_agent_sandbox, label_value
from tests.support.live_lifecycle import check_live_lifecycle
from tests.support.local_runs import run_local

TOKEN = "agent_sandbox_conformance"
FLAVOURS = ("sync", "async")
ROOT = Path(__file__).resolve().parents[2]
SERVE = [sys.executable, "-m", "harness.cli", "agent-sandbox-local", "serve"]


@pytest.fixture(autouse=True)
def sdk_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing of the user's cluster configuration is read."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)


class Sdk:
    """One SDK flavour: `await sdk(fn, ...)` calls a client's method, a sync one in a thread.

    In this process the cluster comes from the kubeconfig file through the SDK's `api_client` parameter (the
    `kubernetes` client reads `KUBECONFIG` once, at import); the serve test's user script uses `KUBECONFIG` itself."""

    def __init__(self, flavour: str, router: str) -> None:
        self.flavour = flavour
        self.connection = SandboxDirectConnectionConfig(api_url=router)
        self.client: Any = None
        self.api: Any = None

    @classmethod
    async def open(cls, flavour: str, router: str, kubeconfig: str) -> Sdk:
        sdk = cls(flavour, router)
        if flavour == "async":
            sdk.api = await kubernetes_asyncio.config.new_client_from_config(config_file=kubeconfig)
            sdk.client = AsyncSandboxClient(connection_config=sdk.connection, cleanup=False, api_client=sdk.api)
        else:
            api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
            sdk.client = SandboxClient(connection_config=sdk.connection, api_client=api)
        return sdk

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.flavour == "async":
            return await fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def close(self) -> None:
        if self.flavour == "async":
            await self.client.close()
            await self.api.close()  # caller-owned: the SDK leaves it open


Open = Callable[..., Awaitable[tuple[RunningAgentSandbox, Sdk]]]


@pytest.fixture
async def open_front() -> AsyncIterator[Open]:
    """`await open_front(flavour, warm_pool=N, **profile_overrides)` -> an in-process local agent-sandbox and the SDK."""
    opened: list[tuple[RunningAgentSandbox, Sdk]] = []

    async def open_(flavour: str, warm_pool: int = 2, **overrides: Any) -> tuple[RunningAgentSandbox, Sdk]:
        settings = AgentSandboxSettings(
            profile="ideal", seed=3, token=TOKEN, warm_pool=warm_pool, overrides=tuple(overrides.items())
        )
        front = await start_agent_sandbox(settings)
        sdk = await Sdk.open(flavour, front.router_url, front.kubeconfig)
        opened.append((front, sdk))
        return front, sdk

    yield open_
    for front, sdk in opened:
        await sdk.close()
        await front.close()
        assert not os.path.exists(front.kubeconfig)  # closing the front removed it (it holds the token)


# --- the SDK against the front -------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_claims_adopt_the_warm_pool_then_start_cold(flavour: str, open_front: Open) -> None:
    front, sdk = await open_front(flavour, warm_pool=2)
    warm = {sb.id for sb in front.simulator.list()}
    assert len(warm) == 2  # the pool, running before any claim
    handles = [await sdk(sdk.client.create_sandbox, WARM_POOL, labels={"run": "a"}, sandbox_ready_timeout=30)]
    handles.append(await sdk(sdk.client.create_sandbox, WARM_POOL, labels={"run": "a"}, sandbox_ready_timeout=30))
    handles.append(await sdk(sdk.client.create_sandbox, WARM_POOL, labels={"run": "b"}, sandbox_ready_timeout=30))
    assert {h.sandbox_id for h in handles[:2]} == warm  # adopted: no boot of their own
    assert handles[2].sandbox_id not in warm  # the pool was empty (its refills still starting): a cold start
    result = await sdk(handles[0].commands.run, "echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    listed = await sdk(sdk.client.list_all_sandboxes, label_selector="run=a")
    assert sorted(listed) == sorted(h.claim_name for h in handles[:2])
    gone = handles[0]
    await sdk(gone.terminate)
    assert front.simulator.get(gone.sandbox_id).status == "TERMINATED"  # the claim took its Sandbox with it
    with pytest.raises(SandboxNotFoundError):
        await sdk(sdk.client.get_sandbox, "sandbox-claim-nope", resolve_timeout=1)
    again = await sdk(sdk.client.get_sandbox, handles[1].claim_name)
    assert again.sandbox_id == handles[1].sandbox_id


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_wrong_token_is_the_apiservers_401(flavour: str, open_front: Open, tmp_path: Path) -> None:
    front, _ = await open_front(flavour)
    config = Path(front.kubeconfig).read_text().replace(TOKEN, "wrong")
    (tmp_path / "kubeconfig").write_text(config)
    sdk = await Sdk.open(flavour, front.router_url, str(tmp_path / "kubeconfig"))
    try:
        with pytest.raises(Exception) as caught:
            await sdk(sdk.client.create_sandbox, WARM_POOL, sandbox_ready_timeout=5)
    finally:
        await sdk.close()
    assert getattr(caught.value, "status", None) == 401
    assert classify_agent_sandbox(caught.value, Phase.CREATE) is FailureKind.AUTH


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_claim_failures_the_sdk_raises(flavour: str, open_front: Open) -> None:
    front, sdk = await open_front(flavour, warm_pool=0, **{"errors.boot_crash_prob": 1.0})
    with pytest.raises(SandboxWarmPoolNotFoundError) as no_pool:
        await sdk(sdk.client.create_sandbox, "no-such-pool", sandbox_ready_timeout=10)
    assert classify_agent_sandbox(no_pool.value, Phase.CREATE) is FailureKind.INVALID_REQUEST
    with pytest.raises(SandboxClaimFailedError) as crashed:  # a cold pod that fails: the claim's PodFailed
        await sdk(sdk.client.create_sandbox, WARM_POOL, sandbox_ready_timeout=10)
    assert classify_agent_sandbox(crashed.value, Phase.CREATE) is FailureKind.DIED_BEFORE_READY
    assert front.simulator.list() and all(sb.status == "ERROR" for sb in front.simulator.list())


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_a_claim_that_never_binds_times_out_in_the_sdk(flavour: str, open_front: Open) -> None:
    _, sdk = await open_front(flavour, warm_pool=0, **{"boot.median_s": 1000.0})  # a cold pod that takes its time
    with pytest.raises(TimeoutError) as caught:
        await sdk(sdk.client.create_sandbox, WARM_POOL, sandbox_ready_timeout=1)
    assert classify_agent_sandbox(caught.value, Phase.CREATE) is FailureKind.READY_TIMEOUT


async def test_a_sandbox_gone_under_the_router_is_a_request_error(open_front: Open) -> None:
    front, sdk = await open_front("async")
    handle = await sdk.client.create_sandbox(WARM_POOL, sandbox_ready_timeout=30)
    front.simulator.terminate(handle.sandbox_id)
    with pytest.raises(SandboxRequestError) as caught:
        await handle.commands.run("true")
    assert caught.value.status_code == 502
    assert classify_agent_sandbox(caught.value, Phase.EXEC) is FailureKind.DIED_DURING_EXEC


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_files_through_the_router_land_in_the_sandboxs_own_tree(flavour: str, open_front: Open) -> None:
    front, sdk = await open_front(flavour, warm_pool=1)
    handle = await sdk(sdk.client.create_sandbox, WARM_POOL, sandbox_ready_timeout=30)
    await sdk(handle.files.write, "data/in.txt", b"hello\x00bytes")
    assert await sdk(handle.files.read, "data/in.txt") == b"hello\x00bytes"
    assert await sdk(handle.files.exists, "data/in.txt") and not await sdk(handle.files.exists, "data/nope")
    assert [(e.name, e.size, e.type) for e in await sdk(handle.files.list, "data")] == [("in.txt", 11, "file")]
    on_disk = front.simulator.tree(handle.sandbox_id).host_path("/app/data/in.txt")  # the runtime's cwd is /app
    assert on_disk.read_bytes() == b"hello\x00bytes"
    with pytest.raises(SandboxRequestError) as missing:
        await sdk(handle.files.read, "data/nope")
    assert missing.value.status_code == 404


# --- the provider ---------------------------------------------------------------------------------


def _provider(front: RunningAgentSandbox, **options: Any) -> AgentSandboxProvider:
    return AgentSandboxProvider.from_options({"base_url": front.url, "token": front.token, **options})


async def test_the_provider_walks_the_contract_against_the_front(open_front: Open) -> None:
    front, _ = await open_front("async", warm_pool=2)
    await check_live_lifecycle(_provider(front), 10)  # the live tests' walk: two sandboxes, one command, cleanup
    truth = front.simulator.truth()
    assert len(truth) >= 2 and {row["status"] for row in truth[:2]} == {"TERMINATED"}


async def test_the_provider_labels_cleans_up_and_classifies(open_front: Open) -> None:
    front, _ = await open_front("async", warm_pool=1)
    provider = _provider(front)
    try:
        ref = await provider.create(SandboxSpec(run_id="run/with:odd chars", rollout_id="r1", engine="e1"))
        owned = await provider.list_owned("run/with:odd chars", "e1")
        assert [r.sandbox_id for r in owned] == [ref.sandbox_id] and owned[0].rollout_id == "r1"
        assert [r.run_id for r in await provider.list_all_owned()] == [label_value("run/with:odd chars")]
        async with httpx.AsyncClient() as http:  # the truth the harness joins: the adopted warm sandbox, by run label
            rows = await http.get(f"{front.url}/api/v1/_stampede/truth", headers={"Authorization": f"Bearer {TOKEN}"})
        tagged = [row["id"] for row in rows.json()["sandboxes"] if "stampede-run=run-with-odd-chars" in row["labels"]]
        assert tagged == [ref.sandbox_id]
        await provider.upload_file(ref, "out/result.json", b'{"ok": true}')
        assert await provider.download_file(ref, "out/result.json") == b'{"ok": true}'
        with pytest.raises(FileNotFoundError):
            await provider.download_file(ref, "out/missing.json")
        with pytest.raises(ProviderError) as timed_out:
            await provider.exec(ref, ["sleep", "5"], 0.2)
        assert timed_out.value.kind is FailureKind.EXEC_TIMEOUT
        assert await provider.cleanup("run/with:odd chars") == 1
        await provider.terminate(ref)  # idempotent
        bad = _provider(front, token="wrong")
        with pytest.raises(ProviderError) as refused:
            await bad.preflight()
        assert refused.value.kind is FailureKind.AUTH
        await bad.aclose()
    finally:
        await provider.aclose()


@pytest.mark.parametrize(
    ("status", "body", "phase", "kind"),
    [
        (401, "", Phase.CREATE, FailureKind.AUTH),
        (403, 'sandboxclaims "x" is forbidden: exceeded quota: q', Phase.CREATE, FailureKind.QUOTA_EXHAUSTED),
        (429, "", Phase.CREATE, FailureKind.RATE_LIMITED),
        (404, "", Phase.CREATE, FailureKind.INVALID_REQUEST),
        (404, "", Phase.EXEC, FailureKind.DIED_DURING_EXEC),
        (500, "", Phase.CREATE, FailureKind.CREATE_ERROR),
        (504, "", Phase.READY, FailureKind.READY_TIMEOUT),
    ],
)
def test_apiserver_statuses(status: int, body: str, phase: Phase, kind: FailureKind) -> None:
    exc = ApiException(status=status, reason="r")
    exc.body = body
    assert classify_agent_sandbox(exc, phase) is kind


def test_options_are_checked() -> None:
    from providers.base import ProviderConfigError

    with pytest.raises(ProviderConfigError, match="router"):
        AgentSandboxProvider.from_options({})
    with pytest.raises(ProviderConfigError, match=r"unknown|nope"):
        AgentSandboxProvider.from_options({"base_url": "http://127.0.0.1:1", "nope": "1"})
    provider = AgentSandboxProvider.from_options({"kubeconfig": "/k", "router_url": "http://127.0.0.1:2/"})
    assert provider.options.router_url == "http://127.0.0.1:2" and provider.options.max_connections == 1000


# --- the front as its own process ----------------------------------------------------------------


async def test_cold_starts_past_the_clusters_pod_rate_queue_in_order_and_all_bind(open_front: Open) -> None:
    front, sdk = await open_front("async", warm_pool=0, **{"create_rate.per_s": 20.0, "create_rate.burst": 1.0})
    handles = await asyncio.gather(
        *(sdk.client.create_sandbox(WARM_POOL, sandbox_ready_timeout=30) for _ in range(5))
    )  # 4 of the 5 pods wait for the cluster's throughput; none is refused, none retried in a herd
    assert len({h.sandbox_id for h in handles}) == 5
    accepted = sorted(sb.created_at for sb in front.simulator.list())
    assert accepted[-1] - accepted[0] >= 4 / 20.0 * 0.9  # one pod per token: the rate, not a burst


@pytest.mark.slow
def test_a_burst_through_the_real_sdk_joins_the_truth_and_has_no_unknown_failures(tmp_path: Path) -> None:
    run = run_local(
        "agent-sandbox",
        tmp_path,
        "--scenario",
        "burst",
        "--users",
        "40",
        env={"STAMPEDE_AGENT_SANDBOX_WARM_POOL": "24"},
    )
    rollouts, truth = run.rollouts, run.truth
    assert len(rollouts) == 40 and (rollouts["outcome"] == "ok").all()
    assert (
        set(rollouts["sdk_version"])
        == {
            f"k8s-agent-sandbox={metadata.version('k8s-agent-sandbox')},kubernetes_asyncio="
            f"{metadata.version('kubernetes_asyncio')},kubernetes={metadata.version('kubernetes')}"
        }
        or rollouts["sdk_version"].str.contains("k8s-agent-sandbox").all()
    )
    assert set(truth["id"]) == set(rollouts["sandbox_id"])  # every claim's Sandbox, found by its claim's run label
    assert set(truth["status"]) == {"TERMINATED"}  # and every one deleted with its claim
    assert "unknown failures 0; harness failures 0" in run.stdout


async def test_over_plain_http_the_claim_watches_load_one_ca_and_leave_nothing_behind(open_front: Open) -> None:
    """Each claim watch builds a `kubernetes_asyncio` client of the default configuration: the provider makes that
    default its own, naming a one-certificate CA file (no TLS is spoken over http), and takes both back on close."""
    from kubernetes_asyncio import client as k8s_client

    front, _ = await open_front("async", warm_pool=1)
    provider = _provider(front)
    try:
        ref = await provider.create(SandboxSpec(run_id="plain", rollout_id="r1"))
        assert (await provider.exec(ref, ["true"], 10)).exit_code == 0
        await provider.terminate(ref)
        ca_file = k8s_client.Configuration.get_default_copy().ssl_ca_cert
        assert ca_file is not None and Path(ca_file).read_text().count("BEGIN CERTIFICATE") == 1
    finally:
        await provider.aclose()
    assert not os.path.exists(ca_file)
    assert k8s_client.Configuration.get_default_copy().ssl_ca_cert is None
    await k8s_client.ApiClient().close()  # a later client of this process builds, with the system's CAs
