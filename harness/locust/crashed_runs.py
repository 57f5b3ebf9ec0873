"""Runs found crashed when the next one starts: their run.json still says `running` and the process that owned
it is gone. Each is recorded as `crashed` (in its own run.json) and offered for cleanup in one line, because a
killed run's sandboxes outlive it until the vendor's lifetime reaps them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from harness.locust.run_folder import iso, read_manifest, write_manifest
from harness.results.read.run_ending import cleanup_command, ending_of
from harness.wire.run_endings import CRASHED, RUNNING

SCAN_LIMIT = 50  # the newest run folders looked at: bounded, whatever the results folder holds


@dataclass(frozen=True, slots=True)
class CrashedRun:
    run_id: str
    run_dir: Path
    cleanup: str | None  # None: its simulated vendor died with it, nothing is left to reap

    def notice(self) -> str:
        if self.cleanup is None:
            return f"stampede: run {self.run_id} crashed earlier (recorded in its run.json; its vendor died with it)"
        return f"stampede: run {self.run_id} crashed earlier; its sandboxes may still be alive: {self.cleanup}"


def find_crashed_runs(out: Path, *, limit: int = SCAN_LIMIT) -> list[CrashedRun]:
    """The crashed runs among the newest `limit` folders of `out`, each now recorded as `crashed`."""
    manifests = []
    try:
        folders = [path for path in Path(out).iterdir() if path.is_dir() and not path.is_symlink()]
    except OSError:
        return []
    for folder in folders:
        try:
            manifests.append(((folder / "run.json").stat().st_mtime, folder))
        except OSError:
            continue
    found: list[CrashedRun] = []
    for _, folder in sorted(manifests, reverse=True)[:limit]:
        try:
            manifest = read_manifest(folder)
        except (OSError, ValueError):
            continue
        if not isinstance(manifest, dict) or manifest.get("status") != RUNNING or ending_of(manifest) != CRASHED:
            continue
        manifest.update({"status": CRASHED, "crash_found_at": iso(time.time())})
        try:
            write_manifest(folder, manifest)
        except OSError:
            pass
        from harness.results.read.run_repair import repair_crashed_run  # pyarrow and pandas: only for a crash found

        repair_crashed_run(folder)  # its unfinished attempts into its tables, for plain parquet readers
        found.append(CrashedRun(str(manifest.get("run_id") or folder.name), folder, cleanup_command(manifest)))
    return found
