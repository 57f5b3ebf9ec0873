"""The local Docker Engine behind the provider contract, on aiodocker over the daemon's socket.

Users run it to learn what their own hardware can do as a sandbox fleet. One sandbox is one container:
`create` posts the container (labelled with the run and rollout ids) and returns once the daemon gave it an
id; `wait_ready` starts it and returns once it is running, so a slow start shows up as readiness time (and
`ready_timeout`) the way a vendor's boot does; `exec` goes through the exec API; `terminate` force-removes.
The container's own process is `sleep <lifetime>` (under docker-init), so the daemon side also bounds a
leak. Sandboxes get no network, no privileges, no host mounts, and the spec's cpu, memory (no swap) and pids
limits; they run hardened: every capability dropped, no-new-privileges, a read-only root filesystem with one
size-capped writable tmpfs (`scratch`, /tmp), and the image's own non-root user (the stampede image's is uid
1000). No user namespace: userns-remap is a daemon setting (`dockerd --userns-remap`) the daemon here is not
started with; the non-root uid without capabilities is the equivalent a container escape meets.

The connection pool is sized for thousands of calls in flight: aiohttp's default limit of 100 would
silently queue requests client-side and make the daemon look faster (or slower) than it is.

This module is the lifecycle (create, start, exec, remove, list) on one daemon client; the daemon's errors on the
taxonomy are `errors.py`, a command's streams, exit code and host-side end (OOM count, kill) `commands.py`,
image building `image.py`, files and snapshots (archive API, commit) `files.py`.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import math
import os
import posixpath
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import aiodocker
import aiohttp
from aiodocker.exceptions import DockerError
from aiodocker.execs import Exec

from foundation.open_files import raise_open_files_limit
from providers.base import (
    ENGINE_LABEL,
    INVOCATION_LABEL,
    ROLLOUT_LABEL,
    RUN_LABEL,
    Capability,
    ExecResult,
    FailureKind,
    Phase,
    Provider,
    ProviderConfigError,
    ProviderError,
    ReadyObservation,
    SandboxRef,
    SandboxSpec,
    StreamedExec,
    UnsupportedFeature,
    classify_common,
    owner_labels,
)
from providers.options import Option, declare, declared_options, declared_values, parse_options, text
from providers.output_clock import OutputClock
from providers.vendors.docker.commands import (
    collect_output,
    exec_exit_code,
    host_oom_kills,
    kill_tree,
    main_process_gone,
    parse_oom_kills,
)
from providers.vendors.docker.errors import (
    TRANSPORT_STATUS,
    container_death,
    daemon_errors,
    docker_error_kind,
    short_error,
)
from providers.vendors.docker.files import (
    SNAPSHOT_REPOSITORY,
    commit,
    file_errors,
    read_file,
    remove_snapshots,
    sandbox_path,
    via_exec,
    write_file,
    write_tree,
)
from providers.vendors.docker.image import (
    DEFAULT_IMAGE,
    SCRATCH_DIR,
    default_host,
    ensure_image,
    ensure_sized_archive,
    ensure_sized_image,
    image_id,
)
from providers.vendors.docker.registry import SizedImage, registry_dir

log = logging.getLogger(__name__)

MIB = 1024 * 1024
SIGKILL_EXIT = 128 + 9
RUNTIME_REFUSED_EXIT = 126  # docker's exit code when the runtime could not start the exec'd command
_DYING_HINTS = (b"stopped state", b"not running", b" not found: not found", b"container not found")
DEFAULT_CAP_DROP: tuple[str, ...] = ("ALL",)
"""Every capability: the sandbox's user is not root. An image whose tool calls need root's (a package manager
chowning files) takes `cap_drop=NET_RAW,NET_BIND_SERVICE,MKNOD,AUDIT_WRITE,SETFCAP,SETPCAP,SYS_CHROOT`."""
DEFAULT_SCRATCH_MB = 256  # the writable tmpfs; its pages count against the sandbox's memory limit too
_NAME_BAD = re.compile(r"[^a-zA-Z0-9_.-]+")


@dataclass(frozen=True, slots=True)
class DockerOptions:
    """The provider's options (`--provider-option key=value`, or JSON to the engine)."""

    host: str = declare("")  # docker host URL; "" = DOCKER_HOST, else unix:///var/run/docker.sock
    image: str = declare(DEFAULT_IMAGE)  # default image; the stampede busybox one is built when missing
    max_connections: int = declare(4096)  # connection pool limit (aiohttp's default, 100, would queue silently)
    api_timeout_s: float = declare(120.0)  # bound on create / terminate / list calls to the daemon
    command: tuple[str, ...] = declare(())  # the container's process; () = sleep <lifetime>; "{lifetime}" expands
    init: bool = declare(True)  # docker-init as PID 1: reaps orphans of tool calls, dies on SIGTERM
    network_mode: str = declare("bridge")  # used only when the spec asks for network
    cap_drop: tuple[str, ...] = declare(DEFAULT_CAP_DROP)  # () keeps Docker's default set
    read_only: bool = declare(True)  # the root filesystem; `scratch` is the one writable place
    scratch: str = declare(SCRATCH_DIR)  # a tmpfs of `scratch_mb` (writes past it fail: "No space left on device")
    scratch_mb: int = declare(DEFAULT_SCRATCH_MB)
    user: str = declare("")  # uid[:gid] the sandbox runs as; "" = the image's USER (stampede's image: 1000)
    runtime: str = declare("")  # OCI runtime (e.g. "crun"); "" = the daemon's default
    pull: bool = declare(False)  # pull a missing non-stampede image (needs registry access)
    name_containers: bool = declare(True)  # name containers stampede-<run>-<rollout> (readable `docker ps`)
    kill_on_exec_timeout: bool = declare(True)  # kill a timed-out command's processes (local daemon only)
    sized_images: bool = declare(
        True
    )  # a spec with image_size_mb runs from stampede-size:<mb>[-<image>], built offline
    shared_base_mb: int = declare(0)  # of each sized image, MB in one layer all sized images share (a common base)
    image_scale: float = declare(1.0)  # sized images weigh image_size_mb x this (0.05: swe-task's 4 GB as 205 MB)
    image_registry: str = declare("")  # the offline registry's folder; "" = STAMPEDE_IMAGE_REGISTRY or ~/.cache

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> DockerOptions:
        """Typed options from plain JSON-ish values; one clear `ProviderConfigError` line on bad input."""
        parsed = cls(**declared_values(cls, parse_options("docker", options, DOCKER_OPTIONS)))
        if parsed.max_connections < 1 or parsed.api_timeout_s <= 0 or parsed.scratch_mb < 1:
            raise ProviderConfigError("docker provider: max_connections, api_timeout_s and scratch_mb must be positive")
        if parsed.shared_base_mb < 0:
            raise ProviderConfigError("docker provider: shared_base_mb must be 0 or more")
        if not 0 < parsed.image_scale <= 1:
            raise ProviderConfigError(f"docker provider: image_scale must be in (0, 1] (got {parsed.image_scale:g})")
        if not parsed.scratch.startswith("/"):
            raise ProviderConfigError(f"docker provider: scratch must be an absolute path (got {parsed.scratch!r})")
        return parsed


