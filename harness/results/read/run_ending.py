"""How a run ended, as a reader finds it: run.json's `status`, or `crashed` when it still says `running` and the
process that owned it is gone (its pid and start time are in run.json under `processes.owner`).

`summary`, `report` and report.html put this first, with the rollouts that have no record of how they ended
(`unfinished`, from the write-ahead of submits) and, for a cut-short run, the cleanup command.
"""

from __future__ import annotations

import shlex
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.results.read.submit_ledger import OUTCOME_UNFINISHED
from harness.wire import run_endings as endings

START_TIME_TOLERANCE_S = 1.0


@dataclass(frozen=True, slots=True)
class RunEnding:
    ending: str  # completed | interrupted | aborted | crashed | running | unknown
    unfinished: int  # submitted rollouts with no recorded end (outcome `unfinished`)
    cleanup_hint: str | None  # the command that reaps what a cut-short run may have left
    thresholds_crossed: int = 0  # run.json `thresholds` whose verdict is not ok (--threshold): exit 99

    @property
    def cut_short(self) -> bool:
        return self.ending in endings.CUT_SHORT

    def banner(self) -> str:
        """One line: how the run ended, first in every summary and report."""
        if self.ending == endings.RUNNING:
            return "not ended: still running (the process that writes it is alive, or on another host)"
        if self.ending == "unknown":
            return "ended: unknown (no run.json, or no status in it)"
        code = (
            endings.exit_code_for(self.ending, self.thresholds_crossed > 0)
            if self.ending in (endings.COMPLETED, *endings.CUT_SHORT)
            else None
        )
        line = f"ended: {self.ending}"
        if self.ending != endings.CRASHED and code is not None:
            line += f" (exit {code})"
        line += f" — {endings.meaning_of(self.ending)}"
        if self.thresholds_crossed:
            line += f"; thresholds crossed: {self.thresholds_crossed} (run.json `thresholds`)"
        if self.unfinished:
            line += f"; {self.unfinished} submitted rollouts have no recorded end (outcome unfinished)"
        if self.ending == endings.CRASHED and self.cleanup_hint:
            line += f"; reap what is left: {self.cleanup_hint}"
        return line


def process_alive(record: Mapping[str, Any] | None) -> bool | None:
    """True/False for a process recorded on this host (pid and start time match); None when we cannot tell."""
    if not isinstance(record, Mapping) or not record.get("pid"):
        return None
    if record.get("hostname") and record.get("hostname") != socket.gethostname():
        return None
    import psutil

    try:
        process = psutil.Process(int(record["pid"]))
        started = float(process.create_time())
    except (psutil.Error, ValueError, TypeError):
        return False
    recorded = record.get("started")
    if recorded is not None and abs(started - float(recorded)) > START_TIME_TOLERANCE_S:
        return False  # the pid was reused by another process
    return process.status() != psutil.STATUS_ZOMBIE


def ending_of(manifest: Mapping[str, Any]) -> str:
    """The manifest's ending; `running` whose owner process is gone is `crashed`."""
    if not manifest:
        return "unknown"
    status = endings.normalize(manifest.get("status"))
    if status != endings.RUNNING:
        return status or "unknown"
    processes = manifest.get("processes") if isinstance(manifest.get("processes"), Mapping) else {}
    alive = process_alive(processes.get("owner") if processes else None)
    return endings.CRASHED if alive is False else endings.RUNNING


def cleanup_command(manifest: Mapping[str, Any]) -> str | None:
    provider, run_id = manifest.get("provider"), manifest.get("run_id")
    if not provider or not run_id:
        return None
    if manifest.get("local_vendor"):
        return None  # its simulated vendor was started for the run and died with it: nothing outlives it
    base_url = manifest.get("base_url")
    where = f" --base-url {shlex.quote(str(base_url))}" if base_url else ""
    return f"stampede cleanup --provider {shlex.quote(str(provider))}{where} --run-id {shlex.quote(str(run_id))}"


def run_ending(manifest: Mapping[str, Any], outcomes: Any = None) -> RunEnding:
    """`outcomes`: the rows' outcome column (any iterable), to count the unfinished ones."""
    unfinished = 0
    if outcomes is not None:
        unfinished = sum(1 for outcome in outcomes if outcome == OUTCOME_UNFINISHED)
    verdicts = manifest.get("thresholds") or []
    crossed = sum(1 for verdict in verdicts if isinstance(verdict, Mapping) and verdict.get("verdict") != "ok")
    return RunEnding(ending_of(manifest), unfinished, cleanup_command(manifest), crossed)
