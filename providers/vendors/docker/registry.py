"""The docker provider's offline registry: images of a given size, kept as `docker save` archives and loaded.

No registry is reachable here, so a "pull" is played by what a pull costs the daemon locally: an image absent from
the daemon is made present by `docker load` (`POST /images/load`) of an archive in the registry folder. The
archives are written here, without a daemon, in the `docker save` layout (manifest.json, a config, one tar per
layer), so an image can have several layers and images can share them: the daemon stores a layer once, by its
content, and a load skips the layers it already holds, as a pull from a registry does.

A sized image is named `stampede-size:<mb>[-s<shared>][-<name>]`: a base layer (the caller's rootfs, the busybox
one for the provider), then `<shared>` MB of incompressible bytes every image with the same `<shared>` has alike,
then the rest of `<mb>` of the image's own. The bytes are drawn from a seeded generator, so an archive built twice,
anywhere, is the same image (the same id) and the shared layer the same layer.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import platform
import random
import re
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import aiodocker
from yarl import URL

from providers.base import FailureKind, ProviderError

SIZED_REPOSITORY = "stampede-size"
REGISTRY_ENV = "STAMPEDE_IMAGE_REGISTRY"  # where the archives live; default ~/.cache/stampede/images
DATA_DIR = "opt/stampede-image"  # where a data layer's bytes sit in the image
MAX_SIZE_MB = 100_000
_MIB = 1024 * 1024
_CHUNK = 4 * _MIB
_MTIME = 1_700_000_000
_CREATED = "2023-11-14T22:13:20Z"
_TAG = re.compile(rf"^{SIZED_REPOSITORY}:(\d+)(?:-s(\d+))?(?:-([a-z0-9][a-z0-9.]*))?$")
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True, slots=True)
class SizedImage:
    """An image of `size_mb` MB of data: `shared_mb` of it in a layer images share, the rest its own."""

    size_mb: int
    shared_mb: int = 0
    name: str = ""  # tells apart two images of one size (each its own bytes)

    def __post_init__(self) -> None:
        if not 0 <= self.shared_mb <= self.size_mb <= MAX_SIZE_MB:
            raise ProviderError(
                FailureKind.INVALID_REQUEST,
                f"a sized image needs 0 <= shared ({self.shared_mb} MB) <= size ({self.size_mb} MB) <= {MAX_SIZE_MB}",
            )

    @classmethod
    def of(cls, size_mb: float, name: str = "", shared_mb: float = 0) -> SizedImage:
        """The sized image a plan's `image` and `image_size_mb` stand for (sizes rounded up to whole MB)."""
        slug = re.sub(r"[^a-z0-9]+", ".", name.lower()).strip(".")[:60]
        return cls(math.ceil(size_mb), math.ceil(shared_mb), slug)

    @classmethod
    def parse(cls, tag: str) -> SizedImage | None:
        """The sized image a tag names, or None when it is not one."""
        match = _TAG.match(tag)
        if match is None:
            return None
        return cls(int(match[1]), int(match[2] or 0), match[3] or "")

    @property
    def tag(self) -> str:
        shared = f"-s{self.shared_mb}" if self.shared_mb else ""
        return f"{SIZED_REPOSITORY}:{self.size_mb}{shared}" + (f"-{self.name}" if self.name else "")

    def data_layers(self) -> list[tuple[str, int, str]]:
        """(file name, MB, seed) of each data layer, the shared one first: its seed names no image."""
        layers = []
        if self.shared_mb:
            layers.append((f"shared-{self.shared_mb}", self.shared_mb, f"shared:{self.shared_mb}"))
        own = self.size_mb - self.shared_mb
        if own:
            layers.append((f"own-{own}", own, f"own:{self.tag}"))
        return layers


def registry_dir(path: str = "") -> Path:
    """The folder of archives: `path`, else `STAMPEDE_IMAGE_REGISTRY`, else ~/.cache/stampede/images."""
    chosen = path or os.environ.get(REGISTRY_ENV) or str(Path.home() / ".cache" / "stampede" / "images")
    return Path(chosen)


def archive_path(directory: Path, tag: str) -> Path:
    return directory / (re.sub(r"[^A-Za-z0-9_.-]+", "_", tag) + ".tar")


