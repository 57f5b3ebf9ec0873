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

This module is the lifecycle (create, start, exec, remove, list) on one daemon client; its options are
`options.py`, a sandbox's state here `sandbox.py`, the daemon's errors on the taxonomy `errors.py`, a command's
streams, exit code and end (death, OOM count, kill) `commands.py`, the images the daemon holds and their pulls
`pulls.py`, image building `image.py`, files and snapshots (archive API, commit) `files.py`.
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
from providers.output_clock import OutputClock
from providers.vendors.docker.commands import (
    SIGKILL_EXIT,
    check_exit,
    check_killed,
    collect_output,
    exec_exit_code,
    exec_failure,
    kill_exec,
)
from providers.vendors.docker.errors import (
    TRANSPORT_STATUS,
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
    default_host,
)
from providers.vendors.docker.options import DockerOptions
from providers.vendors.docker.pulls import DaemonImages, is_stampede_image
from providers.vendors.docker.registry import SizedImage
from providers.vendors.docker.sandbox import Sandbox, box_of, container_name, running

log = logging.getLogger(__name__)

MIB = 1024 * 1024


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
        self._images = DaemonImages(self._client, may_pull=self.options.pull, registry=self.options.image_registry)

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
        await self._images.obtain(self.options.image)

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
        name = container_name(spec) if self.options.name_containers else None
        timed_out = f"docker did not acknowledge the create within {self.options.api_timeout_s:g}s"
        with daemon_errors("create", Phase.CREATE, FailureKind.CREATE_ERROR, timed_out):
            async with asyncio.timeout(self.options.api_timeout_s):
                facts = await self._daemon_facts()
                if is_stampede_image(image) and image not in self._images.ok:
                    await self._images.obtain(image)
                config = self.container_config(spec, facts.ncpu)
                config["Image"] = image
                owner = {k: v for k, v in spec.tags().items() if k in (RUN_LABEL, ENGINE_LABEL, INVOCATION_LABEL)}
                if self._images.pulled_in_readiness(image) and not await self._images.present(image):
                    name = name or f"stampede-{secrets.token_hex(8)}"  # the id the container will have
                    box = Sandbox(name, memory_mb=int(spec.memory_mb), owner=owner, pending=(config, name))
                    return self._ref(spec, box, image, name, pull=True)
                docker = self._client()
                try:
                    container = await docker.containers.create(config, name=name)
                except DockerError as exc:
                    if not (exc.status == 404 and "image" in exc.message.lower()):
                        raise
                    self._images.ok.discard(image)  # removed behind our back, or never there
                    if self._images.pulled_in_readiness(image):  # pulled again
                        name = name or f"stampede-{secrets.token_hex(8)}"
                        box = Sandbox(name, memory_mb=int(spec.memory_mb), owner=owner, pending=(config, name))
                        return self._ref(spec, box, image, name, pull=True)
                    await self._images.obtain(image)
                    container = await docker.containers.create(config, name=name)
        return self._ref(spec, Sandbox(container.id, memory_mb=int(spec.memory_mb), owner=owner), image, name)

    def _ref(self, spec: SandboxSpec, box: Sandbox, image: str, name: str | None, pull: bool = False) -> SandboxRef:
        meta = {"image": image, "name": name or "", **({"pull": True} if pull else {})}
        return SandboxRef(box.container_id, self.name, spec.run_id, spec.rollout_id, handle=box, meta=meta)

    async def _create_pulled(self, box: Sandbox, image: str) -> float:
        """A pending sandbox's pull then its container; returns the seconds the pull took (waiting on one too)."""
        assert box.pending is not None
        config, name = box.pending
        pulled_s = await self._images.pull(image)
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
        box = box_of(ref)
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
                if box.pending is None or ref.meta["image"] in self._images.ok:  # the pull was over
                    raise
                raise ProviderError(
                    FailureKind.READY_TIMEOUT, f"image not pulled within {timeout:g}s", phase=Phase.PULL
                ) from None

    async def _started(self, box: Sandbox, container: Any) -> None:
        """Start the container (once) and return when it is running."""
        if not box.started:
            await container.start()
            box.started = True
        delay = 0.01
        while True:
            state = (await container.show())["State"]
            if running(state):
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
        # one decoder per stream: the daemon reads the two pipes apart, so their frames interleave in either order
        decoders = {stream: codecs.getincrementaldecoder("utf-8")("replace") for stream in (1, 2)}

        def arrived(stream: int, data: bytes) -> None:
            clock.seen(data)
            if on_output is not None and (text := decoders[stream].decode(data)):
                on_output(text)

        return clock.done(await self._exec(ref, argv, timeout, arrived))

    async def _exec(
        self,
        ref: SandboxRef,
        argv: Sequence[str],
        timeout: float,
        on_frame: Callable[[int, bytes], None] | None = None,
    ) -> ExecResult:
        if not argv:
            raise ProviderError(FailureKind.INVALID_REQUEST, "exec needs a command (empty argv)")
        box = box_of(ref)
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
                await kill_exec(execution, box, local_pids=self._facts.local_pids)
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"{argv[0]} still running after {timeout:g}s") from None
        except DockerError as exc:
            raise await exec_failure(self._client(), exc, box) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderError(FailureKind.TRANSPORT, f"exec: {short_error(exc)}") from None
        await check_exit(self._client(), box, exit_code, stdout, local_pids=self._facts.local_pids)
        box.execs_ok += 1
        return ExecResult(exit_code, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))

    async def terminate(self, ref: SandboxRef) -> None:
        """Force-remove (SIGKILL, then delete with its anonymous volumes); returns once it is gone.

        Gone already is success. When another removal of it is in progress (the engine's sweep racing a
        cancelled rollout's own terminate), wait for that one rather than report a sandbox gone early.
        """
        if isinstance(ref.handle, Sandbox):
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
        box = box_of(ref)
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
            owner = box_of(ref).owner or {RUN_LABEL: ref.run_id}  # (the container's own labels are kept too)
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
        box = box_of(ref)
        container = self._client().containers.container(box.container_id)
        timed_out = f"docker did not start the process within {self.options.api_timeout_s:g}s"
        try:
            async with asyncio.timeout(self.options.api_timeout_s):
                execution = await container.exec([str(part) for part in argv], stdout=False, stderr=False)
                await execution.start(detach=True)
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, timed_out) from None
        except DockerError as exc:
            raise await exec_failure(self._client(), exc, box) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderError(FailureKind.TRANSPORT, f"start process: {short_error(exc)}") from None
        return str(execution.id)

    async def process_exit(self, ref: SandboxRef, handle: str) -> int | None:
        """Exec inspect: None while it runs, else its exit code; a sandbox found dead is a death, not an exit."""
        box = box_of(ref)
        timed_out = f"docker did not answer the exec inspect within {self.options.api_timeout_s:g}s"
        try:
            async with asyncio.timeout(self.options.api_timeout_s):
                info = await Exec(self._client(), handle).inspect()
                if info.get("Running") or info.get("ExitCode") is None:
                    state = (await self._client().containers.container(box.container_id).show())["State"]
                    if not running(state):
                        raise box.death(state, Phase.EXEC)
                    return None
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, timed_out) from None
        except DockerError as exc:
            raise await exec_failure(self._client(), exc, box) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderError(FailureKind.TRANSPORT, f"process exit: {short_error(exc)}") from None
        code = int(info["ExitCode"])
        if code == SIGKILL_EXIT:  # the OOM killer, or the sandbox dying under it: not the process's own exit
            await check_killed(self._client(), box, local_pids=self._facts.local_pids, count_ooms=True, patient=True)
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
