"""Stampede inside a Locust process: the engine, the embedded stub, the run folder, progress and summary.

Wired to Locust's events, so the same code serves `locust -f scenarios/ramp.py` (web UI or headless) and
`stampede run` (Locust as a library). Roles:
- local runner: starts the stub (if embedded) and an engine; owns the run folder and prints the summary;
- master: starts the stub and owns the run folder; runs no users, so no engine;
- worker: starts an engine (after any fork: `init` fires in the child) and takes the run id from the master.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import sys
import time
from pathlib import Path
from typing import Any

import gevent
import pyarrow as pa
import pyarrow.parquet as pq
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from harness.analysis.dataset import load_rollouts
from harness.analysis.summary import format_stage_table, load_truth, measurement_error, stage_rows
from harness.embedded_vendor import EmbeddedVendor, VendorStartError
from harness.engine_client import EngineClient, EngineError
from harness.options import RunSettings, SettingsError, add_arguments
from harness.progress import ProgressPrinter
from harness.run_manifest import base_manifest, iso, new_run_id, point_latest_at, write_manifest
from harness.shapes import StampedeShape
from providers import LOCAL_VENDORS

log = logging.getLogger("stampede")


class SessionError(Exception):
    """A run cannot start; the message is the one line the user sees."""


class StampedeSession:
    """Per-process state, reachable from users and shapes as `environment.stampede`."""

    def __init__(self, environment: Environment, settings: RunSettings) -> None:
        self.environment = environment
        self.settings = settings
        self.engine: EngineClient | None = None
        self.vendor: EmbeddedVendor | None = None
        self.run_id: str | None = None
        self.run_dir: Path | None = None
        self.manifest: dict[str, Any] | None = None
        self.engine_summary: dict[str, Any] | None = None
        self.versions: dict[str, str] = {}
        self.progress: ProgressPrinter | None = None
        self.time_scale: float | None = settings.time_scale
        self.profile_label = settings.profile if settings.embedded_vendor else ""
        self.ended = False
        self.summary_text: str | None = None
        self.failed_to_start: str | None = None
        self.runs = 0

    # -- roles -----------------------------------------------------------------------------------------
    @property
    def runner(self) -> Any:
        return self.environment.runner

    @property
    def is_master(self) -> bool:
        return isinstance(self.runner, MasterRunner)

    @property
    def is_worker(self) -> bool:
        return isinstance(self.runner, WorkerRunner)

    @property
    def owns_run_folder(self) -> bool:
        return not self.is_worker

    @property
    def runs_users(self) -> bool:
        return not self.is_master

    def worker_name(self) -> str:
        if self.is_worker:
            return f"w{getattr(self.runner, 'worker_index', 0)}-{socket.gethostname()}"
        return "local"

    @property
    def scenario(self) -> str:
        locustfile = self.environment.locustfile or "scenario"
        return Path(locustfile).stem

    @property
    def shape(self) -> StampedeShape | None:
        shape = self.environment.shape_class
        return shape if isinstance(shape, StampedeShape) else None

    # -- lifecycle -------------------------------------------------------------------------------------
    def start_services(self) -> None:
        """At `init`: the stub (if embedded, not on workers) and the engine (where users run)."""
        if self.settings.embedded_vendor and not self.is_worker:
            module = LOCAL_VENDORS.get(self.settings.provider)
            if module is None:
                raise SessionError(f"provider {self.settings.provider!r} has no simulated vendor for --local")
            try:
                self.vendor = EmbeddedVendor.start(
                    module,
                    self.settings.profile,
                    seed=self.settings.seed,
                    time_scale=self.settings.time_scale,
                    overrides=self.settings.profile_overrides,
                )
            except VendorStartError as exc:
                raise SessionError(f"local vendor: {exc}") from None
            extra = {key: str(value) for key, value in self.vendor.provider_options.items()}
            self.settings = dataclasses.replace(
                self.settings,
                base_url=self.vendor.url,
                token=self.vendor.token,
                provider_options={**extra, **self.settings.provider_options},
            )
            self.time_scale = self.vendor.time_scale
            self.profile_label = self.vendor.profile
            options = self.environment.parsed_options
            if options is not None:  # workers receive these with the master's spawn message
                options.base_url, options.token = self.vendor.url, self.vendor.token
                options.time_scale = self.vendor.time_scale
                options.provider_option = [f"{k}={v}" for k, v in self.settings.provider_options.items()]
        if self.runs_users:
            self.engine = EngineClient.spawn(self.worker_name())

    def begin_run(self) -> None:
        """At `test_start`: a run id and folder (local/master), the engine configured (local/worker)."""
        if self.run_id is not None and not self.ended:
            return
        self.ended = False
        self.engine_summary = None
        self.runs += 1
        options = self.environment.parsed_options
        if self.is_worker:
            self.settings = RunSettings.from_options(options)
            self.run_id = getattr(options, "run_id", None)
            if not self.run_id:
                raise SessionError("worker got no run id from the master")
        else:
            first_run = self.runs == 1
            self.run_id = (self.settings.run_id if first_run else None) or new_run_id(
                self.scenario, self.settings.provider
            )
            if options is not None:
                options.run_id = self.run_id
        self.run_dir = Path(self.settings.out) / self.run_id
        if self.owns_run_folder:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.manifest = self._initial_manifest()
            write_manifest(self.run_dir, self.manifest)
            point_latest_at(self.run_dir)
        if self.engine is not None:
            try:
                reply = self.engine.configure(self._engine_config())
            except EngineError as exc:
                raise SessionError(str(exc)) from None
            self.versions = dict(reply.get("versions", {}))
            if self.manifest is not None:
                self.manifest["provider_versions"] = self.versions
                write_manifest(self.run_dir, self.manifest)
        if self.owns_run_folder and self.settings.progress_interval_s > 0:
            self.progress = ProgressPrinter(self, self.settings.progress_interval_s)
            self.progress.start()

    def _engine_config(self) -> dict[str, Any]:
        settings = self.settings
        provider_options: dict[str, Any] = dict(settings.provider_options)
        if settings.base_url:
            provider_options.setdefault("base_url", settings.base_url)
        if settings.token:
            provider_options.setdefault("token", settings.token)
        return {
            "run_id": self.run_id,
            "worker": self.worker_name(),
            "out_dir": str(Path(settings.out).resolve()),
            "provider": settings.provider,
            "provider_options": provider_options,
            "profile": self.profile_label,
            "scenario": self.scenario,
            "plan": settings.plan.to_dict(),
            "secrets": [secret for secret in (settings.token,) if secret],
        }

    def _initial_manifest(self) -> dict[str, Any]:
        assert self.run_id is not None
        manifest = base_manifest(self.run_id, self.scenario, self.environment.locustfile)
        manifest.update(
            {
                "provider": self.settings.provider,
                "profile": self.profile_label or None,
                "time_scale": self.time_scale,
                "seed": self.settings.seed,
                "base_url": self.settings.base_url,
                "local_vendor": self.vendor is not None,
                "parameters": self.settings.public_dict(),
                "shape": self.shape.describe() if self.shape else None,
                "stop_timeout_s": self.environment.stop_timeout,
                "role": "master" if self.is_master else "local",
            }
        )
        return manifest

    def end_run(self) -> None:
        """At `test_stop`: drain the engine, keep the stub's truth, finish run.json, print the summary."""
        if self.ended or self.run_id is None:
            return
        self.ended = True
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        if self.engine is not None and self.engine.alive:
            try:
                self.engine_summary = self.engine.drain()
            except EngineError as exc:
                log.error("engine drain failed: %s", exc)
        if not self.owns_run_folder or self.run_dir is None or self.manifest is None:
            return
        if self.vendor is not None:
            self._save_truth()
        now = time.time()
        rollouts = load_rollouts(self.run_dir)
        self.manifest.update(
            {
                "ended_at": iso(now),
                "t_end": now,
                "wall_s": round(now - float(self.manifest["t_start"]), 3),
                "status": "complete",
                "rows": {"rollouts": len(rollouts)},
                "engines": [self.engine_summary] if self.engine_summary else [],
            }
        )
        write_manifest(self.run_dir, self.manifest)
        self.summary_text = self.render_summary(rollouts)
        print(self.summary_text, flush=True)

    def _save_truth(self) -> None:
        assert self.vendor is not None and self.run_dir is not None
        try:
            sandboxes = self.vendor.truth()
        except Exception as exc:  # the run's own data matters more than this cross-check
            log.warning("could not read the simulated vendor's own records: %s", exc)
            return
        if self.run_id:
            sandboxes = [s for s in sandboxes if f"stampede-run={self.run_id}" in (s.get("labels") or [])]
        rows = [
            {
                "id": sandbox.get("id"),
                "status": sandbox.get("status"),
                "error_type": sandbox.get("error_type"),
                "created_wall": sandbox.get("created_wall"),
                "ready_wall": sandbox.get("running_wall"),
                "ended_wall": sandbox.get("ended_wall"),
                "first_exec_done_wall": sandbox.get("first_exec_done_wall"),
            }
            for sandbox in sandboxes
        ]
        schema = pa.schema([("id", pa.string()), ("status", pa.string()), ("error_type", pa.string()),
                            ("created_wall", pa.float64()), ("ready_wall", pa.float64()), ("ended_wall", pa.float64()),
                            ("first_exec_done_wall", pa.float64())])  # fmt: skip
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), self.run_dir / "sim_truth.parquet")

    def render_summary(self, rollouts: Any) -> str:
        assert self.manifest is not None and self.run_dir is not None
        lines = [
            "",
            f"stampede run {self.run_id} — scenario {self.scenario}, provider {self.settings.provider}"
            + (f", profile {self.profile_label}" if self.profile_label else ""),
        ]
        if self.time_scale is not None and self.time_scale != 1:
            lines.append(
                f"time scale {self.time_scale:g}: the simulated vendor ran {1 / self.time_scale:g}x faster than real"
                f" time; durations below are wall seconds (divide by {self.time_scale:g} for vendor seconds)"
            )
        lines.append(format_stage_table(stage_rows(rollouts)) if len(rollouts) else "(no rollouts recorded)")
        total = len(rollouts)
        unknown = int((rollouts["failure_kind"] == "unknown").sum()) if total else 0
        harness = int((rollouts["failure_kind"] == "harness").sum()) if total else 0
        lines.append(
            f"{total} rollouts in {self.manifest.get('wall_s', 0):.1f}s wall; "
            f"peak in flight {int(rollouts['inflight_at_submit'].max()) if total else 0}; "
            f"unknown failures {unknown}; harness failures {harness}"
        )
        if self.engine_summary:
            reaped = self.engine_summary.get("reaped_by_label")
            health = self.engine_summary.get("health", {})
            lines.append(
                f"teardown: {self.engine_summary.get('terminated_leftovers', 0)} sandboxes terminated at drain, "
                f"{reaped if reaped is not None else '?'} reaped by run label"
                + (
                    f" (sweep failed: {self.engine_summary['sweep_error']}; once the vendor answers again, "
                    f"`stampede cleanup --provider {self.settings.provider} --run-id {self.run_id}` reaps what is left)"
                    if self.engine_summary.get("sweep_error") or self.engine_summary.get("terminate_errors")
                    else ""
                )
                + f"; engine loop lag p99 {health.get('loop_lag_p99_ms', 0):.1f} ms, "
                f"max {health.get('loop_lag_max_ms', 0):.1f} ms, cpu {health.get('cpu_seconds', 0):.1f} s"
            )
        error = measurement_error(rollouts, load_truth(self.run_dir))
        if error:
            usable, first = error["vs_usable_ms"], error["vs_first_command_ms"]
            lines.append(
                f"harness vs the simulated vendor's own records (n={error['samples']}): TTI - accept->RUNNING "
                f"p50 {usable['p50']:.0f} ms, p99 {usable['p99']:.0f} ms (poll interval, round trips, first command); "
                f"TTI - accept->first command done p50 {first['p50']:.0f} ms, p99 {first['p99']:.0f} ms, "
                f"max {first['max']:.0f} ms (the timing error)"
            )
        lines.append(f"results: {self.run_dir}")
        return "\n".join(lines)

    def close(self) -> None:
        """At `quitting`: stop the engine and the stub."""
        if not self.ended and self.run_id is not None:
            self.end_run()
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None
        if self.vendor is not None:
            self.vendor.stop()
            self.vendor = None


