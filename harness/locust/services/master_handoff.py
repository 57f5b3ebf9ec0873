"""What a master hands its workers about each run, on Locust's parsed options.

Locust ships every custom option to the workers with each spawn message, so the master writes there what a
worker cannot read from its own command line: the run id, and the embedded vendor's address, token, options,
time scale and profile. This module is the one place that writes or reads those attributes after `init`; the
rest of the Locust side passes typed settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.errors import UsageError
from harness.locust.services.vendor_lifecycle import VendorFacts
from harness.locust.settings import RunSettings
from harness.locust.web_form import typed


@dataclass(frozen=True, slots=True)
class HandedRun:
    """A worker's run as its master started it."""

    settings: RunSettings
    vendor: VendorFacts
    run_id: str


def publish_vendor(options: Any, settings: RunSettings, vendor: VendorFacts) -> None:
    """Master (or local runner): the run talks to the embedded vendor; workers receive where it is."""
    if options is None:
        return
    options.base_url, options.token = settings.base_url, settings.token
    # Not options.time_scale: the web form posts that field as typed ("" when blank), and Locust converts a
    # posted value with the type of the one it replaces (float("") fails).
    options.vendor_time_scale = vendor.time_scale
    options.profile_label = vendor.profile  # a custom attribute: workers receive it too
    options.provider_option = [f"{key}={value}" for key, value in settings.provider_options.items()]


def forget_vendor(options: Any) -> None:
    """The embedded vendor stopped: workers no longer take its time scale."""
    if options is not None:
        options.vendor_time_scale = None


def publish_run_id(options: Any, run_id: str) -> None:
    if options is not None:
        options.run_id = run_id


def received(options: Any) -> HandedRun:
    """Worker, at each run's start: the settings, vendor and run id its master sent (the worker's own re-parse:
    a web-form test may have changed them since the last run)."""
    settings = RunSettings.from_options(typed(options))  # a web UI master sends numbers as text
    vendor = VendorFacts(
        getattr(options, "vendor_time_scale", None) or settings.time_scale, getattr(options, "profile_label", "") or ""
    )
    run_id = getattr(options, "run_id", None)
    if not run_id:
        raise UsageError("worker got no run id from the master")
    return HandedRun(settings, vendor, str(run_id))
