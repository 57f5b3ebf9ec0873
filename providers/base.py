"""The provider contract every sandbox vendor adapter implements, its records and the failure taxonomy.

This module is the contract (ARCHITECTURE.md, "Contracts"): the harness only ever talks to a vendor through `Provider`, and
every failure it records is one `FailureKind` in one `Phase`. Adapters import this module and nothing
else of ours, so one vendor's quirks never leak into another's.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

CONTRACT_VERSION = 10  # 2: sandboxes carry their engine (ENGINE_LABEL); 3: wait_ready may say how late it looked;
# 4: list_all_owned / cleanup_all_owned (every sandbox stampede tagged, whatever the run); 5: from_options is a
# classmethod of Provider (was looked up with getattr; its default builds a vendor that takes no options);
# 6: an engine's sandboxes also carry its process's INVOCATION_LABEL, and `list_owned(run, engine)` means this
# invocation's engine (two runs given one --run-id never sweep each other's sandboxes); 7: optional file and
# snapshot steps `upload_file`, `download_file` (FileNotFoundError for a missing file), `snapshot` (an image name
# `create` accepts as `SandboxSpec.image`), each raising `UnsupportedFeature` where the adapter has none; 8: the kind
# `client_startup_deadline` (the RL client's own startup deadline, `foundation/sandbox_client.py`: set by the engine,
# never returned by an adapter's `classify`); 9: the steps RL rollouts take beyond create/exec (issue 30): the
# phases `pull`, `upload`, `download`, `snapshot`, `fork`; `SandboxSpec.image_size_mb` (told to the vendor as the
# IMAGE_SIZE_LABEL, so a simulated vendor can model the pull); `ReadyObservation.pull_s` (the part of readiness the
# vendor said it was pulling the image); `fork` (n sandboxes from a snapshot); `exec_stream` (time to first byte);
# `start_process`/`process_exit` (a background process); `capabilities()` (what `stampede run` checks before it
# starts); `ProviderError(phase=...)` (a failure the vendor placed in a step, e.g. a pull inside readiness);
# 10: optional `fork_running(ref, spec, count)` (copies of a live sandbox in the vendor's own call; by default a
# snapshot of it, then `fork`)

RUN_LABEL = "stampede-run"
ROLLOUT_LABEL = "stampede-rollout"
ENGINE_LABEL = "stampede-engine"
INVOCATION_LABEL = "stampede-invocation"
INVOCATION = secrets.token_hex(6)
IMAGE_SIZE_LABEL = "stampede-image-mb"  # the image's size the rollout plan declared (a simulated vendor's pull)
"""This process's invocation key, beside the user's run id on every sandbox it creates: two runs given one --run-id
(or a run restarted with it) never sweep each other's sandboxes. An engine's sweep (`cleanup(run, engine)`) reaps
its own invocation's only; `cleanup(run)` (`stampede cleanup --run-id`) reaps every invocation of the run id."""

DEFAULT_LIFETIME_S = 3600.0
"""How long a sandbox may live unless the run says otherwise (the vendor reaps it after this, even if we die).
The one definition: `SandboxSpec`'s default here, the harness's `--lifetime` and rollout plan import it."""

THROTTLE_DEFAULT_S = 1.0
"""How long a 429 without Retry-After holds a client's operation: the adapters' gate (`providers/throttle_gate.py`)
and the simulator's model of that gate (`providers/sim/core/timed_ramp.py`) read this one value."""

THROTTLE_MAX_WAIT_S = 30.0
"""The longest a Retry-After (or a bare 429's doubling) holds a client's creates unless told otherwise: the `stub` and
`prime` adapters' `max_backoff_s` option and the simulator's model of their gate read this one value."""

RETRY_BACKOFF_S = 1.0
"""How long a rollout whose start failed waits before its next attempt unless the run says otherwise (vendor
seconds): the rollout plan's `retry_backoff_s` and the simulator's model of the engine's retries read it."""


