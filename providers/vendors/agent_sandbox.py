"""The `agent-sandbox` provider: Kubernetes agent-sandbox (kubernetes-sigs) through its own SDK (pinned:
`k8s-agent-sandbox==1.0.8`, its async client on `kubernetes_asyncio`).

A rollout is a SandboxClaim on a SandboxWarmPool: `AsyncSandboxClient.create_sandbox(warm_pool, namespace,
sandbox_ready_timeout, labels=spec.tags())`. The SDK's create watches the claim until it is bound and Ready (a
warm sandbox adopted at once, or a cold pod started by the controller), so readiness is create's answer:
`wait_ready` returns at once, having looked at nothing (`ReadyObservation(poll_window_s=0, polls=0)`). Commands
are `sandbox.commands.run` (the router's `/execute` on the legacy python-runtime: stdout, stderr, exit code, no
streaming); files are `files.write` / `files.read` (the runtime's `/upload` and `/download`, paths relative to its
working directory, a leading `/` dropped by the SDK); `terminate` is the SDK's `terminate` (delete the claim; the controller deletes its Sandbox; a 404
is success); a run's leftovers are its claims listed with a label selector (`list_all_sandboxes`).

Where it talks, as whom: the Kubernetes API from `base_url` + `token` (`--base-url`/`--token`, or `--local`), else
`kubeconfig` (a file), else the SDK's own loading (in-cluster, `KUBECONFIG`, `~/.kube/config`). The sandboxes
through the router named by `router_url` (`SandboxDirectConnectionConfig`; the local plane serves it on the API's
own port, so `--local` needs nothing more) or a Gateway (`gateway`, `gateway_namespace`).

What the adapter changes so that the cluster shows through: `max_connections` (default 1000) widens
`kubernetes_asyncio`'s connection pool (100 as shipped): every create holds one connection for its whole claim
watch, so at 960 in flight the SDK's own pool would queue 860 creates in the client. Label values are
Kubernetes label values (63 characters of `[A-Za-z0-9_.-]`): a tag's other characters become `-`.

Options (`--provider-option K=V`): `kubeconfig`, `router_url`, `gateway`, `gateway_namespace`, `warm_pool`
(default `stampede-pool`, the local plane's), `namespace`, `create_timeout` (the SDK's `sandbox_ready_timeout`),
`request_timeout` (a command's HTTP budget past its own), `max_connections`, `preflight_timeout`, `check_sdk`.
A claim takes its image, CPU and memory from the pool's SandboxTemplate: the spec's are not sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp
import certifi
import httpx
from k8s_agent_sandbox import AsyncSandboxClient
from k8s_agent_sandbox.async_sandbox import AsyncSandbox
from k8s_agent_sandbox.exceptions import (
    SandboxClaimFailedError,
    SandboxError,
    SandboxMetadataError,
    SandboxNotFoundError,
    SandboxRequestError,
    SandboxTemplateNotFoundError,
    SandboxWarmPoolNotFoundError,
)
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig, SandboxGatewayConnectionConfig
from kubernetes.client.exceptions import ApiException as SyncApiException
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

from providers.base import (
    ROLLOUT_LABEL,
    RUN_LABEL,
    ExecResult,
    FailureKind,
    Phase,
    Provider,
    ProviderConfigError,
    ProviderError,
    ReadyObservation,
    SandboxRef,
    SandboxSpec,
    classify_common,
    gone_kind,
    owner_labels,
    vendor_error_kind,
)
from providers.cancellation import cancellable
from providers.options import (
    Option,
    declare,
    declared_options,
    declared_values,
    flag,
    integer,
    number,
    parse_options,
    text,
)
from providers.preflight import preflight_errors

PINNED_SDK = "1.0.8"  # the `[agent-sandbox]` extra's pin in pyproject.toml
DEFAULT_WARM_POOL = "stampede-pool"  # the local plane's SandboxWarmPool
DEFAULT_MAX_CONNECTIONS = 1000
CLAIM_GROUP = "extensions.agents.x-k8s.io"
CLAIM_VERSION = "v1beta1"
CLAIM_PLURAL = "sandboxclaims"
_PEM_END = "-----END CERTIFICATE-----"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]")
_QUOTA_TEXT = "exceeded quota"  # the apiserver's 403 when a namespace ResourceQuota refuses the object
_IMAGE_TEXTS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "Failed to pull image")  # the kubelet's


def label_value(value: str) -> str:
    """A tag as a Kubernetes label value: 63 characters of `[A-Za-z0-9_.-]`, starting and ending alphanumeric."""
    cleaned = _LABEL_VALUE.sub("-", value)[:63].strip("-_.")
    return cleaned


def claim_labels(tags: Mapping[str, str]) -> dict[str, str]:
    return {key: label_value(value) for key, value in tags.items()}


def selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in claim_labels(labels).items())


@dataclass(frozen=True, slots=True)
class AgentSandboxOptions:
    """Where the SDK connects (the cluster, the router) and what it claims; built from option strings."""

    base_url: str | None
    token: str | None
    kubeconfig: str | None
    router_url: str | None
    gateway: str | None
    warm_pool: str = declare(DEFAULT_WARM_POOL, text)
    namespace: str = declare("default", text)
    gateway_namespace: str = declare("default", text)
    create_timeout_s: float = declare(300.0, number, key="create_timeout", positive=True)
    request_timeout_s: float = declare(60.0, number, key="request_timeout", positive=True)
    max_connections: int = declare(DEFAULT_MAX_CONNECTIONS, integer, minimum=1)
    preflight_timeout_s: float = declare(30.0, number, key="preflight_timeout", positive=True)

    @property
    def where(self) -> str:
        return self.base_url or self.kubeconfig or "the kubeconfig's cluster"

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> AgentSandboxOptions:
        values = parse_options("agent-sandbox", options, AGENT_SANDBOX_OPTIONS)
        installed = metadata.version("k8s-agent-sandbox")
        if values["check_sdk"] and installed != PINNED_SDK:
            raise ProviderConfigError(
                f"agent-sandbox provider: checked against k8s-agent-sandbox=={PINNED_SDK}, found {installed}; "
                f"pip install 'k8s-agent-sandbox[async]=={PINNED_SDK}' (or check_sdk=0 to try this one)"
            )
        base_url = (values["base_url"] or "").strip().rstrip("/") or None
        router_url = (values["router_url"] or "").strip().rstrip("/") or None
        gateway = (values["gateway"] or "").strip() or None
        if router_url is None and gateway is None:
            if base_url is None:
                raise ProviderConfigError(
                    "agent-sandbox provider: name the sandbox router (--provider-option router_url=http://...) or a "
                    "Gateway (gateway=NAME), or use --local for the local agent-sandbox"
                )
            router_url = base_url  # the local plane serves the router on the API's own port
        return cls(
            base_url=base_url,
            token=values["token"] or None,
            kubeconfig=values["kubeconfig"] or None,
            router_url=router_url,
            gateway=gateway,
            **declared_values(cls, values),
        )


AGENT_SANDBOX_OPTIONS: dict[str, Option] = {
    "base_url": text(),  # --base-url / --local: the Kubernetes API server; none: the kubeconfig's
    "token": text(),  # the bearer token for base_url (--token, STAMPEDE_TOKEN)
    "kubeconfig": text(),  # a kubeconfig file; none: in-cluster, KUBECONFIG, ~/.kube/config
    "router_url": text(),  # the sandbox router (SandboxDirectConnectionConfig.api_url)
    "gateway": text(),  # or a Gateway's name (SandboxGatewayConnectionConfig)
    "check_sdk": flag(True),
    **declared_options(AgentSandboxOptions),
}
"""The agent-sandbox provider's options (`--provider-option K=V`, the module's docstring): any other key is refused."""


class AgentSandboxProvider(Provider):
    """Kubernetes agent-sandbox claims through `k8s_agent_sandbox.AsyncSandboxClient`."""

    name = "agent-sandbox"

    def __init__(self, options: AgentSandboxOptions) -> None:
        self.options = options
        self._client: AsyncSandboxClient | None = None
        self._api: k8s_client.ApiClient | None = None
        self._ca_file: str | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> AgentSandboxProvider:
        return cls(AgentSandboxOptions.from_mapping(options))

    async def _sdk(self) -> AsyncSandboxClient:
        """The SDK's client over our own `ApiClient` (its pool widened), built once on this loop."""
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                configuration = k8s_client.Configuration()
                if self.options.base_url is not None:
                    configuration.host = self.options.base_url
                    if self.options.token:
                        configuration.api_key = {"BearerToken": self.options.token}
                        configuration.api_key_prefix = {"BearerToken": "Bearer"}
                else:
                    await k8s_config.load_kube_config(
                        config_file=self.options.kubeconfig, client_configuration=configuration
                    )
                configuration.connection_pool_maxsize = self.options.max_connections
                plain_api = configuration.ssl_ca_cert is None and configuration.host.startswith("http://")
                router = self.options.router_url
                plain_router = router is not None and router.startswith("http://")
                if plain_api or plain_router:
                    self._ca_file = _one_certificate_bundle()  # TLS is never spoken: its contexts cost nothing
                if plain_api:
                    configuration.ssl_ca_cert = self._ca_file
                # The SDK's claim watch builds a `Watch`, and each builds an `ApiClient` of the default
                # configuration (~23 ms of CPU, most of it a TLS context loading every system CA): the default
                # is ours, as the SDK's own kubeconfig loading would make it, so that context loads one CA file.
                k8s_client.Configuration.set_default(configuration)
                self._api = k8s_client.ApiClient(configuration)
                connection: SandboxDirectConnectionConfig | SandboxGatewayConnectionConfig
                if router is not None and plain_router:
                    # Every sandbox handle builds its own httpx transport, and with it a TLS context of certifi's
                    # whole bundle (~25 ms of CPU) that plain http never uses. The SDK ignores TLS options on
                    # http:// (its validator refuses them for that reason): given unvalidated, the one-certificate
                    # file makes that context cost ~0.4 ms.
                    connection = SandboxDirectConnectionConfig.model_construct(api_url=router, ca_cert=self._ca_file)
                elif router is not None:
                    connection = SandboxDirectConnectionConfig(api_url=router)
                else:
                    connection = SandboxGatewayConnectionConfig(
                        gateway_name=self.options.gateway or "", gateway_namespace=self.options.gateway_namespace
                    )
                self._client = AsyncSandboxClient(connection_config=connection, cleanup=False, api_client=self._api)
        assert self._client is not None
        return self._client

    # --- the contract ----------------------------------------------------------------------------------

    async def preflight(self) -> None:
        async with preflight_errors(
            self.options.where,
            self.classify,
            timeout_s=self.options.preflight_timeout_s,
            refused=lambda exc: f"HTTP {exc.status}" if isinstance(exc, ApiException) and exc.status == 401 else None,
            credential="the bearer token",
        ):
            client = await self._sdk()
            await client.list_all_sandboxes(namespace=self.options.namespace, label_selector="stampede-preflight")

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        client = await self._sdk()
        try:
            sandbox = await cancellable(
                client.create_sandbox(
                    self.options.warm_pool,
                    namespace=self.options.namespace,
                    sandbox_ready_timeout=max(1, math.ceil(self.options.create_timeout_s)),
                    labels=claim_labels(spec.tags()),
                )
            )
        except ValueError as exc:  # the SDK's own checks (labels, names)
            raise ProviderError(FailureKind.INVALID_REQUEST, str(exc)) from exc
        except SandboxClaimFailedError as exc:
            if any(text in str(exc) for text in _IMAGE_TEXTS):  # the pod's image pull failed: the pull step
                raise ProviderError(FailureKind.IMAGE, str(exc), phase=Phase.PULL) from exc
            raise
        return SandboxRef(
            sandbox_id=sandbox.sandbox_id,
            provider=self.name,
            run_id=spec.run_id,
            rollout_id=spec.rollout_id,
            handle=sandbox,
            meta={"claim": sandbox.claim_name or ""},
        )

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation:
        """Nothing to wait for: the SDK's create watched the claim until Ready. No look was made, so no poll window."""
        return ReadyObservation(poll_window_s=0.0, polls=0)

    async def _sandbox(self, ref: SandboxRef) -> AsyncSandbox:
        if isinstance(ref.handle, AsyncSandbox):
            return ref.handle
        client = await self._sdk()
        claim = str(ref.meta.get("claim") or ref.sandbox_id)
        return await cancellable(client.get_sandbox(claim, namespace=self.options.namespace))

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        sandbox = await self._sandbox(ref)
        commands = sandbox.commands
        if commands is None:
            raise ProviderError(FailureKind.DIED_DURING_EXEC, f"the connection to {ref.sandbox_id} was closed")
        result = await cancellable(
            commands.run(shlex.join(argv), timeout=math.ceil(self.options.request_timeout_s), command_timeout=timeout)
        )
        if result.timed_out:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"the runtime killed the command after {timeout:g}s")
        return ExecResult(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr)

    async def upload_file(self, ref: SandboxRef, path: str, data: bytes) -> None:
        """`files.write` through the router (the python-runtime's `/upload`). The SDK sends the path relative to the
        runtime's working directory: a leading `/` is dropped, so `/tmp/x` lands in `<workdir>/tmp/x`."""
        files = (await self._sandbox(ref)).files
        if files is None:
            raise ProviderError(FailureKind.EXEC_ERROR, f"the connection to {ref.sandbox_id} was closed")
        await cancellable(files.write(path, bytes(data), timeout=math.ceil(self.options.request_timeout_s)))

    async def download_file(self, ref: SandboxRef, path: str) -> bytes:
        files = (await self._sandbox(ref)).files
        if files is None:
            raise ProviderError(FailureKind.EXEC_ERROR, f"the connection to {ref.sandbox_id} was closed")
        try:
            data = await cancellable(files.read(path, timeout=math.ceil(self.options.request_timeout_s)))
        except SandboxRequestError as exc:
            if exc.status_code == 404:
                raise FileNotFoundError(f"no such file in the sandbox: {path}") from exc
            raise
        return bytes(data)

    async def terminate(self, ref: SandboxRef) -> None:
        if isinstance(ref.handle, AsyncSandbox):
            await cancellable(ref.handle.terminate())  # idempotent; a 404 is success
            return
        client = await self._sdk()
        claim = str(ref.meta.get("claim") or ref.sandbox_id)
        await cancellable(client.k8s_helper.delete_sandbox_claim(claim, self.options.namespace))

    async def _claims(self, label_selector: str) -> list[SandboxRef]:
        """The claims a label selector picks, as refs named by their Sandbox (the claim's own name until bound).

        One list through the SDK's own API client: `list_all_sandboxes` answers claim names only."""
        client = await self._sdk()
        listed = await cancellable(
            client.k8s_helper.custom_objects_api.list_namespaced_custom_object(
                CLAIM_GROUP, CLAIM_VERSION, self.options.namespace, CLAIM_PLURAL, label_selector=label_selector
            )
        )
        refs: list[SandboxRef] = []
        for item in listed.get("items", []):
            meta = item.get("metadata") or {}
            labels = meta.get("labels") or {}
            bound = ((item.get("status") or {}).get("sandbox") or {}).get("name")
            claim = str(meta.get("name", ""))
            refs.append(
                SandboxRef(
                    str(bound or claim),
                    self.name,
                    str(labels.get(RUN_LABEL, "")),
                    rollout_id=str(labels.get(ROLLOUT_LABEL, "")),
                    meta={"claim": claim},
                )
            )
        return refs

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        return await self._claims(selector(owner_labels(run_id, engine)))

    async def list_all_owned(self) -> list[SandboxRef]:
        """Every claim carrying a run label, whatever its value (a label-existence selector)."""
        return await self._claims(RUN_LABEL)

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        return classify_agent_sandbox(exc, phase)

    def versions(self) -> Mapping[str, str]:
        return {name: metadata.version(name) for name in ("k8s-agent-sandbox", "kubernetes_asyncio", "kubernetes")}

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._api is not None:
            await self._api.close()
        self._client = None
        self._api = None
        if self._ca_file is not None:
            default = k8s_client.Configuration.get_default_copy()
            if default.ssl_ca_cert == self._ca_file:  # still ours: later clients of this process load their own CAs
                k8s_client.Configuration.set_default(None)
            with contextlib.suppress(OSError):
                os.unlink(self._ca_file)
            self._ca_file = None


