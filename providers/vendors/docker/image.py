"""The offline sandbox image for the docker provider: a static busybox rootfs, imported into the daemon.

Images cannot be pulled here (no registry), so stampede makes its own: Debian's `busybox-static` gives one
self-contained binary; a rootfs tar with it, its applet symlinks and a minimal /etc is built in memory and
imported with `POST /images/create?fromSrc=-` (what `docker import` does; aiodocker's `import_image` posts
to `images/load`, the `docker save` format, so the raw endpoint is used). About 1 MB, built in well under
a second. Users with registry access name any image instead (`image` option / `SandboxSpec.image`).

The image runs as an unprivileged user (`sandbox`, uid/gid 1000) whose home and working directory is /tmp,
the one writable place once the provider mounts the root filesystem read-only with a size-capped tmpfs there.
Tag 2 is that image; tag 1 ran as root.

`stampede docker image` is `main()`.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError
from yarl import URL

from foundation.cli_help import DefaultsHelpFormatter
from providers.base import FailureKind, ProviderError
from providers.vendors.docker.registry import SizedImage, archive_path, load_archive, registry_dir, write_image_archive

DEFAULT_IMAGE = "stampede/busybox:2"
SANDBOX_UID = 1000  # the image's USER: not root, no capabilities once the provider drops them
SCRATCH_DIR = "/tmp"  # the user's home and working directory: the provider's writable tmpfs
BUSYBOX_PATH = "/bin/busybox"
BUSYBOX_ENV = "STAMPEDE_BUSYBOX"  # another static busybox, for machines that are not Debian
IMAGE_LABEL = "stampede-image"
IMPORT_CHANGES: tuple[str, ...] = (
    'CMD ["/bin/sh"]',
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    f"ENV HOME={SCRATCH_DIR}",
    f"USER {SANDBOX_UID}:{SANDBOX_UID}",
    f"WORKDIR {SCRATCH_DIR}",
    f"LABEL {IMAGE_LABEL}=busybox",
)
_MTIME = 1_700_000_000  # fixed: the same busybox gives the same tar bytes
_DIRS: tuple[tuple[str, int], ...] = (
    ("bin", 0o755),
    ("sbin", 0o755),
    ("usr", 0o755),
    ("usr/bin", 0o755),
    ("usr/sbin", 0o755),
    ("usr/local", 0o755),
    ("usr/local/bin", 0o755),
    ("etc", 0o755),
    ("dev", 0o755),
    ("proc", 0o755),
    ("sys", 0o755),
    ("run", 0o755),
    ("var", 0o755),
    ("home", 0o755),
    ("root", 0o700),
    ("tmp", 0o1777),
    ("var/tmp", 0o1777),
)
_FILES: tuple[tuple[str, str], ...] = (
    (
        "etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\n"
        f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:{SCRATCH_DIR}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    ),
    ("etc/group", f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n"),
    ("etc/os-release", 'NAME="stampede busybox"\nID=stampede-busybox\n'),
)


@dataclass(frozen=True, slots=True)
class ImageResult:
    """What `ensure_image` found or made."""

    tag: str
    image_id: str
    built: bool


def default_host() -> str:
    """Where the daemon is: `DOCKER_HOST`, else the local socket (the docker CLI's default)."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def busybox_path() -> str:
    return os.environ.get(BUSYBOX_ENV) or BUSYBOX_PATH


def _has_interpreter(data: bytes) -> bool:
    """True for a dynamically linked ELF (a PT_INTERP program header): it would not run in an empty rootfs."""
    if data[:4] != b"\x7fELF":
        raise ProviderError(FailureKind.IMAGE, "busybox is not an ELF binary")
    is64, little = data[4] == 2, data[5] == 1
    end = "<" if little else ">"
    if is64:
        (phoff,) = struct.unpack_from(end + "Q", data, 0x20)
        phentsize, phnum = struct.unpack_from(end + "HH", data, 0x36)
    else:
        (phoff,) = struct.unpack_from(end + "I", data, 0x1C)
        phentsize, phnum = struct.unpack_from(end + "HH", data, 0x2A)
    for index in range(phnum):
        (p_type,) = struct.unpack_from(end + "I", data, phoff + index * phentsize)
        if p_type == 3:  # PT_INTERP
            return True
    return False


def read_static_busybox(path: str | None = None) -> bytes:
    """The busybox binary, checked to be static; one clear `image` error when it is missing or dynamic."""
    path = path or busybox_path()
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        raise ProviderError(
            FailureKind.IMAGE,
            f"{path} not found: the offline image needs a static busybox (apt-get install busybox-static)",
        ) from None
    if _has_interpreter(data):
        raise ProviderError(
            FailureKind.IMAGE,
            f"{path} is dynamically linked: install Debian's busybox-static (not busybox)",
        )
    return data


def applet_paths(path: str | None = None) -> list[str]:
    """Where each applet lives (`busybox --list-full`: `bin/sh`, `usr/bin/awk`, ...)."""
    path = path or busybox_path()
    try:
        listing = subprocess.run([path, "--list-full"], capture_output=True, text=True, check=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProviderError(FailureKind.IMAGE, f"cannot list busybox applets with {path}: {exc}") from None
    return sorted({line.strip().lstrip("/") for line in listing.splitlines() if line.strip()})


def build_rootfs_tar(path: str | None = None) -> bytes:
    """A rootfs tar, in memory: /bin/busybox, a symlink per applet, /etc/passwd and the usual empty dirs."""
    binary = read_static_busybox(path)
    applets = applet_paths(path)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:

        def add(name: str, kind: bytes, mode: int, data: bytes = b"", target: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime, info.linkname = kind, mode, _MTIME, target
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)

        for name, mode in _DIRS:
            add(name, tarfile.DIRTYPE, mode)
        for name, text in _FILES:
            add(name, tarfile.REGTYPE, 0o644, text.encode())
        add("bin/busybox", tarfile.REGTYPE, 0o755, binary)
        for applet in applets:
            if applet != "bin/busybox":
                add(applet, tarfile.SYMTYPE, 0o777, target="/bin/busybox")
        if "usr/bin/env" not in applets:  # `#!/usr/bin/env sh` scripts
            add("usr/bin/env", tarfile.SYMTYPE, 0o777, target="/bin/busybox")
    return buffer.getvalue()


async def image_id(docker: aiodocker.Docker, tag: str) -> str | None:
    """The image's id, or None when the daemon does not have it."""
    try:
        info = await docker.images.inspect(tag)
    except DockerError as exc:
        if exc.status == 404:
            return None
        raise
    return str(info["Id"])


async def import_rootfs(docker: aiodocker.Docker, rootfs: bytes, tag: str) -> str:
    """`docker import`: POST the tar to /images/create?fromSrc=-; returns the new image id."""
    repo, _, version = tag.rpartition(":")
    if not repo or "/" in version:  # "name" or "host:port/name": no tag given
        repo, version = tag, "latest"
    query = [("fromSrc", "-"), ("repo", repo), ("tag", version)] + [("changes", c) for c in IMPORT_CHANGES]
    async with docker._query(
        URL("images/create").with_query(query),
        method="POST",
        data=rootfs,
        headers={"Content-Type": "application/x-tar"},
    ) as response:
        body = await response.read()
    image = ""
    for line in body.decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        message = json.loads(line)
        if "error" in message or "errorDetail" in message:
            raise ProviderError(FailureKind.IMAGE, f"docker import failed: {message.get('error', message)}")
        status = str(message.get("status", ""))
        if status.startswith("sha256:"):
            image = status
    return image or (await image_id(docker, tag)) or ""


async def ensure_image(docker: aiodocker.Docker, tag: str = DEFAULT_IMAGE) -> str:
    """The id of `tag`, building the busybox image under that tag when the daemon lacks it."""
    return (await ensure_image_result(docker, tag)).image_id


async def ensure_image_result(docker: aiodocker.Docker, tag: str = DEFAULT_IMAGE) -> ImageResult:
    existing = await image_id(docker, tag)
    if existing:
        return ImageResult(tag, existing, built=False)
    rootfs = await asyncio.to_thread(build_rootfs_tar)
    return ImageResult(tag, await import_rootfs(docker, rootfs, tag), built=True)


def image_config() -> dict[str, Any]:
    """The busybox image's config (what IMPORT_CHANGES says to `docker import`), for an image written as an archive."""
    return {
        "Cmd": ["/bin/sh"],
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", f"HOME={SCRATCH_DIR}"],
        "User": f"{SANDBOX_UID}:{SANDBOX_UID}",
        "WorkingDir": SCRATCH_DIR,
        "Labels": {IMAGE_LABEL: "busybox-sized"},
    }


@dataclass(frozen=True, slots=True)
class SizedLoad:
    """What `ensure_sized_image` did: `loaded` when the image was absent (a cold start's pull), and how long."""

    tag: str
    loaded: bool
    load_s: float  # the `docker load` alone (0 when present)
    build_s: float  # writing the archive into the registry, when it was not there yet (never part of a pull)


def ensure_sized_archive(image: SizedImage, directory: Path) -> tuple[Path, bool]:
    """The registry's archive of `image`, written (busybox rootfs + data layers) when missing; whether it was."""
    path = archive_path(directory, image.tag)
    if path.exists():
        return path, False
    return write_image_archive(path, image, build_rootfs_tar(), image_config(), history="stampede busybox"), True


async def ensure_sized_image(docker: aiodocker.Docker, image: SizedImage, directory: Path) -> SizedLoad:
    """Make `image` present in the daemon: `docker load` its archive (built first when missing) when absent."""
    if await image_id(docker, image.tag) is not None:
        return SizedLoad(image.tag, loaded=False, load_s=0.0, build_s=0.0)
    started = time.monotonic()
    path, built = await asyncio.to_thread(ensure_sized_archive, image, directory)
    build_s = time.monotonic() - started if built else 0.0
    started = time.monotonic()
    await load_archive(docker, path)
    return SizedLoad(image.tag, loaded=True, load_s=time.monotonic() - started, build_s=build_s)


async def _main(tag: str, host: str | None, rebuild: bool) -> ImageResult:
    docker = aiodocker.Docker(url=host or default_host())
    try:
        if rebuild:
            rootfs = await asyncio.to_thread(build_rootfs_tar)
            return ImageResult(tag, await import_rootfs(docker, rootfs, tag), built=True)
        return await ensure_image_result(docker, tag)
    finally:
        await docker.close()


def main(argv: list[str] | None = None) -> int:
    """`stampede docker image`: build (if missing) and import the offline busybox image; print id and tag."""
    parser = argparse.ArgumentParser(
        prog="stampede docker image",
        description="Build the offline busybox sandbox image (busybox-static) and import it into the daemon.",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--tag", default=DEFAULT_IMAGE, help=f"image tag (default {DEFAULT_IMAGE})")
    parser.add_argument("--host", default=None, help="docker host URL (default: DOCKER_HOST or the local socket)")
    parser.add_argument("--rebuild", action="store_true", help="import again even when the tag exists")
    sized = parser.add_argument_group("sized images (the offline registry's archives, stampede-size:<mb>)")
    sized.add_argument("--size-mb", type=int, default=None, help="write the archive of an image of this many MB")
    sized.add_argument(
        "--shared-mb", type=int, default=0, help="of it, MB in a layer every image with this value shares"
    )
    sized.add_argument(
        "--name", default="", help="tells two images of one size apart (each its own bytes; default: none)"
    )
    sized.add_argument(
        "--registry", default="", help="the archives' folder (default: STAMPEDE_IMAGE_REGISTRY or ~/.cache)"
    )
    sized.add_argument("--load", action="store_true", help="also load it into the daemon (a cold start then is warm)")
    args = parser.parse_args(argv)
    try:
        if args.size_mb is not None:
            return _sized_main(args)
        result = asyncio.run(_main(args.tag, args.host, args.rebuild))
    except ProviderError as exc:
        print(f"stampede docker image: {exc.args[0]}", file=sys.stderr)
        return 2
    except (DockerError, OSError, ValueError) as exc:
        where = args.host or default_host()
        status = getattr(exc, "status", None)
        if status is not None and status != 900:
            print(f"stampede docker image: the docker daemon refused: {exc}", file=sys.stderr)
        else:
            print(
                f"stampede docker image: docker daemon unreachable at {where} (scripts/ensure-docker starts one)",
                file=sys.stderr,
            )
        return 2
    verb = "built and imported" if result.built else "already present:"
    print(f"{verb} {result.tag} {result.image_id}")
    return 0


def _sized_main(args: argparse.Namespace) -> int:
    """`--size-mb`: the archive written into the registry (and loaded with `--load`); one line each."""
    image = SizedImage.of(args.size_mb, args.name, args.shared_mb)
    try:
        path, built = ensure_sized_archive(image, registry_dir(args.registry))
    except OSError as exc:
        print(f"stampede docker image: cannot write the archive: {exc}", file=sys.stderr)
        return 2
    print(f"{'wrote' if built else 'already present:'} {path} ({image.tag})")
    if args.load:

        async def load() -> SizedLoad:
            docker = aiodocker.Docker(url=args.host or default_host())
            try:
                return await ensure_sized_image(docker, image, registry_dir(args.registry))
            finally:
                await docker.close()

        loaded = asyncio.run(load())
        print(f"loaded {image.tag} in {loaded.load_s:.2f}s" if loaded.loaded else f"already loaded: {image.tag}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__: Sequence[str] = (
    "DEFAULT_IMAGE",
    "SANDBOX_UID",
    "SCRATCH_DIR",
    "ImageResult",
    "SizedLoad",
    "build_rootfs_tar",
    "default_host",
    "ensure_image",
    "ensure_image_result",
    "ensure_sized_archive",
    "ensure_sized_image",
    "image_config",
    "image_id",
    "import_rootfs",
    "main",
)
