"""The images one docker daemon holds, as the `docker` provider sees them: stampede's busybox image built, a sized
image loaded from the offline registry (`registry.py`), another pulled when allowed; each once, however many
sandboxes wait on it (a node's pull). A sized or pulled image is pulled in readiness, as a vendor pulls while
the sandbox boots, so its seconds are the row's `pull_s`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiodocker
import aiohttp
from aiodocker.exceptions import DockerError

from providers.base import FailureKind, Phase, ProviderError
from providers.vendors.docker.errors import TRANSPORT_STATUS, short_error
from providers.vendors.docker.image import (
    DEFAULT_IMAGE,
    ensure_image,
    ensure_sized_archive,
    ensure_sized_image,
    image_id,
)
from providers.vendors.docker.registry import SizedImage, registry_dir


class DaemonImages:
    """What the daemon holds (remembered once seen: a warm node stays warm) and the one build or pull per image."""

    def __init__(self, client: Callable[[], aiodocker.Docker], *, may_pull: bool, registry: str) -> None:
        self._client = client  # the provider's: made on first use, in the running loop
        self._may_pull = may_pull  # option `pull`: pull a missing non-stampede image
        self._registry = registry  # option `image_registry`
        self.ok: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}

    async def obtain(self, image: str) -> None:
        """Make sure the daemon has `image`: build the stampede busybox one, pull others if allowed."""
        if image in self.ok:
            return
        lock = self._locks.setdefault(image, asyncio.Lock())
        async with lock:
            if image in self.ok:
                return
            docker = self._client()
            try:
                if is_stampede_image(image):
                    await ensure_image(docker, image)
                elif await image_id(docker, image) is None:
                    if not self._may_pull:
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
            self.ok.add(image)

    def pulled_in_readiness(self, image: str) -> bool:
        """A sized image (loaded from the offline registry), or any other but stampede's own with `pull=true`."""
        return SizedImage.parse(image) is not None or (self._may_pull and not is_stampede_image(image))

    async def present(self, image: str) -> bool:
        """Whether the daemon holds `image` (remembered once seen: a warm node stays warm)."""
        if image in self.ok:
            return True
        if await image_id(self._client(), image) is None:
            return False
        self.ok.add(image)
        return True

    async def _archive(self, image: str) -> None:
        """The registry's archive of a sized image, written the first time it is needed (never part of a pull)."""
        sized = SizedImage.parse(image)
        assert sized is not None
        async with self._locks.setdefault(f"archive:{image}", asyncio.Lock()):
            await asyncio.to_thread(ensure_sized_archive, sized, registry_dir(self._registry))

    async def _pull(self, image: str) -> None:
        """Load a sized image from the offline registry, or pull another from its registry; once however many
        sandboxes wait on it (a node's pull)."""
        lock = self._locks.setdefault(image, asyncio.Lock())
        async with lock:
            if image in self.ok:
                return
            sized = SizedImage.parse(image)
            if sized is not None:
                await ensure_sized_image(self._client(), sized, registry_dir(self._registry))
            else:
                await self._client().images.pull(image)
            self.ok.add(image)

    async def pull(self, image: str) -> float:
        """A pending sandbox's pull (an archive written first is not part of it): the seconds it took, waiting on
        another sandbox's pull of it too; any failure in the pull phase."""
        try:
            if image not in self.ok and SizedImage.parse(image) is not None:
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
        return time.monotonic() - started


def is_stampede_image(image: str) -> bool:
    """The stampede busybox image (any tag): built here, never pulled."""
    return image == DEFAULT_IMAGE or image.rpartition(":")[0] == DEFAULT_IMAGE.rpartition(":")[0]