def _one_certificate_bundle() -> str:
    """A CA file of one certificate (certifi's first), for a client that never speaks TLS: `kubernetes_asyncio`
    builds a TLS context for every `ApiClient` even over plain http, and one certificate loads in ~0.4 ms where
    the system's whole store takes ~22 ms."""
    bundle = Path(certifi.where()).read_text()
    end = bundle.index(_PEM_END) + len(_PEM_END)
    first = bundle[bundle.index("-----BEGIN CERTIFICATE-----") : end]
    fd, path = tempfile.mkstemp(prefix="stampede-agent-sandbox-", suffix=".pem")
    with os.fdopen(fd, "w") as handle:
        handle.write(first + "\n")
    return path


# --- classification ----------------------------------------------------------------------------------


def classify_agent_sandbox(exc: BaseException, phase: Phase | None) -> FailureKind:
    """Every exception k8s-agent-sandbox 1.0.8 (and the clients under it) raises, onto the taxonomy.

    The SDK's create is also its readiness wait, so a create that runs out of time is `ready_timeout`.
    """
    if isinstance(exc, ProviderError):
        return exc.kind
    if isinstance(exc, (ApiException, SyncApiException)):  # the async client's, or the sync one's (same fields)
        return _status_kind(exc.status, f"{exc.reason} {exc.body}", phase)
    if isinstance(exc, SandboxClaimFailedError):  # a terminal Ready=False: the pod failed, or the claim expired
        return FailureKind.IMAGE if any(text in str(exc) for text in _IMAGE_TEXTS) else FailureKind.DIED_BEFORE_READY
    if isinstance(exc, SandboxTemplateNotFoundError):  # the pool's template (its image) does not exist
        return FailureKind.IMAGE
    if isinstance(exc, SandboxWarmPoolNotFoundError):
        return FailureKind.INVALID_REQUEST
    if isinstance(exc, (SandboxNotFoundError, SandboxMetadataError)):  # deleted or replaced while waited for
        return gone_kind(phase)
    if isinstance(exc, SandboxRequestError):  # the router's answer (status) or no answer (None)
        if exc.status_code is None:
            return FailureKind.TRANSPORT
        return _router_kind(exc.status_code, phase)
    if isinstance(exc, (httpx.TimeoutException, asyncio.TimeoutError, TimeoutError)):
        return _timed_out(phase)
    if isinstance(exc, (httpx.TransportError, aiohttp.ClientError)):
        return FailureKind.TRANSPORT
    if isinstance(exc, SandboxError):  # the SDK's other errors: an answer it could not use
        return vendor_error_kind(phase)
    if isinstance(exc, RuntimeError) and "sandbox" in str(exc).lower():  # "Failed to decode JSON response ..."
        return vendor_error_kind(phase)
    if isinstance(exc, ValueError):
        return FailureKind.INVALID_REQUEST
    return classify_common(exc, phase)