class FailureKind(enum.StrEnum):
    """Why a rollout failed, comparable across vendors (contract)."""

    RATE_LIMITED = "rate_limited"  # 429, throttling
    QUOTA_EXHAUSTED = "quota_exhausted"  # account concurrency cap
    CAPACITY = "capacity"  # vendor has no room
    READY_TIMEOUT = "ready_timeout"  # not usable within the deadline
    DIED_BEFORE_READY = "died_before_ready"
    IMAGE = "image"
    CREATE_ERROR = "create_error"  # other vendor error on create
    CLIENT_STARTUP_DEADLINE = "client_startup_deadline"  # the RL client gave up (its deadline), not the vendor
    TRANSFER_ERROR = "transfer_error"  # an upload or download the vendor refused or broke (size, count, quota)
    SNAPSHOT_ERROR = "snapshot_error"  # a snapshot or a fork from one the vendor refused or failed
    EXEC_ERROR = "exec_error"
    EXEC_TIMEOUT = "exec_timeout"
    DIED_DURING_EXEC = "died_during_exec"
    OOM = "oom"
    AUTH = "auth"
    INVALID_REQUEST = "invalid_request"
    TRANSPORT = "transport"  # connection reset, DNS, TLS
    HARNESS = "harness"  # our own bug: should stay 0
    UNKNOWN = "unknown"  # should stay near 0: each one is a classification to add


INIT_FAILURE_KINDS: frozenset[FailureKind] = frozenset(
    {
        FailureKind.RATE_LIMITED,
        FailureKind.QUOTA_EXHAUSTED,
        FailureKind.CAPACITY,
        FailureKind.READY_TIMEOUT,
        FailureKind.DIED_BEFORE_READY,
        FailureKind.IMAGE,
        FailureKind.CREATE_ERROR,
        FailureKind.CLIENT_STARTUP_DEADLINE,
    }
)
"""Kinds that mean the sandbox never became usable: what RL users call init failures."""


class Phase(enum.StrEnum):
    """Where in the lifecycle a failure happened (contract)."""

    CREATE = "create"
    PULL = "pull"  # the image pulled for the sandbox (inside readiness where the vendor says so)
    READY = "ready"
    FORK = "fork"  # sandboxes started from a snapshot (a GRPO group's copies of one prepared state)
    UPLOAD = "upload"
    EXEC = "exec"
    DOWNLOAD = "download"
    SNAPSHOT = "snapshot"
    TERMINATE = "terminate"


INIT_PHASES: tuple[str, ...] = (Phase.CREATE.value, Phase.PULL.value, Phase.READY.value, Phase.FORK.value)
"""A failure in these phases came before the sandbox was interactive: an init failure, as RL users count them
(the engine's retries, the simulator, every init_failure_rate and the latency export read this one list)."""


class Capability(enum.StrEnum):
    """A step beyond create, exec and terminate that a provider may offer (`Provider.capabilities`)."""

    UPLOAD = "upload"
    DOWNLOAD = "download"
    SNAPSHOT = "snapshot"
    FORK = "fork"
    EXEC_STREAM = "exec_stream"  # output as it comes: a time to first byte of its own
    BACKGROUND = "background"  # a process started and polled while commands run


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What a rollout asks the vendor for. Limits are enforced by the vendor, not trusted to the image."""

    run_id: str
    rollout_id: str
    image: str | None = None  # None: the provider's default image
    cpu: float = 1.0  # cores
    memory_mb: int = 1024
    pids_limit: int = 256
    disk_gb: float = 5.0
    lifetime_s: float = DEFAULT_LIFETIME_S  # the vendor reaps the sandbox after this, even if we die
    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    engine: str = ""  # the engine (one per Locust process) that owns it; several share a distributed run
    invocation: str = INVOCATION  # the process that created it (see INVOCATION)
    image_size_mb: float | None = None  # what the plan says the image weighs (None: the vendor's own)

    def tags(self) -> dict[str, str]:
        """Labels every sandbox carries so that leaks can be found and reaped by run (and by engine)."""
        tags = {**self.labels, RUN_LABEL: self.run_id, ROLLOUT_LABEL: self.rollout_id}
        if self.image_size_mb is not None:
            tags[IMAGE_SIZE_LABEL] = f"{self.image_size_mb:g}"
        if self.engine:
            tags[ENGINE_LABEL] = self.engine
            tags[INVOCATION_LABEL] = self.invocation
        return tags


def tagged_by_stampede(labels: Mapping[str, Any] | Sequence[str] | None) -> str | None:
    """The run id a vendor's labels (a mapping, or `key=value` strings) carry, or None if stampede did not tag it."""
    if isinstance(labels, Mapping):
        value = labels.get(RUN_LABEL)
        return None if value is None else str(value)
    for label in labels or ():
        key, sep, value = str(label).partition("=")
        if sep and key == RUN_LABEL:
            return value
    return None


