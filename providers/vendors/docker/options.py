"""The `docker` provider's options: what `--provider-option key=value` (or the engine's JSON) may set, typed
and bounded once; the hardening defaults the benches compare against (`DEFAULT_CAP_DROP`, `DEFAULT_SCRATCH_MB`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from providers.base import ProviderConfigError
from providers.options import Option, declare, declared_options, declared_values, parse_options, text
from providers.vendors.docker.image import DEFAULT_IMAGE, SCRATCH_DIR

DEFAULT_CAP_DROP: tuple[str, ...] = ("ALL",)
"""Every capability: the sandbox's user is not root. An image whose tool calls need root's (a package manager
chowning files) takes `cap_drop=NET_RAW,NET_BIND_SERVICE,MKNOD,AUDIT_WRITE,SETFCAP,SETPCAP,SYS_CHROOT`."""
DEFAULT_SCRATCH_MB = 256  # the writable tmpfs; its pages count against the sandbox's memory limit too


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
