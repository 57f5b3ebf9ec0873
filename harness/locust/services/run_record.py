"""A run folder's lifecycle on its owner (a local runner or a master; workers ship their records to it).

Opened at the run's start: the folder, run.json saying what runs against what and who writes it (pids, for
telling a crash from a run in progress later), the `results/latest` pointer and Locust's own CSV reports.
The provider's versions are added once the engine is configured; at the end, run.json records how the run
ended and `harness.locust.services.end_of_run` concludes it. The file formats live in `harness.locust.run_folder`.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundation.phase_marks import mark
from harness.locust.crashed_runs import find_crashed_runs
from harness.locust.reports import LocustReports
from harness.locust.run_folder import (
    base_manifest,
    create_run_folder,
    point_latest_at,
    read_latest,
    remove_unstarted_run,
    write_manifest,
)
from harness.locust.services.vendor_lifecycle import VendorFacts
from harness.locust.settings import RunSettings
from harness.wire.run_endings import exit_code_for


@dataclass(frozen=True, slots=True)
class Writers:
    """The processes writing a run: this one, its engine, the embedded vendor and its shards."""

    engine: int | None = None
    vendor: int | None = None
    vendor_shards: list[int] = field(default_factory=list)

    def to_manifest(self) -> dict[str, Any]:
        """Each process's pid, start time and host (run.json's `processes`)."""
        import psutil

        host = socket.gethostname()

        def record(pid: int) -> dict[str, Any]:
            try:
                started: float | None = psutil.Process(pid).create_time()
            except psutil.Error:
                started = None
            return {"pid": pid, "started": started, "hostname": host}

        processes: dict[str, Any] = {"owner": record(os.getpid())}
        if self.engine is not None:
            processes["engine"] = record(self.engine)
        if self.vendor is not None:
            processes["vendor"] = record(self.vendor)
            if self.vendor_shards:
                processes["vendor_shards"] = [record(pid) for pid in self.vendor_shards]
        return processes


@dataclass(frozen=True, slots=True)
class RunDescription:
    """What run.json says at the start: what runs, against what, in which role."""

    run_id: str
    scenario: str
    locustfile: str | None
    settings: RunSettings
    vendor: VendorFacts
    local_vendor: bool
    shape: dict[str, Any] | None
    stop_timeout_s: float | None
    master_of: int | None  # a master: its worker count; None for a local runner
    is_master: bool


def initial_manifest(description: RunDescription, writers: Writers) -> dict[str, Any]:
    settings = description.settings
    manifest = base_manifest(description.run_id, description.scenario, description.locustfile)
    manifest.update(
        {
            "provider": settings.provider,
            "profile": description.vendor.profile or None,
            "time_scale": description.vendor.time_scale,
            "seed": settings.seed,
            "base_url": settings.base_url,
            "local_vendor": description.local_vendor,
            "parameters": settings.public_dict(),
            "shape": description.shape,
            "stop_timeout_s": description.stop_timeout_s,
            "role": "master" if description.is_master else "local",
            "workers": description.master_of if description.is_master else None,
            "processes": writers.to_manifest(),
        }
    )
    return manifest


def offer_cleanup_of_crashed_runs(out: Path) -> None:
    """Before a process's first run: earlier runs found crashed are recorded so, each offered in one line."""
    for crashed in find_crashed_runs(out):
        print(crashed.notice(), file=sys.stderr, flush=True)


class RunRecord:
    """One run's folder and its run.json (`manifest`), from the run's start until the process's next run."""

    def __init__(
        self, run_dir: Path, manifest: dict[str, Any], reports: LocustReports | None, previous_latest: str | None = None
    ) -> None:
        self.run_dir = run_dir
        self.manifest = manifest
        self._reports = reports
        self._previous_latest = previous_latest  # what `latest` said before this run (put back by `discard`)

    @classmethod
    def open(cls, run_dir: Path, manifest: dict[str, Any], environment: Any) -> RunRecord:
        """Create the folder, write run.json, point `results/latest` at it, start Locust's CSV reports."""
        create_run_folder(run_dir)  # UsageError: another run has it
        write_manifest(run_dir, manifest)
        previous_latest = read_latest(run_dir.parent)
        point_latest_at(run_dir)
        reports = LocustReports(environment, run_dir)
        reports.start()
        return cls(run_dir, manifest, reports, previous_latest)

    def discard(self) -> None:
        """The run never started (the engine's provider refused it): no folder, `latest` as it was. A run that
        could not start is a usage error (harness.wire.run_endings), not a run."""
        if self._reports is not None:
            self._reports.abandon()
            self._reports = None
        remove_unstarted_run(self.run_dir, self._previous_latest)

    def write(self) -> None:
        write_manifest(self.run_dir, self.manifest)

    def add_versions(self, versions: dict[str, str]) -> None:
        """The provider's SDK versions, as the configured engine reported them."""
        self.manifest["provider_versions"] = versions
        self.write()

    def finish_reports(self) -> None:
        if self._reports is not None:
            self._reports.finish()
            self._reports = None
        mark("end: Locust's reports written")

    def amend_ending(self, ending: str) -> None:
        """A second signal after the run had been concluded: run.json still says what the user asked for."""
        recorded = self.manifest.get("status")
        if recorded not in (None, "running", ending):
            self.manifest.update({"status": ending, "exit_code": exit_code_for(ending)})
            self.write()
