"""This Locust process's engine, where its users' rollouts run (a local runner, or each worker).

Started at `init` beside the embedded vendor, told every stage change, configured at each run's start, polled
for the live view on a local runner (a master hears from its workers instead), drained at each run's end, and
shut down when the process quits. The socket protocol itself is `harness.locust.engine_client`.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent

from foundation.phase_marks import mark
from harness.errors import UsageError
from harness.locust.engine_client import EngineClient, EngineError
from harness.locust.provider_check import provider_options
from harness.locust.run_state import RunState, Stage
from harness.locust.services.vendor_lifecycle import VendorFacts
from harness.locust.settings import RunSettings
from harness.wire.messages import EngineConfig, StageUpdate

log = logging.getLogger("stampede")
LOCAL_POLL_INTERVAL_S = 0.5


@dataclasses.dataclass(frozen=True, slots=True)
class RunIdentity:
    """Who writes a run's rows, and where: what the engine is configured with besides the settings."""

    run_id: str
    worker: str
    scenario: str
    out_dir: Path  # the run folder's parent (a worker: its spool, shipped to the master)


def engine_config(
    settings: RunSettings, vendor: VendorFacts, identity: RunIdentity, options: Any = None
) -> EngineConfig:
    """What the engine is told at a run's start: provider and its options, plan, trainer, on the vendor's clock;
    from this process's Locust `options`, its own `stampede run --otlp-endpoint` (a worker's engine exports its
    traces itself; `locust -f` has no such option: off)."""
    time_scale = vendor.time_scale or 1.0
    return EngineConfig(
        run_id=identity.run_id,
        worker=identity.worker,
        out_dir=str(identity.out_dir.resolve()),
        provider=settings.provider,
        provider_options=provider_options(settings),  # as the check before the run built the adapter
        profile=vendor.profile,
        scenario=identity.scenario,
        plan=dataclasses.replace(settings.plan, time_scale=time_scale).to_dict(),
        secrets=[secret for secret in (settings.token,) if secret],
        trainer={**settings.trainer, "time_scale": time_scale} if settings.trainer else None,
        otlp_endpoint=str(getattr(options, "otlp_endpoint", "") or ""),
    )


class EngineLink:
    """The engine process and what this side does with it; `client` is None until it started (or if it failed)."""

    def __init__(self) -> None:
        self.client: EngineClient | None = None
        self._starting: gevent.Greenlet | None = None
        self._poller: gevent.Greenlet | None = None

    @property
    def alive(self) -> bool:
        return self.client is not None and self.client.alive

    @property
    def pid(self) -> int | None:
        return self.client.process.pid if self.client is not None else None

    def spawn(self, worker: str, provider: str) -> None:
        """Start the engine in the background (it takes most of a second to import its world)."""
        self._starting = gevent.spawn(EngineClient.spawn, worker, preload=provider)

    @property
    def starting(self) -> bool:
        """The engine's process was started and has not said it is ready (or failed) yet."""
        return self._starting is not None and not self._starting.ready()

    def wait_started(self, state: RunState) -> BaseException | None:
        """Until the engine started: from then on it hears every stage change. Returns why it did not start."""
        starting, self._starting = self._starting, None
        if starting is None:
            return None
        starting.join()
        if not starting.successful():
            return starting.exception or EngineError("engine did not start")
        self.client = starting.value
        state.stage_listeners.append(self._tell_stage)
        return None

    def _tell_stage(self, stage: Stage) -> None:
        if self.client is not None and self.client.alive:
            self.client.stage(StageUpdate(stage.name, stage.target_users))

    def configure(self, config: EngineConfig) -> dict[str, str]:
        """Configure the run; returns the provider's SDK versions. A refusal is the user's to fix (UsageError)."""
        assert self.client is not None
        try:
            reply = self.client.configure(config)
        except EngineError as exc:
            raise UsageError(str(exc)) from None
        return dict(reply.get("versions", {}))

    def start_polling(self, state: RunState) -> None:
        """Local runs: the live view straight from the engine."""
        self._poller = gevent.spawn(self._poll, state)

    def stop_polling(self) -> None:
        if self._poller is not None:
            self._poller.kill(block=False)
            self._poller = None

    def refresh_live(self, state: RunState) -> None:
        """A local run's live view brought up to date now, not on the next poll: the run's last progress line is
        read from it, and a burst can end within one poll interval of its last rollouts (nothing without polling)."""
        if self._poller is not None:
            self._poll_once(state)

    def _poll(self, state: RunState) -> None:
        while True:
            self._poll_once(state)
            gevent.sleep(LOCAL_POLL_INTERVAL_S)

    def _poll_once(self, state: RunState) -> None:
        if self.client is not None and self.client.alive:
            try:
                state.live.update("local", self.client.stats(timeout=5), dict(state.dropped))
                state.note_change()
            except EngineError:
                pass

    def drain(self, meanwhile: Callable[[], None] | None = None) -> dict[str, Any] | None:
        """End the run in the engine: its summary, or None if there is no engine or the drain failed. `meanwhile`
        runs here while the engine drains (this process's CPU beside the engine's), and runs with no engine too."""
        if self.client is None or not self.client.alive:
            if meanwhile is not None:
                meanwhile()
            return None
        draining = gevent.spawn(self._drain, self.client)
        if meanwhile is not None:
            gevent.sleep(0)  # the drain is asked for before `meanwhile` holds the loop
            meanwhile()
        return draining.get()

    @staticmethod
    def _drain(client: EngineClient) -> dict[str, Any] | None:
        try:
            return client.drain()
        except EngineError as exc:
            log.error("engine drain failed: %s", exc)
            return None

    def abort(self) -> None:
        """A second Ctrl-C: the engine (SIGUSR2) stops waiting for cancelled rollouts and bounds its drain."""
        if self.client is not None and self.client.alive:
            try:
                self.client.process.send_signal(signal.SIGUSR2)
            except OSError:
                pass

    def shutdown(self) -> None:
        if self.client is not None:
            self.client.shutdown()
            self.client = None
            mark("engine: process gone")
