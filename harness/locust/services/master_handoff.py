"""What a master hands its workers about each run, on Locust's parsed options.

Locust ships every custom option to the workers with each spawn message, so the master writes there what a
worker cannot read from its own command line: the run id and scenario, and the embedded vendor's address, token,
options, time scale and profile. The scenario is checked, not taken: a worker loads its scenario's users and shape
from its own `--scenario` before any setting arrives, and a worker of another scenario would run its own users
(a `ramp` worker of a `burst` master kept starting rollouts after the burst, outside any stage). This module is the one place that writes or reads those attributes after `init`; the
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


def publish_run(options: Any, run_id: str, scenario: str) -> None:
    """Master: the run's id, and its scenario for each worker to check its own against."""
    if options is not None:
        options.run_id = run_id
        options.master_scenario = scenario  # a custom attribute: workers receive it too


def received(options: Any, own_scenario: str) -> HandedRun:
    """Worker, at each run's start: the settings, vendor and run id its master sent (the worker's own re-parse:
    a web-form test may have changed them since the last run); refused when the master runs another scenario."""
    master_scenario = getattr(options, "master_scenario", None)
    if master_scenario and master_scenario != own_scenario:
        raise UsageError(
            f"this worker loaded scenario {own_scenario!r} but its master runs {master_scenario!r}: start the worker "
            f"with --scenario {master_scenario} (a worker loads its scenario's users before the master's settings "
            "arrive)"
        )
    settings = RunSettings.from_options(typed(options))  # a web UI master sends numbers as text
    vendor = VendorFacts(
        getattr(options, "vendor_time_scale", None) or settings.time_scale, getattr(options, "profile_label", "") or ""
    )
    run_id = getattr(options, "run_id", None)
    if not run_id:
        raise UsageError("worker got no run id from the master")
    return HandedRun(settings, vendor, str(run_id))