DOCKER_OPTIONS: dict[str, Option] = {
    **declared_options(DockerOptions),
    # The harness passes the run's token (--token, STAMPEDE_TOKEN) to every provider; the daemon takes none.
    "token": text(),
}
"""The docker provider's options: `DockerOptions`' fields, each typed as its default; any other key is refused."""


@dataclass(slots=True)
class _Sandbox:
    """Mutable per-sandbox state, kept in `SandboxRef.handle` (the ref itself is frozen)."""

    container_id: str
    memory_mb: int = 0
    owner: Mapping[str, str] = field(default_factory=dict)  # its owner labels, which its snapshots carry too
    pending: tuple[dict[str, Any], str] | None = None  # (config, name): created once its image is pulled
    workdir: str | None = None  # where relative file paths lead (asked once)
    terminated: bool = False
    started: bool = False
    execs_ok: int = 0  # a container that dies before any command ran was never usable
    oom_kills: int = 0  # last cgroup oom_kill count seen, so an old OOM is not blamed on a new exit

    def death(self, state: Mapping[str, Any], phase: Phase) -> ProviderError:
        """This container found gone or stopped: OOM, or died before or after it ran a command."""
        return container_death(state, phase, memory_mb=self.memory_mb, ran_a_command=self.execs_ok > 0)