def _fail(environment: Environment, message: str) -> None:
    """One line, exit status 2, and an orderly stop (no traceback)."""
    session = getattr(environment, "stampede", None)
    if session is not None:
        session.failed_to_start = message
    print(f"stampede: {message}", file=sys.stderr, flush=True)
    environment.process_exit_code = 2
    if environment.runner is not None:
        gevent.spawn(environment.runner.quit)


@events.init_command_line_parser.add_listener
def _on_parser(parser: Any, **_: Any) -> None:
    add_arguments(parser)


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    if getattr(environment, "stampede", None) is not None:
        return
    try:
        settings = RunSettings.from_options(environment.parsed_options)
    except SettingsError as exc:
        environment.stampede = None  # type: ignore[attr-defined]
        _fail(environment, str(exc))
        return
    session = StampedeSession(environment, settings)
    environment.stampede = session  # type: ignore[attr-defined]
    try:
        session.start_services()
    except (SessionError, EngineError) as exc:
        _fail(environment, str(exc))


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    session: StampedeSession | None = getattr(environment, "stampede", None)
    if session is None or session.failed_to_start:
        return
    try:
        session.begin_run()
    except (SessionError, EngineError, SettingsError) as exc:
        _fail(environment, str(exc))


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    session: StampedeSession | None = getattr(environment, "stampede", None)
    if session is not None and not session.failed_to_start:
        session.end_run()


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_: Any) -> None:
    session: StampedeSession | None = getattr(environment, "stampede", None)
    if session is not None:
        session.close()