def _timed_out(phase: Phase | None) -> FailureKind:
    if phase is Phase.EXEC:
        return FailureKind.EXEC_TIMEOUT
    if phase is Phase.TERMINATE:
        return FailureKind.TRANSPORT
    if phase in (Phase.UPLOAD, Phase.DOWNLOAD, Phase.SNAPSHOT):
        return vendor_error_kind(phase)
    return FailureKind.READY_TIMEOUT  # create (which waits for the claim's Ready), ready or pull


def _status_kind(status: int | None, message: str, phase: Phase | None) -> FailureKind:
    """The apiserver's answer: a Status with its HTTP code."""
    if status == 403 and _QUOTA_TEXT in message:
        return FailureKind.QUOTA_EXHAUSTED
    if status in (401, 403):
        return FailureKind.AUTH
    if status == 429:  # API Priority and Fairness throttling
        return FailureKind.RATE_LIMITED
    if status in (400, 409, 422):
        return FailureKind.INVALID_REQUEST
    if status == 404:
        return FailureKind.INVALID_REQUEST if phase in (None, Phase.CREATE) else gone_kind(phase)
    if status == 504:
        return _timed_out(phase)
    return vendor_error_kind(phase)


def _router_kind(status: int, phase: Phase | None) -> FailureKind:
    """The router's (or the runtime's) HTTP status for a command."""
    if status == 429:
        return FailureKind.RATE_LIMITED
    if status in (401, 403):
        return FailureKind.AUTH
    if status in (400, 422):
        return FailureKind.INVALID_REQUEST
    if status in (404, 502):  # no such sandbox behind the router, or its pod is gone
        return gone_kind(phase)
    if status == 504:
        return _timed_out(phase)
    return vendor_error_kind(phase)
