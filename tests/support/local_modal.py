"""The local Modal control plane started on the test's own loop, with a real-SDK provider pointed at it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from providers.sim.modal.server import ModalSettings, RunningModal, start_modal
from providers.vendors.modal.provider import ModalProvider

TOKEN = "test-modal-token"


@contextlib.asynccontextmanager
async def local_modal(
    *overrides: str, profile: str = "ideal", time_scale: float | None = None, **options: str
) -> AsyncIterator[tuple[RunningModal, ModalProvider]]:
    """`overrides` are profile settings as "key=value"; `options` go to the provider as `--provider-option`s."""
    pairs = tuple(tuple(item.split("=", 1)) for item in overrides)
    server = await start_modal(ModalSettings(profile=profile, token=TOKEN, time_scale=time_scale, overrides=pairs))  # type: ignore[arg-type]
    provider = ModalProvider.from_options({"base_url": server.url, "token": TOKEN, **options})
    try:
        await provider.preflight()
        yield server, provider
    finally:
        await provider.aclose()
        await server.close()
