"""The embedded simulated vendor's lifecycle in one Locust process: started for a run's settings, kept across
web-form tests while what it simulates is unchanged, restarted otherwise, stopped when the process quits.

A local runner or a master holds it (workers reach it at the address their master hands them). It never reads
Locust's options: it is given typed settings and hands back the settings a run uses to reach it.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any

from foundation.open_files import processes_for_open_files
from foundation.phase_marks import mark
from harness.errors import UsageError
from harness.locust.run_folder import write_vendor_loop, write_vendor_truth
from harness.locust.settings import RunSettings
from harness.locust.vendor_process import Meanwhile, ShardedVendor, account_wide_note
from providers import LOCAL_VENDORS

log = logging.getLogger("stampede")


@dataclasses.dataclass(frozen=True, slots=True)
class VendorFacts:
    """What a run records about the vendor it talks to: its clock's time scale and its profile ("" for none)."""

    time_scale: float | None
    profile: str

    @classmethod
    def of(cls, settings: RunSettings) -> VendorFacts:
        """Before (or without) an embedded vendor: what the settings say."""
        return cls(settings.time_scale, settings.profile if settings.embedded_vendor else "")


def _simulates(settings: RunSettings) -> tuple[Any, ...]:
    """What the embedded vendor is started for: a change in any of these restarts it."""
    overrides = tuple(sorted(settings.profile_overrides.items()))
    return settings.provider, settings.profile, settings.seed, settings.time_scale, overrides, settings.burst_pacing


class VendorLifecycle:
    """The embedded vendor (its shards), if this process runs one."""

    def __init__(self) -> None:
        self.vendor: ShardedVendor | None = None
        self._started_for: tuple[Any, ...] | None = None

    def serve(
        self, settings: RunSettings, peak_users: int | None, meanwhile: Meanwhile | None = None
    ) -> tuple[RunSettings, VendorFacts]:
        """The vendor these settings ask for, and the settings pointed at it: none (stopped) for a real vendor;
        kept while it simulates the same; otherwise (re)started (UsageError: it could not start). `meanwhile` runs
        while a vendor starts (not at all when none does)."""
        if not settings.embedded_vendor:
            self.stop()
            return settings, VendorFacts(settings.time_scale, "")
        if not self.serves(settings):
            self.stop()
            self.start(settings, peak_users, meanwhile)
        return self.bind(settings)

    def serves(self, settings: RunSettings) -> bool:
        """A vendor runs and simulates what these settings ask for (a web-form test keeps it)."""
        return self.vendor is not None and self._started_for == _simulates(settings)

    def start(self, settings: RunSettings, peak_users: int | None, meanwhile: Meanwhile | None = None) -> None:
        """Start the vendor these settings simulate, in as many shards as `peak_users` in flight need; `meanwhile`
        runs while they start."""
        module = LOCAL_VENDORS.get(settings.provider)
        if module is None:
            raise UsageError(f"provider {settings.provider!r} has no simulated vendor for --local")
        shards = _shards(settings, peak_users)
        try:
            self.vendor = ShardedVendor.start(
                module,
                settings.profile,
                shards=shards,
                seed=settings.seed,
                time_scale=settings.time_scale,
                overrides=settings.profile_overrides,
                meanwhile=meanwhile,
                burst_pacing=settings.burst_pacing,
            )
        except UsageError as exc:
            raise UsageError(f"local vendor: {exc}") from None
        if shards > 1:
            note = account_wide_note(self.vendor)
            print(
                f"stampede: the simulated vendor holds one connection per rollout in flight: {shards} vendor "
                f"processes, creates spread round-robin" + (f"; {note}" if note else ""),
                file=sys.stderr,
                flush=True,
            )
        self._started_for = _simulates(settings)

    def stop(self) -> None:
        if self.vendor is not None:
            self.vendor.stop()
            self.vendor = None
            self._started_for = None
            mark("vendor: process gone")

    def bind(self, settings: RunSettings) -> tuple[RunSettings, VendorFacts]:
        """These settings pointed at the running vendor (its address, token and options), and its facts."""
        assert self.vendor is not None
        extra = {key: str(value) for key, value in self.vendor.provider_options.items()}
        bound = dataclasses.replace(
            settings,
            base_url=self.vendor.url,
            token=self.vendor.token,
            provider_options={**extra, **settings.provider_options},
        )
        return bound, VendorFacts(self.vendor.time_scale, self.vendor.profile)

    def endpoint(self) -> tuple[str, str] | None:
        """The running vendor's address and token (a web form posting them back is not a user's --base-url)."""
        return (self.vendor.url, self.vendor.token) if self.vendor is not None else None

    def pids(self) -> tuple[int | None, list[int]]:
        """The vendor's process, and each shard's when it runs more than one (run.json's `processes`)."""
        if self.vendor is None:
            return None, []
        shards = [shard.process.pid for shard in self.vendor.shards] if len(self.vendor.shards) > 1 else []
        return self.vendor.process.pid, shards

    def save_truth(self, run_dir: Path, run_id: str) -> None:
        """The simulated vendor's own record of each sandbox, beside the run's rows (a cross-check)."""
        if self.vendor is None:
            return
        try:
            sandboxes, loops = self.vendor.truth()
        except Exception as exc:  # the run's own data matters more than this cross-check
            log.warning("could not read the simulated vendor's own records: %s", exc)
            return
        write_vendor_truth(run_dir, run_id, sandboxes)
        write_vendor_loop(run_dir, loops)


def _shards(settings: RunSettings, peak_users: int | None) -> int:
    """Vendor processes this run's peak needs (one connection per rollout in flight, each process held to its
    open-file limit). Only the stub client routes each sandbox to its shard; other providers get one."""
    if settings.provider != "stub":
        return 1
    return processes_for_open_files(peak_users if peak_users is not None else settings.max_inflight)