@dataclass(slots=True)
class _DaemonFacts:
    version: str = ""
    api_version: str = ""
    runtime: str = ""  # the OCI runtime sandboxes get: runc vs crun moves lifecycles/s by ~1.5x
    storage: str = ""
    ncpu: int = 0
    local_pids: bool = False  # the daemon's containers' pids are visible in our /proc (same host)
    fetched: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class DockerProvider(Provider):
    """Sandboxes as containers on a local (or `DOCKER_HOST`) Docker Engine."""

    name: ClassVar[str] = "docker"

    def __init__(self, options: DockerOptions | None = None) -> None:
        self.options = options or DockerOptions()
        self.host = self.options.host or default_host()
        if not self.host.startswith(("unix://", "tcp://", "http://", "https://")):
            raise ProviderConfigError(f"docker provider: unsupported docker host {self.host!r} (unix:// or tcp://)")
        self._docker: aiodocker.Docker | None = None
        self._connector: aiohttp.BaseConnector | None = None
        self._facts = _DaemonFacts()
        self._images_ok: set[str] = set()
        self._image_locks: dict[str, asyncio.Lock] = {}

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> DockerProvider:
        return cls(DockerOptions.parse(options))

    # -- connection ---------------------------------------------------------------------------------------

    def _client(self) -> aiodocker.Docker:
        """The aiodocker client, made on first use (aiohttp connectors belong to the running loop)."""
        if self._docker is None:
            raise_open_files_limit(self.options.max_connections + 1024)
            limit = self.options.max_connections
            if self.host.startswith("unix://"):
                self._connector = aiohttp.UnixConnector(self.host[len("unix://") :], limit=limit, limit_per_host=0)
                url = "http://localhost"
            else:
                tls = self.host.startswith("https://") or os.environ.get("DOCKER_TLS_VERIFY") == "1"
                try:  # DOCKER_CERT_PATH's ca/cert/key, as the docker CLI does
                    ssl = aiodocker.Docker._docker_machine_ssl_context() if tls else None
                except (ValueError, OSError) as exc:
                    raise ProviderError(FailureKind.AUTH, f"docker TLS: {exc}") from None
                self._connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ssl=ssl or False)
                url = re.sub(r"^(tcp|http|https)://", "https://" if tls else "http://", self.host)
            self._docker = aiodocker.Docker(url=url, connector=self._connector)
        return self._docker

    async def _daemon_facts(self) -> _DaemonFacts:
        """Version, API version and CPU count, asked once (also pins the API version for every call)."""
        facts = self._facts
        if facts.fetched:
            return facts
        async with facts.lock:
            if facts.fetched:
                return facts
            docker = self._client()
            version = await docker.version()
            info = await docker.system.info()
            facts.version = str(version.get("Version", ""))
            facts.api_version = str(version.get("ApiVersion", ""))
            facts.runtime = self.options.runtime or str(info.get("DefaultRuntime", ""))
            facts.storage = str(info.get("Driver", ""))
            facts.ncpu = int(info.get("NCPU") or 0)
            facts.local_pids = self.host.startswith("unix://") and os.path.isdir("/proc/1")
            facts.fetched = True
        return facts

    async def preflight(self) -> None:
        """Fail fast: no daemon -> `transport`; the image missing and not buildable -> `image`."""
        try:
            async with asyncio.timeout(15):
                await self._daemon_facts()
        except (DockerError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            if isinstance(exc, DockerError) and exc.status != TRANSPORT_STATUS:
                raise ProviderError(FailureKind.TRANSPORT, f"docker daemon at {self.host} answered {exc}") from None
            raise ProviderError(
                FailureKind.TRANSPORT,
                f"docker daemon unreachable at {self.host} (scripts/ensure-docker starts one)",
            ) from None
        await self._obtain_image(self.options.image)

    def versions(self) -> Mapping[str, str]:
        versions = {"aiodocker": aiodocker.__version__}
        if self._facts.fetched:
            versions["docker-daemon"] = self._facts.version
            versions["docker-api"] = self._facts.api_version
            versions["docker-runtime"] = self._facts.runtime  # not versions, but they move every number
            versions["docker-storage"] = self._facts.storage
        return versions

    async def aclose(self) -> None:
        if self._docker is not None:
            await self._docker.close()
            self._docker = None
        if self._connector is not None:
            await self._connector.close()
            self._connector = None

    # -- images ---------------------------------------------------------------------------------------------

    async def _obtain_image(self, image: str) -> None:
        """Make sure the daemon has `image`: build the stampede busybox one, pull others if allowed."""
        if image in self._images_ok:
            return
        lock = self._image_locks.setdefault(image, asyncio.Lock())
        async with lock:
            if image in self._images_ok:
                return
            docker = self._client()
            try:
                if _is_stampede_image(image):
                    await ensure_image(docker, image)
                elif await image_id(docker, image) is None:
                    if not self.options.pull:
                        raise ProviderError(
                            FailureKind.IMAGE,
                            f"image {image} is not in the docker daemon (pull it, or set option pull=true)",
                        )
                    await docker.images.pull(image)
            except DockerError as exc:
                kind = FailureKind.TRANSPORT if exc.status == TRANSPORT_STATUS else FailureKind.IMAGE
                raise ProviderError(kind, f"image {image}: {short_error(exc)}") from None
            except (aiohttp.ClientError, OSError) as exc:
                raise ProviderError(FailureKind.TRANSPORT, f"image {image}: {short_error(exc)}") from None
            self._images_ok.add(image)

    # -- lifecycle ------------------------------------------------------------------------------------------

    def container_config(self, spec: SandboxSpec, ncpu: int = 0) -> dict[str, Any]:
        """The `POST /containers/create` body for a spec: the sandbox's isolation and limits live here."""
        lifetime = str(max(1, math.ceil(spec.lifetime_s)))
        command = [part.replace("{lifetime}", lifetime) for part in self.options.command] or ["sleep", lifetime]
        cpu = min(spec.cpu, ncpu) if ncpu else spec.cpu  # the daemon refuses more cpus than the host has
        memory = int(spec.memory_mb) * MIB
        host_config: dict[str, Any] = {
            "NetworkMode": self.options.network_mode if spec.network else "none",
            "Privileged": False,
            "CapAdd": None,
            "CapDrop": list(self.options.cap_drop),
            "SecurityOpt": ["no-new-privileges"],
            "ReadonlyRootfs": self.options.read_only,
            "Tmpfs": {self.options.scratch: f"rw,nosuid,nodev,size={self.options.scratch_mb}m,mode=1777"},
            "NanoCpus": max(int(cpu * 1e9), 10_000_000),
            "Memory": memory,
            "MemorySwap": memory,  # equal to Memory: no swap beyond the limit
            "PidsLimit": int(spec.pids_limit),
            "Init": self.options.init,
            "AutoRemove": False,  # keep the exit state: OOMKilled and the exit code classify a death
            "RestartPolicy": {"Name": "no"},
            "Binds": None,
            "Mounts": [],
            "Devices": [],
            "LogConfig": {"Type": "none", "Config": {}},  # the keep-alive prints nothing; exec output is ours
        }
        if self.options.runtime:
            host_config["Runtime"] = self.options.runtime
        return {
            "Image": spec.image or self.options.image,
            "Entrypoint": command,  # an image's own ENTRYPOINT/CMD would not keep the sandbox alive
            "Cmd": None,
            "Labels": {str(k): str(v) for k, v in spec.tags().items()},
            "Env": [f"{k}={v}" for k, v in spec.env.items()],
            **({"User": self.options.user} if self.options.user else {}),
            "Tty": False,
            "OpenStdin": False,
            "AttachStdin": False,
            "AttachStdout": False,
            "AttachStderr": False,
            "NetworkDisabled": not spec.network,
            "StopTimeout": 2,
            "HostConfig": host_config,
        }

    def image_for(self, spec: SandboxSpec) -> str:
        """The image a spec runs from: a plan's declared size maps to the offline sized image of that size (named
        after the plan's image, so two images of one size are two images), unless `sized_images=false`."""
        if spec.image and (
            SizedImage.parse(spec.image) is not None or spec.image.startswith(f"{SNAPSHOT_REPOSITORY}:")
        ):
            return spec.image  # a fork's spec keeps the plan's size: its image is still the snapshot
        if spec.image_size_mb is not None and self.options.sized_images:
            size = spec.image_size_mb * self.options.image_scale
            return SizedImage.of(size, spec.image or "", min(self.options.shared_base_mb, size)).tag
        return spec.image or self.options.image

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        """Post the container; returns once the daemon gave it an id (start happens in `wait_ready`).

        A sized image the daemon lacks is pulled (loaded from the offline registry) in `wait_ready`, as a vendor
        pulls while the sandbox boots: the container is then created there, under the name returned here."""
        image = self.image_for(spec)
        name = _container_name(spec) if self.options.name_containers else None
        timed_out = f"docker did not acknowledge the create within {self.options.api_timeout_s:g}s"
        with daemon_errors("create", Phase.CREATE, FailureKind.CREATE_ERROR, timed_out):
            async with asyncio.timeout(self.options.api_timeout_s):
                facts = await self._daemon_facts()
                if _is_stampede_image(image) and image not in self._images_ok:
                    await self._obtain_image(image)
                config = self.container_config(spec, facts.ncpu)
                config["Image"] = image
                owner = {k: v for k, v in spec.tags().items() if k in (RUN_LABEL, ENGINE_LABEL, INVOCATION_LABEL)}
                if self._pulled_in_readiness(image) and not await self._present(image):
                    name = name or f"stampede-{secrets.token_hex(8)}"  # the id the container will have
                    box = _Sandbox(name, memory_mb=int(spec.memory_mb), owner=owner, pending=(config, name))
                    return self._ref(spec, box, image, name, pull=True)
                docker = self._client()
                try:
                    container = await docker.containers.create(config, name=name)
                except DockerError as exc:
                    if not (exc.status == 404 and "image" in exc.message.lower()):
                        raise
                    self._images_ok.discard(image)  # removed behind our back, or never there
                    if self._pulled_in_readiness(image):  # pulled again
                        name = name or f"stampede-{secrets.token_hex(8)}"
                        box = _Sandbox(name, memory_mb=int(spec.memory_mb), owner=owner, pending=(config, name))
                        return self._ref(spec, box, image, name, pull=True)
                    await self._obtain_image(image)
                    container = await docker.containers.create(config, name=name)
        return self._ref(spec, _Sandbox(container.id, memory_mb=int(spec.memory_mb), owner=owner), image, name)

    def _ref(self, spec: SandboxSpec, box: _Sandbox, image: str, name: str | None, pull: bool = False) -> SandboxRef:
        meta = {"image": image, "name": name or "", **({"pull": True} if pull else {})}
        return SandboxRef(box.container_id, self.name, spec.run_id, spec.rollout_id, handle=box, meta=meta)

    def _pulled_in_readiness(self, image: str) -> bool:
        """A sized image (loaded from the offline registry), or any other but stampede's own with `pull=true`."""
        return SizedImage.parse(image) is not None or (self.options.pull and not _is_stampede_image(image))

    async def _present(self, image: str) -> bool:
        """Whether the daemon holds `image` (remembered once seen: a warm node stays warm)."""
        if image in self._images_ok:
            return True
        if await image_id(self._client(), image) is None:
            return False
        self._images_ok.add(image)
        return True

    async def _archive(self, image: str) -> None:
        """The registry's archive of a sized image, written the first time it is needed (never part of a pull)."""
        sized = SizedImage.parse(image)
        assert sized is not None
        async with self._image_locks.setdefault(f"archive:{image}", asyncio.Lock()):
            await asyncio.to_thread(ensure_sized_archive, sized, registry_dir(self.options.image_registry))

    async def _pull(self, image: str) -> None:
        """Load a sized image from the offline registry, or pull another from its registry; once however many
        sandboxes wait on it (a node's pull)."""
        lock = self._image_locks.setdefault(image, asyncio.Lock())
        async with lock:
            if image in self._images_ok:
                return
            sized = SizedImage.parse(image)
            if sized is not None:
                await ensure_sized_image(self._client(), sized, registry_dir(self.options.image_registry))
            else:
                await self._client().images.pull(image)
            self._images_ok.add(image)

    async def _create_pulled(self, box: _Sandbox, image: str) -> float:
        """A pending sandbox's pull then its container; returns the seconds the pull took (waiting on one too)."""
        assert box.pending is not None
        config, name = box.pending
        try:
            if image not in self._images_ok and SizedImage.parse(image) is not None:
                await self._archive(image)
            started = time.monotonic()
            await self._pull(image)
        except ProviderError as exc:
            raise ProviderError(exc.kind, f"pull {image}: {exc.args[0]}", phase=Phase.PULL) from None
        except DockerError as exc:
            kind = FailureKind.TRANSPORT if exc.status == TRANSPORT_STATUS else FailureKind.IMAGE
            raise ProviderError(kind, f"pull {image}: {short_error(exc)}", phase=Phase.PULL) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderError(FailureKind.TRANSPORT, f"pull {image}: {short_error(exc)}", phase=Phase.PULL) from None
        pulled_s = time.monotonic() - started
        if box.terminated:
            raise ProviderError(FailureKind.DIED_BEFORE_READY, "terminated while its image was pulled")
        with daemon_errors("create", Phase.CREATE, FailureKind.CREATE_ERROR, "create timed out"):
            container = await self._client().containers.create(config, name=name)
        box.pending = None
        if box.terminated:  # terminated while the create was in flight: it finds nothing to remove
            await self._client().containers.container(container.id).delete(force=True, v=True)
            raise ProviderError(FailureKind.DIED_BEFORE_READY, "terminated while it was created")
        return pulled_s

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation | None:
        """Start the container (once) and return when it is running; a death or OOM is classified. A sandbox
        whose image was absent is first pulled and created: `pull_s` says how long the pull took."""
        box = _box(ref)
        container = self._client().containers.container(box.container_id)
        pulled: ReadyObservation | None = None
        with daemon_errors(
            "start", Phase.READY, FailureKind.READY_TIMEOUT, f"container not running within {timeout:g}s"
        ):
            try:
                async with asyncio.timeout(timeout):
                    if box.pending is not None:
                        pulled = ReadyObservation(pull_s=await self._create_pulled(box, str(ref.meta["image"])))
                    await self._started(box, container)
                    return pulled
            except TimeoutError:
                if box.pending is None or ref.meta["image"] in self._images_ok:  # the pull was over
                    raise
                raise ProviderError(
                    FailureKind.READY_TIMEOUT, f"image not pulled within {timeout:g}s", phase=Phase.PULL
                ) from None

    async def _started(self, box: _Sandbox, container: Any) -> None:
        """Start the container (once) and return when it is running."""
        if not box.started:
            await container.start()
            box.started = True
        delay = 0.01
        while True:
            state = (await container.show())["State"]
            if _running(state):
                return
            if state.get("Status") == "created" and not box.started:
                await container.start()  # a ref from list_owned: never started
                box.started = True
                continue
            if state.get("Status") in {"exited", "dead", "removing"}:
                raise box.death(state, Phase.READY)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        """Run one command through the exec API: demultiplexed stdout/stderr, exit code from exec inspect."""
        return await self._exec(ref, argv, timeout)

    async def exec_stream(
        self, ref: SandboxRef, argv: Sequence[str], timeout: float, on_output: Callable[[str], None] | None = None
    ) -> StreamedExec:
        """The exec API's attach stream read as it comes: each frame (stdout or stderr) to `on_output`, and the
        times from this call to the first and the last output byte."""
        clock = OutputClock()  # the times only: the text is decoded here, a character split across two frames
        decoder = codecs.getincrementaldecoder("utf-8")("replace")

        def arrived(data: bytes) -> None:
            clock.seen(data)
            if on_output is not None and (text := decoder.decode(data)):
                on_output(text)

        return clock.done(await self._exec(ref, argv, timeout, arrived))

    async def _exec(
        self, ref: SandboxRef, argv: Sequence[str], timeout: float, on_frame: Callable[[bytes], None] | None = None
    ) -> ExecResult:
        if not argv:
            raise ProviderError(FailureKind.INVALID_REQUEST, "exec needs a command (empty argv)")
        box = _box(ref)
        docker = self._client()
        container = docker.containers.container(box.container_id)
        execution: Exec | None = None
        try:
            async with asyncio.timeout(timeout):
                execution = await container.exec([str(part) for part in argv], stdout=True, stderr=True)
                stdout, stderr = await collect_output(execution, on_frame)
                exit_code = await exec_exit_code(execution)
        except TimeoutError:
            if execution is not None and self.options.kill_on_exec_timeout:
                await self._kill_exec(execution, box)
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"{argv[0]} still running after {timeout:g}s") from None
        except DockerError as exc:
            raise await self._exec_failure(exc, box) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderError(FailureKind.TRANSPORT, f"exec: {short_error(exc)}") from None
        if exit_code in (SIGKILL_EXIT, RUNTIME_REFUSED_EXIT):
            # SIGKILL: the OOM killer, or the container dying under the command. 126: the runtime could not
            # start the command; a dying container is one reason ("cannot exec in a stopped state").
            dying = exit_code == SIGKILL_EXIT or any(hint in stdout for hint in _DYING_HINTS)
            await self._check_killed(box, count_ooms=exit_code == SIGKILL_EXIT, patient=dying)
        box.execs_ok += 1
        return ExecResult(exit_code, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))

    async def terminate(self, ref: SandboxRef) -> None:
        """Force-remove (SIGKILL, then delete with its anonymous volumes); returns once it is gone.

        Gone already is success. When another removal of it is in progress (the engine's sweep racing a
        cancelled rollout's own terminate), wait for that one rather than report a sandbox gone early.
        """
        if isinstance(ref.handle, _Sandbox):
            ref.handle.terminated = True  # a pull in flight creates nothing after this
        container = self._client().containers.container(ref.sandbox_id)
        timed_out = f"docker did not answer the remove within {self.options.api_timeout_s:g}s"
        with daemon_errors("remove", Phase.TERMINATE, FailureKind.TRANSPORT, timed_out):
            async with asyncio.timeout(self.options.api_timeout_s):
                failures, pause = 0, 0.02
                while True:
                    try:
                        await container.delete(force=True, v=True)
                        return
                    except DockerError as exc:
                        if exc.status == 404:
                            return
                        if not (exc.status == 409 and "in progress" in exc.message):
                            failures += 1
                            if exc.status < 500 or failures == 3:
                                raise
                    await asyncio.sleep(pause)  # in progress elsewhere, or "device or resource busy"
                    pause = min(pause * 2, 0.5)

    async def _path(self, ref: SandboxRef, path: str) -> str:
        """An absolute path; a relative one is the sandbox's working directory's (the image's WORKDIR: stampede's
        is /tmp, the scratch), as the contract says of a vendor's files API."""
        if path.startswith("/"):
            return sandbox_path(path)
        box = _box(ref)
        if box.workdir is None:
            async with file_errors("inspect", ref.sandbox_id, self.options.api_timeout_s):
                config = (await self._client().containers.container(box.container_id).show())["Config"]
            box.workdir = str(config.get("WorkingDir") or "/")
        return sandbox_path(posixpath.join(box.workdir, path))

    async def upload_file(self, ref: SandboxRef, path: str, data: bytes) -> None:
        """The archive API, or the command's streams where it cannot reach (`files.py`)."""
        path = await self._path(ref, path)
        streams = via_exec(path, read_only=self.options.read_only, write=True, tmpfs=(self.options.scratch,))
        async with file_errors("upload", path, self.options.api_timeout_s):
            await write_file(self._client().containers.container(ref.sandbox_id), path, data, streams=streams)

    async def download_file(self, ref: SandboxRef, path: str) -> bytes:
        path = await self._path(ref, path)
        streams = via_exec(path, read_only=self.options.read_only, write=False, tmpfs=(self.options.scratch,))
        async with file_errors("download", path, self.options.api_timeout_s):
            return await read_file(self._client().containers.container(ref.sandbox_id), path, streams=streams)

    async def snapshot(self, ref: SandboxRef) -> str:
        """`commit` (an image `create` takes as `SandboxSpec.image`); a read-only root leaves nothing to commit."""
        if self.options.read_only:
            raise UnsupportedFeature(self.name, "snapshot with read_only=true (the scratch tmpfs is never committed)")
        async with file_errors("commit", ref.sandbox_id, self.options.api_timeout_s):
            owner = _box(ref).owner or {RUN_LABEL: ref.run_id}  # (the container's own labels are kept too)
            return await commit(self._client().containers.container(ref.sandbox_id), owner)

    async def upload_files(self, ref: SandboxRef, files: Mapping[str, bytes]) -> None:
        """A file tree in one tar: one archive-API call, plus one `tar -x` fed on stdin for the paths only a
        command reaches (the scratch tmpfs, a read-only root), instead of a call per file."""
        paths = {await self._path(ref, path): data for path, data in files.items()}
        tmpfs = (self.options.scratch,)
        by_streams: dict[bool, dict[str, bytes]] = {False: {}, True: {}}
        for path, data in paths.items():
            by_streams[via_exec(path, read_only=self.options.read_only, write=True, tmpfs=tmpfs)][path] = data
        container = self._client().containers.container(ref.sandbox_id)
        async with file_errors("upload", f"{len(paths)} files", self.options.api_timeout_s):
            for streams, tree in by_streams.items():
                await write_tree(container, tree, streams=streams)

    async def start_process(self, ref: SandboxRef, argv: Sequence[str]) -> str:
        """A detached exec (the exec API's `Detach`): the handle is its exec id, which `process_exit` inspects."""
        if not argv:
            raise ProviderError(FailureKind.INVALID_REQUEST, "start_process needs a command (empty argv)")
        box = _box(ref)
        container = self._client().containers.container(box.container_id)
        timed_out = f"docker did not start the process within {self.options.api_timeout_s:g}s"
        try:
            async with asyncio.timeout(self.options.api_timeout_s):
                execution = await container.exec([str(part) for part in argv], stdout=False, stderr=False)
                await execution.start(detach=True)
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, timed_out) from None
        except DockerError as exc:
            raise await self._exec_failure(exc, box) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderError(FailureKind.TRANSPORT, f"start process: {short_error(exc)}") from None
        return str(execution.id)

    async def process_exit(self, ref: SandboxRef, handle: str) -> int | None:
        """Exec inspect: None while it runs, else its exit code; a sandbox found dead is a death, not an exit."""
        box = _box(ref)
        timed_out = f"docker did not answer the exec inspect within {self.options.api_timeout_s:g}s"
        try:
            async with asyncio.timeout(self.options.api_timeout_s):
                info = await Exec(self._client(), handle).inspect()
                if info.get("Running") or info.get("ExitCode") is None:
                    state = (await self._client().containers.container(box.container_id).show())["State"]
                    if not _running(state):
                        raise box.death(state, Phase.EXEC)
                    return None
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, timed_out) from None
        except DockerError as exc:
            raise await self._exec_failure(exc, box) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderError(FailureKind.TRANSPORT, f"process exit: {short_error(exc)}") from None
        code = int(info["ExitCode"])
        if code == SIGKILL_EXIT:  # the OOM killer, or the sandbox dying under it: not the process's own exit
            await self._check_killed(box, count_ooms=True, patient=True)
        return code

    def capabilities(self) -> frozenset[Capability]:
        """Everything but snapshot and fork under a read-only root: there the scratch tmpfs is all that can be
        written, and a commit never holds a tmpfs."""
        offered = super().capabilities()
        if self.options.read_only:
            offered -= {Capability.SNAPSHOT, Capability.FORK}
        return offered

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        """Every container (running or not) carrying this run's label (and the engine's, when given)."""
        with daemon_errors("list", None, FailureKind.TRANSPORT, "docker did not answer the container list"):
            async with asyncio.timeout(self.options.api_timeout_s):
                containers = await self._client().containers.list(
                    all=True, filters={"label": [f"{k}={v}" for k, v in owner_labels(run_id, engine).items()]}
                )
        refs = []
        for container in containers:
            labels = (
                container["Labels"] if "Labels" in container else None
            ) or {}  # aiodocker containers have no .get()
            refs.append(
                SandboxRef(
                    sandbox_id=container.id,
                    provider=self.name,
                    run_id=run_id,
                    rollout_id=str(labels.get(ROLLOUT_LABEL, "")),
                    meta={key.lower(): container[key] for key in ("State", "Image", "Names") if key in container},
                )
            )
        return refs

    async def list_all_owned(self) -> list[SandboxRef]:
        """Every container (running or not) carrying a run label, whatever the run: Docker filters by key alone."""
        with daemon_errors("list", None, FailureKind.TRANSPORT, "docker did not answer the container list"):
            async with asyncio.timeout(self.options.api_timeout_s):
                containers = await self._client().containers.list(all=True, filters={"label": [RUN_LABEL]})
        refs = []
        for container in containers:
            labels = (container["Labels"] if "Labels" in container else None) or {}
            refs.append(SandboxRef(sandbox_id=container.id, provider=self.name, run_id=str(labels.get(RUN_LABEL, ""))))
        return refs

    async def cleanup(self, run_id: str, engine: str | None = None) -> int:
        """Remove every container of the run; list again, since creates in flight may land meanwhile."""
        reaped: set[str] = set()
        for _ in range(3):
            # a container whose removal is still in progress is listed again: count each one once
            refs = [ref for ref in await self.list_owned(run_id, engine) if ref.sandbox_id not in reaped]
            if not refs:
                break
            results = await asyncio.gather(*(self.terminate(ref) for ref in refs), return_exceptions=True)
            reaped.update(ref.sandbox_id for ref, result in zip(refs, results, strict=True) if result is None)
        await self._remove_snapshots([f"{key}={value}" for key, value in owner_labels(run_id, engine).items()])
        return len(reaped)

    async def cleanup_all_owned(self) -> int:
        """Every tagged container, then every snapshot image stampede committed."""
        reaped = await super().cleanup_all_owned()
        await self._remove_snapshots([RUN_LABEL])
        return reaped

    async def _remove_snapshots(self, labels: Sequence[str]) -> None:
        """The snapshots (committed images) of what was reaped: an image is a leak too."""
        with daemon_errors("remove snapshots", None, FailureKind.TRANSPORT, "docker did not answer the image list"):
            async with asyncio.timeout(self.options.api_timeout_s):
                await remove_snapshots(self._client(), labels)

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        """Our raises are already `ProviderError`s; this covers raw SDK errors and the caller's timeouts."""
        if isinstance(exc, DockerError):
            return docker_error_kind(exc, phase)
        if isinstance(exc, aiohttp.ClientError):
            return FailureKind.TRANSPORT
        if isinstance(exc, TimeoutError) and phase is Phase.CREATE:
            return FailureKind.CREATE_ERROR  # the daemon was slower than the caller's create budget
        return classify_common(exc, phase)

    # -- exec helpers ---------------------------------------------------------------------------------------

    async def _exec_failure(self, exc: DockerError, box: _Sandbox) -> ProviderError:
        """Why an exec call failed: a gone or stopped container is a death (or OOM), the rest exec_error."""
        if exc.status == TRANSPORT_STATUS:
            return ProviderError(FailureKind.TRANSPORT, f"exec: {short_error(exc)}")
        if exc.status == 404 or "not running" in exc.message:
            try:
                state = (await self._client().containers.container(box.container_id).show())["State"]
            except DockerError as again:
                if again.status == TRANSPORT_STATUS:
                    return ProviderError(FailureKind.TRANSPORT, f"exec: {short_error(again)}")
                state = {"Status": "removed"}
            return box.death(state, Phase.EXEC)
        return ProviderError(docker_error_kind(exc, Phase.EXEC), f"exec: {short_error(exc)}")

    async def _check_killed(self, box: _Sandbox, *, count_ooms: bool, patient: bool) -> None:
        """Raise `oom` / `died_*` when an exec's end was the container dying or the OOM killer."""
        container = self._client().containers.container(box.container_id)
        # The exec can end a moment before the daemon marks a dying container exited: look a few times. On a
        # loaded machine the daemon can take longer than that; on a local daemon the host then says whether the
        # container's main process has exited.
        gone = False
        for pause in (0.0, 0.05, 0.1, 0.2) if patient else (0.0,):
            await asyncio.sleep(pause)
            try:
                state = (await container.show())["State"]
            except DockerError as exc:
                if exc.status == 404:
                    raise box.death({"Status": "removed"}, Phase.EXEC) from None
                return  # the command's exit code stands; the next call will tell what happened
            if not _running(state):
                raise box.death(state, Phase.EXEC)
            gone = self._facts.local_pids and main_process_gone(state)
            if gone:
                continue  # the daemon has yet to record how it ended (an OOM kill, say): look again
            kills = await self._oom_kills(state, box) if count_ooms else None
            if kills is not None and kills > box.oom_kills:
                box.oom_kills = kills
                raise ProviderError(
                    FailureKind.OOM, f"command killed by the OOM killer (memory limit {box.memory_mb} MB)"
                )
        if gone:  # the daemon still says running, but the host says its main process has exited
            raise box.death({"Status": "stopped (its main process is gone)"}, Phase.EXEC)

    async def _oom_kills(self, state: Mapping[str, Any], box: _Sandbox) -> int | None:
        """The container's cgroup oom_kill count: read on the host when local, else from inside."""
        pid = int(state.get("Pid") or 0)
        if self._facts.local_pids and pid:
            count = host_oom_kills(pid)
            if count is not None:
                return count
        try:
            container = self._client().containers.container(box.container_id)
            probe = await container.exec(
                ["cat", "/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"],
                stdout=True,
                stderr=False,
            )
            async with asyncio.timeout(10):
                out, _ = await collect_output(probe)
        except (DockerError, aiohttp.ClientError, OSError, TimeoutError):
            return None
        return parse_oom_kills(out.decode("utf-8", "replace"))

    async def _kill_exec(self, execution: Exec, box: _Sandbox) -> None:
        """Best effort: SIGKILL the timed-out command and its children (Docker has no exec-kill call)."""
        if not self._facts.local_pids:
            return  # a remote daemon: the processes go with the sandbox at terminate
        try:
            async with asyncio.timeout(5):
                pid = int((await execution.inspect()).get("Pid") or 0)
        except (DockerError, aiohttp.ClientError, OSError, TimeoutError):
            return
        if pid:
            await asyncio.to_thread(kill_tree, pid, box.container_id)


# -- small helpers ------------------------------------------------------------------------------------------


def _box(ref: SandboxRef) -> _Sandbox:
    if isinstance(ref.handle, _Sandbox):
        return ref.handle
    # a ref from list_owned or another process: no local state yet
    box = _Sandbox(ref.sandbox_id)
    object.__setattr__(ref, "handle", box)
    return box


def _running(state: Mapping[str, Any]) -> bool:
    return bool(state.get("Running")) and not state.get("Restarting") and not state.get("Paused")


def _is_stampede_image(image: str) -> bool:
    return image == DEFAULT_IMAGE or image.rpartition(":")[0] == DEFAULT_IMAGE.rpartition(":")[0]


def _container_name(spec: SandboxSpec) -> str:
    name = _NAME_BAD.sub("-", f"stampede-{spec.run_id}-{spec.rollout_id}").strip("-.")
    return name[:200]