def owner_labels(run_id: str, engine: str | None = None) -> dict[str, str]:
    """The labels `list_owned` / `cleanup` filter on: the run, and within it one engine of this invocation when
    given (an engine is a process: another invocation's engine of the same name is not it)."""
    labels = {RUN_LABEL: run_id}
    if engine:
        labels[ENGINE_LABEL] = engine
        labels[INVOCATION_LABEL] = INVOCATION
    return labels


@dataclass(frozen=True, slots=True)
class SandboxRef:
    """A sandbox the vendor acknowledged. `handle` holds vendor objects (SDK handles) for this process."""

    sandbox_id: str
    provider: str
    run_id: str
    rollout_id: str = ""
    handle: Any = field(default=None, compare=False, repr=False)
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class ReadyObservation:
    """How promptly a provider noticed readiness (what `wait_ready` may return; None: it cannot tell).

    A provider that polls sees the sandbox usable only at its next look: the sandbox became usable at most
    `poll_window_s` before `wait_ready` returned (from the last look that found it not ready). The harness
    records it beside `ready_s`, so the poll term is never mistaken for the vendor's own time.
    """

    poll_window_s: float | None = None
    polls: int = 0  # status looks made for this sandbox
    probe_ready_s: float | None = None  # a direct command probe first succeeded this long into the wait
    pull_s: float | None = None  # of the wait, how long the vendor said it was pulling the image (None: not said)


@dataclass(frozen=True, slots=True)
class ExecResult:
    """A command that ran: a non-zero exit code is a result, not a failure."""

    exit_code: int
    stdout: str
    stderr: str


@dataclass(frozen=True, slots=True)
class StreamedExec:
    """A command whose output was read as it came: what an agent waits on is its first byte."""

    result: ExecResult
    first_byte_s: float | None  # from the call to the first output byte (None: it printed nothing)
    last_byte_s: float | None  # from the call to the last output byte


class ProviderError(Exception):
    """A vendor error the adapter already classified."""

    def __init__(
        self, kind: FailureKind, message: str, *, retry_after: float | None = None, phase: Phase | None = None
    ) -> None:
        super().__init__(message)
        self.kind = FailureKind(kind)
        self.retry_after = retry_after
        self.phase = phase  # the step the vendor placed it in, when finer than the call's (a pull inside readiness)

    def __str__(self) -> str:
        return f"{self.kind}: {self.args[0]}"


class ProviderConfigError(Exception):
    """A problem the user can fix before any load runs: missing credentials, bad options, no daemon."""


class UnsupportedFeature(NotImplementedError):
    """A step this vendor (or its adapter) does not offer: said, never disguised as a failure of the sandbox."""

    def __init__(self, provider: str, feature: str) -> None:
        super().__init__(f"{feature} is not supported by the {provider} provider")
        self.provider = provider
        self.feature = feature