class _Hashing:
    """A file that hashes what is written through it (a layer's diff id is the sha256 of its tar)."""

    def __init__(self, target: Any) -> None:
        self.target, self.sha, self.written = target, hashlib.sha256(), 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.target.write(view)
        self.written += len(view)
        return len(view)

    def tell(self) -> int:
        return self.written


def _data_layer(target: Any, file_name: str, size_mb: int, seed: str) -> str:
    """Write a layer tar holding `size_mb` MB of seeded random bytes at DATA_DIR/<file_name>.bin; its diff id."""
    hashing = _Hashing(target)
    with tarfile.open(fileobj=cast(IO[bytes], hashing), mode="w", format=tarfile.GNU_FORMAT) as tar:
        for folder in ("opt", DATA_DIR):
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, _MTIME
            tar.addfile(info)
        info = tarfile.TarInfo(f"{DATA_DIR}/{file_name}.bin")
        info.size, info.mode, info.mtime = size_mb * _MIB, 0o644, _MTIME
        tar.addfile(info, _SeededBytes(seed, size_mb * _MIB))
    return "sha256:" + hashing.sha.hexdigest()


class _SeededBytes(io.RawIOBase):
    """`size` incompressible bytes from a seeded generator, read in chunks (never held whole)."""

    def __init__(self, seed: str, size: int) -> None:
        self.random, self.left = random.Random(seed), size

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left, _CHUNK)
        self.left -= size
        return self.random.randbytes(size)


def write_image_archive(
    path: Path, image: SizedImage, base_layer: bytes, config: Mapping[str, Any], history: str = "stampede base"
) -> Path:
    """Write `image` as a `docker save` archive at `path` (atomically: a reader sees it whole or not at all)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as work:
        layers: list[tuple[str, Path]] = []  # (diff id, layer tar)
        base = Path(work) / "base.tar"
        base.write_bytes(base_layer)
        layers.append(("sha256:" + hashlib.sha256(base_layer).hexdigest(), base))
        for file_name, size_mb, seed in image.data_layers():
            layer = Path(work) / f"{file_name}.tar"
            with layer.open("wb") as handle:
                layers.append((_data_layer(handle, file_name, size_mb, seed), layer))
        steps = [history] + [f"{size} MB of data ({name})" for name, size, _ in image.data_layers()]
        config_json = json.dumps(
            {
                "architecture": _ARCH.get(platform.machine(), platform.machine()),
                "os": "linux",
                "created": _CREATED,
                "config": dict(config),
                "rootfs": {"type": "layers", "diff_ids": [diff for diff, _ in layers]},
                "history": [{"created": _CREATED, "created_by": step} for step in steps],
            },
            sort_keys=True,
        ).encode()
        config_name = hashlib.sha256(config_json).hexdigest() + ".json"
        layer_names = [f"{diff.removeprefix('sha256:')}/layer.tar" for diff, _ in layers]
        manifest = json.dumps([{"Config": config_name, "RepoTags": [image.tag], "Layers": layer_names}]).encode()
        partial = Path(work) / "image.tar"
        with tarfile.open(partial, mode="w", format=tarfile.GNU_FORMAT) as archive:
            for name, data in (("manifest.json", manifest), (config_name, config_json)):
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(data), _MTIME
                archive.addfile(info, io.BytesIO(data))
            for name, (_, layer) in zip(layer_names, layers, strict=True):
                info = archive.gettarinfo(str(layer), arcname=name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = _MTIME, 0, 0, "", ""
                with layer.open("rb") as handle:
                    archive.addfile(info, handle)
        os.replace(partial, path)
    return path


async def load_archive(docker: aiodocker.Docker, path: Path) -> None:
    """`docker load` the archive at `path` (streamed from disk); the daemon's refusal as a `ProviderError(image)`."""
    with path.open("rb") as handle:
        async with docker._query(
            URL("images/load").with_query(quiet="1"),
            method="POST",
            data=handle,
            headers={"Content-Type": "application/x-tar"},
            timeout=docker._resolve_long_running_timeout(None),
        ) as response:
            body = await response.read()
    for line in body.decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if "error" in message or "errorDetail" in message:
            raise ProviderError(FailureKind.IMAGE, f"docker load {path.name}: {message.get('error', message)}")


__all__: Sequence[str] = (
    "REGISTRY_ENV",
    "SIZED_REPOSITORY",
    "SizedImage",
    "archive_path",
    "load_archive",
    "registry_dir",
    "write_image_archive",
)