class Provider(abc.ABC):
    """One vendor behind one asynchronous interface (contract).

    Implementations must be safe to call from many coroutines at once on one event loop, must never block
    the loop, and must never run under gevent.
    """

    name: ClassVar[str]

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Provider:
        """Build the adapter from plain options (`--provider-option K=V`, or JSON to the engine process).

        Adapters with options override this and parse them with `providers.options.parse_options`, which refuses
        an unknown key; this default, for a vendor that takes none, builds one with no arguments.
        """
        return cls()

    @abc.abstractmethod
    async def create(self, spec: SandboxSpec) -> SandboxRef:
        """Return once the vendor acknowledged the sandbox (an id exists); tag it with `spec.tags()`."""

    @abc.abstractmethod
    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation | None:
        """Return once the sandbox can run a command; raise `ProviderError(READY_TIMEOUT)` past `timeout`."""

    @abc.abstractmethod
    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        """Run one command to completion; raise `ProviderError(EXEC_TIMEOUT)` past `timeout`."""

    @abc.abstractmethod
    async def terminate(self, ref: SandboxRef) -> None:
        """Destroy the sandbox. Idempotent: terminating a gone sandbox is not an error."""

    @abc.abstractmethod
    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        """Sandboxes still alive that carry this run's label (and this engine's, when given): `owner_labels`."""

    async def cleanup(self, run_id: str, engine: str | None = None) -> int:
        """Terminate every live sandbox of the run (of one engine of it, when given); return how many."""
        refs = await self.list_owned(run_id, engine)
        results = await asyncio.gather(*(self.terminate(ref) for ref in refs), return_exceptions=True)
        return sum(1 for result in results if not isinstance(result, BaseException))

    async def list_all_owned(self) -> list[SandboxRef]:
        """Every live sandbox stampede tagged on this vendor, whatever its run (`stampede cleanup --all-owned`).

        Adapters whose vendor can list by label key (or list everything and show labels) override this.
        """
        raise ProviderConfigError(f"provider {self.name} cannot list every sandbox stampede tagged: give --run-id")

    async def cleanup_all_owned(self) -> int:
        """Terminate every live sandbox stampede ever tagged on this vendor; return how many."""
        refs = await self.list_all_owned()
        results = await asyncio.gather(*(self.terminate(ref) for ref in refs), return_exceptions=True)
        return sum(1 for result in results if not isinstance(result, BaseException))

    async def upload_file(self, ref: SandboxRef, path: str, data: bytes) -> None:
        """Write `data` to `path` in the sandbox (parents created, an existing file replaced), through the
        vendor's own files API. A relative path is the vendor's: relative to the sandbox user's home or workdir."""
        raise UnsupportedFeature(self.name, "file upload")

    async def upload_files(self, ref: SandboxRef, files: Mapping[str, bytes]) -> None:
        """Write a file tree (path -> bytes, as `upload_file` takes each): a repository in. This default uploads
        them one by one; an adapter whose vendor takes a whole tree in one call (an archive) overrides it."""
        for path, data in files.items():
            await self.upload_file(ref, path, data)

    async def download_file(self, ref: SandboxRef, path: str) -> bytes:
        """The bytes of the file at `path` in the sandbox; `FileNotFoundError` when there is none (the vendor's
        own exception as its `__cause__`)."""
        raise UnsupportedFeature(self.name, "file download")

    async def snapshot(self, ref: SandboxRef) -> str:
        """Capture the sandbox's files; returns an image name that `create(SandboxSpec(image=...))` starts from."""
        raise UnsupportedFeature(self.name, "snapshot")

    async def fork(self, snapshot: str, spec: SandboxSpec, count: int) -> list[SandboxRef]:
        """Start `count` sandboxes from `snapshot` (what `snapshot` returned), each tagged with `spec.tags()` and
        its own rollout id `f"{spec.rollout_id}-{i}"`. This default creates them one by one from the snapshot as
        an image; a vendor with a fork of its own (E2B's `count`) overrides it. A create that fails fails the fork:
        the ones already made are terminated first, so none leaks."""
        if not self.overrides("snapshot"):
            raise UnsupportedFeature(self.name, "fork")
        copies = [replace(spec, image=snapshot, rollout_id=f"{spec.rollout_id}-{i}") for i in range(count)]
        results = await asyncio.gather(*(self.create(copy) for copy in copies), return_exceptions=True)
        refs = [result for result in results if isinstance(result, SandboxRef)]
        failed = next((result for result in results if isinstance(result, BaseException)), None)
        if failed is not None:
            await asyncio.gather(*(self.terminate(ref) for ref in refs), return_exceptions=True)
            raise failed
        return refs

    async def fork_running(self, ref: SandboxRef, spec: SandboxSpec, count: int) -> list[SandboxRef]:
        """Start `count` copies of the running sandbox `ref` (a prepared state), tagged and numbered as `fork`'s
        are, under the same rule (one that fails fails them all, none left). This default is `snapshot(ref)` then
        `fork` from it; a vendor whose SDK copies a live sandbox in one call (E2B's `Sandbox.fork(count=)`, no image
        in between) overrides it, and a plan's fork step then goes through it instead of a snapshot of its own."""
        return await self.fork(await self.snapshot(ref), spec, count)

    async def exec_stream(
        self, ref: SandboxRef, argv: Sequence[str], timeout: float, on_output: Callable[[str], None] | None = None
    ) -> StreamedExec:
        """Run one command reading its output as it comes (the SDK's own streaming call), calling `on_output` per
        chunk; time to first and last byte measured here, from the call."""
        raise UnsupportedFeature(self.name, "streamed exec")

    async def start_process(self, ref: SandboxRef, argv: Sequence[str]) -> str:
        """Start a background process (a server, a long test run) and return a handle `process_exit` polls."""
        raise UnsupportedFeature(self.name, "background process")

    async def process_exit(self, ref: SandboxRef, handle: str) -> int | None:
        """The background process's exit code, or None while it runs."""
        raise UnsupportedFeature(self.name, "background process")

    def overrides(self, method: str) -> bool:
        """Whether this adapter implements `method` itself rather than inheriting the contract's refusal."""
        return getattr(type(self), method) is not getattr(Provider, method)

    def capabilities(self) -> frozenset[Capability]:
        """The steps this adapter offers, read from what it implements; `stampede run` checks a plan's steps
        against them before any load. An adapter whose support depends on its options overrides this."""
        offered = {
            Capability.UPLOAD: self.overrides("upload_file"),
            Capability.DOWNLOAD: self.overrides("download_file"),
            Capability.SNAPSHOT: self.overrides("snapshot"),
            Capability.FORK: self.overrides("fork") or self.overrides("snapshot") or self.overrides("fork_running"),
            Capability.EXEC_STREAM: self.overrides("exec_stream"),
            Capability.BACKGROUND: self.overrides("start_process") and self.overrides("process_exit"),
        }
        return frozenset(capability for capability, yes in offered.items() if yes)

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        """Map any exception raised by this adapter (or its SDK) onto the taxonomy.

        Adapters extend this for their SDK's exception classes and fall back to it.
        """
        return classify_common(exc, phase)

    async def preflight(self) -> None:
        """Fail fast, before any load, when the endpoint is unreachable or credentials are refused."""

    def versions(self) -> Mapping[str, str]:
        """Client library versions, recorded with every result (wire behaviour changes between releases)."""
        return {}

    async def aclose(self) -> None:
        """Release connections. Does not terminate sandboxes: the engine does that explicitly."""


def gone_kind(phase: Phase | None) -> FailureKind:
    """The vendor says the sandbox no longer exists: what that means in each phase."""
    if phase in (Phase.EXEC, Phase.UPLOAD, Phase.DOWNLOAD, Phase.SNAPSHOT):  # it had been usable
        return FailureKind.DIED_DURING_EXEC
    if phase is Phase.TERMINATE:
        return FailureKind.TRANSPORT
    return FailureKind.DIED_BEFORE_READY


def vendor_error_kind(phase: Phase | None) -> FailureKind:
    """A vendor answer that is an error and nothing more specific, by phase."""
    return {
        Phase.CREATE: FailureKind.CREATE_ERROR,
        Phase.PULL: FailureKind.IMAGE,
        Phase.READY: FailureKind.DIED_BEFORE_READY,
        Phase.FORK: FailureKind.SNAPSHOT_ERROR,
        Phase.UPLOAD: FailureKind.TRANSFER_ERROR,
        Phase.EXEC: FailureKind.EXEC_ERROR,
        Phase.DOWNLOAD: FailureKind.TRANSFER_ERROR,
        Phase.SNAPSHOT: FailureKind.SNAPSHOT_ERROR,
    }.get(phase or Phase.CREATE, FailureKind.TRANSPORT)


def classify_common(exc: BaseException, phase: Phase | None = None) -> FailureKind:
    """Classification every adapter shares: our own errors, timeouts and transport failures."""
    if isinstance(exc, ProviderError):
        return exc.kind
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        if phase in (Phase.READY, Phase.PULL, Phase.FORK):
            return FailureKind.READY_TIMEOUT
        if phase is Phase.EXEC:
            return FailureKind.EXEC_TIMEOUT
        if phase in (Phase.UPLOAD, Phase.DOWNLOAD):
            return FailureKind.TRANSFER_ERROR
        if phase is Phase.SNAPSHOT:
            return FailureKind.SNAPSHOT_ERROR
        return FailureKind.TRANSPORT
    if isinstance(exc, (ConnectionError, EOFError)):
        return FailureKind.TRANSPORT
    if isinstance(exc, OSError):
        return FailureKind.TRANSPORT
    return FailureKind.UNKNOWN
