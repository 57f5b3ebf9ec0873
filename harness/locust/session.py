"""Stampede inside a Locust process: the composition root that wires its services to Locust's events.

Wired to Locust's events, so the same code serves `locust -f scenarios/ramp.py` (web UI or headless) and
`stampede run` (Locust as a library, alone or as master and workers). The settings are parsed once, at `init`
(or handed over by `stampede run`), and passed on typed. Each job is a collaborator with its own module in
`harness.locust.services`:
- `process_role`: local runner, master or worker (who runs users, who owns the run folder);
- `vendor_lifecycle`: the embedded simulated vendor (started, kept, restarted, stopped);
- `engine_link`: the engine where users' rollouts run (started, configured, polled, drained);
- `master_handoff`: what a master hands its workers on Locust's options (run id, scenario, vendor);
- `run_record`, `end_of_run`: the run folder and run.json, then compaction, summary.json and the summary;
- `run_stopping`: signals, `--abort-on-threshold` and the web UI's Stop, and so how the run ended;
- `web_form_reset`: the web UI's form, and each test's settings from what it posted; beside them
`harness.locust.worker_link`: records and live counters between workers and their master.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import gevent.event
from locust import events
from locust.env import Environment
from locust.runners import WorkerRunner

from foundation.phase_marks import mark
from harness.errors import UsageError
from harness.locust.engine_client import EngineClient, EngineError
from harness.locust.live.live_vendor_seconds import LiveVendorSeconds
from harness.locust.live.progress import ProgressPrinter
from harness.locust.provider_check import check_provider
from harness.locust.run_folder import new_run_id
from harness.locust.run_state import RunState, Stage
from harness.locust.services.end_of_run import RunEnd, conclude, preload_in_last_step, preload_readers
from harness.locust.services.engine_link import EngineLink, RunIdentity, engine_config
from harness.locust.services.master_handoff import forget_vendor, publish_run, publish_vendor, received
from harness.locust.services.process_role import ProcessRole
from harness.locust.services.run_record import (
    RunDescription,
    RunRecord,
    Writers,
    initial_manifest,
    offer_cleanup_of_crashed_runs,
)
from harness.locust.services.run_stopping import RunStopping, watch_workers
from harness.locust.services.vendor_lifecycle import VendorFacts, VendorLifecycle
from harness.locust.services.web_form_reset import WebFormReset
from harness.locust.settings import RunSettings, add_arguments
from harness.locust.shapes import StampedeShape
from harness.locust.start_spacing import StartSpacer
from harness.locust.vendor_process import Meanwhile
from harness.locust.web_form import bind_web_ui_to_loopback
from harness.locust.worker_link import MasterLink, WorkerLink, process_usage
from harness.wire.messages import RolloutRequest
from harness.wire.run_endings import (
    CONCLUDED_EXITS,
    EXIT_ABORTED,
    EXIT_INTERRUPTED,
    exit_code_for,
)

log = logging.getLogger("stampede")


class StampedeSession:
    """Wires one Locust process's services: the engine, the local vendor, the links, the run folder.

    What shapes, users and links share during a run lives in its `RunState` (`self.state`); users find the
    session with `session_of(environment)`.
    """

    def __init__(self, environment: Environment, settings: RunSettings) -> None:
        self.environment = environment
        self.role = ProcessRole(environment)  # local runner, master or worker
        self.state = RunState(settings)
        self.state.attach(environment)
        self.state.test_preparers.append(self.prepare_test)
        self.web_form = WebFormReset(settings)  # with a web UI: each test's settings from what its form posted
        self.engine_link = EngineLink()  # where this process's users run (none on a master)
        self.embedded = VendorLifecycle()  # the simulated vendor this process runs, if any
        self.record: RunRecord | None = None  # the run folder and run.json (local runner or master)
        self.engine_summaries: list[dict[str, Any]] = []
        self.versions: dict[str, str] = {}
        self.progress: ProgressPrinter | None = None
        self.live_vendor: LiveVendorSeconds | None = None  # the progress line's vendor seconds, when it can tell
        self.vendor = VendorFacts.of(settings)  # the time scale and profile the run's rows record
        self.summary_text: str | None = None
        self.failed_to_start: str | None = None
        self.test_refused: str | None = None  # under the web UI: why this test could not start (the form is kept)
        self.runs = 0
        self.start_spacer = StartSpacer()  # leased users' first rollouts, evenly at the stage's start rate
        self.master_link: MasterLink | None = None
        self.worker_link: WorkerLink | None = None
        self._finishing: gevent.Greenlet | None = None
        self.stopping = RunStopping(self._stop_now, lambda: self.ended)  # signals, thresholds, the web UI's Stop
        self.exit_code: int | None = None  # the last run's exit status (harness.wire.run_endings), once concluded
        self.counts_signals = False  # `locust -f`: this session counts Ctrl-C/SIGTERM and sets the exit status
        self._ending: gevent.Greenlet | None = None  # a run being finished off Locust's shape greenlet
        self._retiring: list[gevent.Greenlet] = []  # the engine and vendor ending while the last run concludes
        self.services_ready = gevent.event.Event()
        self.run_ready = gevent.event.Event()  # set once begin_run configured the engine, cleared at end_run

    @property
    def settings(self) -> RunSettings:
        return self.state.settings

    @settings.setter
    def settings(self, settings: RunSettings) -> None:
        self.state.settings = settings

    @property
    def run_id(self) -> str | None:
        return self.state.run_id

    @property
    def run_dir(self) -> Path | None:
        return self.state.run_dir

    @property
    def ended(self) -> bool:
        return self.state.ended

    @property
    def runner(self) -> Any:
        return self.environment.runner

    @property
    def shape(self) -> StampedeShape | None:
        return self.role.shape

    def before_rollout(self, user: Any) -> Stage | None:
        """In a user's greenlet, before each rollout: the stage it runs in, or None when the shape is done."""
        shape = self.shape
        if shape is None or not shape.gated:
            return self.state.stage
        step = self.state.wait_at_gate(getattr(user, "_stampede_step", 0))
        if step is None:
            return None
        user._stampede_step = step
        return self.state.stage

    @property
    def ending(self) -> str:
        """How this run is ending (`harness.locust.services.run_stopping`)."""
        return self.stopping.ending

    def _stop_now(self) -> None:
        """End the run in order, without waiting out the stop timeout (a threshold crossed for good)."""
        self.environment.stop_timeout = 0
        gevent.spawn(self.runner.quit)

    def note_signal(self, count: int) -> None:
        """The command line got its `count`-th Ctrl-C/SIGTERM. From the second on the run is aborted: the engine
        (SIGUSR2) stops waiting for cancelled rollouts and bounds its drain, still terminating every sandbox."""
        self.stopping.note_signal(count)
        if self.master_link is not None:
            self.master_link.interrupt(count)
        if count >= 2:
            self.engine_link.abort()
        if count >= 2 and self.record is not None:
            # the drain had already finished: the run.json the process exits with still says what was asked
            self.record.amend_ending(self.ending)
        if self.counts_signals and self.environment.process_exit_code in (None, 0, EXIT_INTERRUPTED):
            self.environment.process_exit_code = exit_code_for(self.ending)

    def count_signals(self) -> None:
        """`locust -f`: Locust's own main ends the process on Ctrl-C (a KeyboardInterrupt) and SIGTERM (its shutdown)
        without a word to stampede, so the run was recorded `completed`, exit 0. Counted here as `stampede run` counts
        them: the first interrupts (rollouts cancelled, sandboxes terminated, exit 130), a second aborts (every
        engine hurries, a master's workers' too; exit 131). Ctrl-C then goes on to Locust as Python's own handler
        would send it. SIGTERM too while Locust's headless main waits on the shape: it installs its own SIGTERM
        handler only after the shape ends, so until then a SIGTERM killed the process outright (run.json left
        `running`); elsewhere Locust's handler shuts down and this one only counts."""
        self.counts_signals = True
        received: list[int] = []

        def on_signal(signum: int) -> None:
            received.append(signum)
            self.environment.stop_timeout = 0  # stop now, as `stampede run` does: no stop timeout sat out
            self.note_signal(len(received))
            if len(received) == 1 and (signum == signal.SIGINT or waits_on_shape):
                gevent.get_hub().parent.throw(KeyboardInterrupt)  # Locust's main catches it and shuts down

        options = self.environment.parsed_options
        waits_on_shape = (
            bool(getattr(options, "headless", False)) and self.shape is not None and not self.role.is_worker
        )
        gevent.signal_handler(signal.SIGINT, on_signal, signal.SIGINT)
        gevent.signal_handler(signal.SIGTERM, on_signal, signal.SIGTERM)

    def note_master_signal(self, count: int) -> None:
        """A worker hears its master's Ctrl-C/SIGTERM: its users stop at once, its engine aborts from the second."""
        self.environment.stop_timeout = 0
        self.note_signal(count)

    # -- lifecycle -------------------------------------------------------------------------------------
    def start_services(self) -> None:
        """At `init`: the links, the local vendor (if any, not on workers), the engine (where users run).

        A worker already listens to its master while this runs (the engine takes a second to start), so the
        master may start the test meanwhile: `begin_run` and the users wait for `services_ready`.
        """
        # The engine and the local vendor start at once (their own interpreters); the run folder's owner preloads.
        if self.role.runs_users:
            self.engine_link.spawn(self.role.worker_name, self.settings.provider)
        preload: list[Meanwhile] = [self._preload_readers] if self.role.owns_run_folder else []
        try:
            if self.role.is_master:
                self.master_link = MasterLink(self.runner, self.state)
            elif self.role.is_worker:
                self.worker_link = WorkerLink(
                    self.runner, self.state, self.role.worker_name, lambda: self.engine, self.note_master_signal
                )
            if self.settings.embedded_vendor and not self.role.is_worker:
                self._serve_vendor(self.settings, meanwhile=preload.pop() if preload else None)
            for step in preload:  # no vendor to start: while the engine starts
                step(lambda: False)
        finally:
            engine_failed = self.engine_link.wait_started(self.state)  # a vendor that failed leaves it to close()
            self.services_ready.set()
        if engine_failed is not None:
            raise engine_failed

    @property
    def engine(self) -> EngineClient | None:
        """The engine's client, for users (None on a master, or before it started)."""
        return self.engine_link.client

    def lease_request(self) -> RolloutRequest:
        """A closed-model user's lease: it records the stage in force now (the engine hears of later ones)."""
        stage = self.state.stage
        target = stage.target_users or int(getattr(self.runner, "target_user_count", 0) or 0)
        return RolloutRequest(stage.name, target)

    def wait_until_ready(self, timeout_s: float = 120.0) -> bool:
        """In a user's greenlet: until this run's engine is configured. False if it never will be."""
        self.run_ready.wait(timeout_s)
        return self.run_ready.is_set() and self.engine is not None and not (self.failed_to_start or self.test_refused)

    def offer_web_form(self) -> None:
        """With the web UI: the form shows stampede's settings (the shape sets the user count stage by stage)."""
        self.web_form.offer(self.environment, self.shape, self._note_web_stop)

    def _note_web_stop(self) -> None:
        if self.run_id is not None and not self.ended:
            self.stopping.note_web_stop()

    def prepare_test(self) -> None:
        """Before each test started from the web UI (local runner or master): what the form posted takes effect.

        The embedded vendor is kept while what it simulates is unchanged, and restarted otherwise. A bad value
        raises UsageError (the test is refused, the process keeps serving the form).
        """
        if getattr(self.environment, "web_ui", None) is None or self.role.is_worker:
            return
        self.wait_for_last_run()
        if self.environment.parsed_options is None:
            return
        posted = self.web_form.posted(self.environment.parsed_options, self.embedded.endpoint())
        check_provider(posted)  # a provider that cannot start refuses the test here: no run folder
        self._serve_vendor(posted)

    def _preload_readers(self, vendor_starting: Callable[[], bool]) -> None:
        """What the end of the run reads with, imported while the vendor or the engine is still starting."""
        preload_readers(lambda: vendor_starting() or self.engine_link.starting)

    def _serve_vendor(self, settings: RunSettings, meanwhile: Meanwhile | None = None) -> None:
        """The embedded vendor these settings ask for (none, kept, or (re)started); here and on workers, the run
        talks to it. `meanwhile` runs while it starts."""
        self.settings = settings  # in force even when the vendor fails to start (the test is refused)
        forget_vendor(self.environment.parsed_options)
        shape = self.shape
        peak_users = shape.peak_users(settings) if shape is not None else settings.users
        self.settings, self.vendor = self.embedded.serve(settings, peak_users, meanwhile)
        if self.embedded.vendor is not None:
            publish_vendor(self.environment.parsed_options, self.settings, self.vendor)

    def begin_run(self) -> None:
        """At `test_start`: a run id and folder (local/master), the engine configured (local/worker)."""
        self.wait_for_last_run()
        if self.run_id is not None and not self.ended:
            return
        self.services_ready.wait(120)
        self.test_refused = None
        self.run_ready.clear()
        self.state.new_run()
        self.engine_summaries = []
        self.runs += 1
        # Stage and gate are not reset here (the shape's first tick comes before test_start): at a run's end.
        options = self.environment.parsed_options
        if self.role.is_worker:
            handed = received(options, self.role.scenario)
            self.settings, self.vendor, self.state.run_id = handed.settings, handed.vendor, handed.run_id
        else:
            first_run = self.runs == 1
            self.state.run_id = (self.settings.run_id if first_run else None) or new_run_id(
                self.role.scenario, self.settings.provider
            )
            publish_run(options, self.state.run_id, self.role.scenario)
        self.state.run_dir = Path(self.settings.out) / str(self.run_id)
        if self.role.owns_run_folder:
            if self.runs == 1:
                offer_cleanup_of_crashed_runs(Path(self.settings.out))
            self.record = RunRecord.open(self.state.run_dir, self._initial_manifest(), self.environment)
            mark("run folder opened")
        if self.engine is not None:
            out_dir = self.worker_link.spool if self.worker_link is not None else Path(self.settings.out)
            identity = RunIdentity(str(self.run_id), self.role.worker_name, self.role.scenario, Path(out_dir))
            try:
                self.versions = self.engine_link.configure(engine_config(self.settings, self.vendor, identity, options))
            except UsageError:
                self._unstart_run()  # its vendor refused the engine after the check before the run passed (a race)
                raise
            mark("engine configured")
            if self.role.owns_run_folder and self.record is not None:
                self.record.add_versions(self.versions)
        if self.master_link is not None:
            self.master_link.start_run()
        if self.worker_link is not None:
            self.worker_link.start_run()
        if not self.role.is_master and not self.role.is_worker:
            self.engine_link.start_polling(self.state)
            gevent.spawn(preload_in_last_step, self.state, self.shape, self.settings.burst_steps)
        if self.role.owns_run_folder and self.settings.progress_interval_s > 0:
            self.live_vendor = self._live_vendor_seconds()
            self.progress = ProgressPrinter(
                self.runner,
                self.state,
                self.settings.progress_interval_s,
                self.vendor.time_scale,
                self.live_vendor.tti_quantiles if self.live_vendor is not None else None,
            )
            self.progress.start()
        # each run of a web UI session starts unstopped; the run folder's owner watches the thresholds
        abort_on_threshold = self.role.owns_run_folder and self.settings.abort_on_threshold
        self.stopping.new_run(self.state.live, self.settings.thresholds, abort_on_threshold)
        self.run_ready.set()

    def _live_vendor_seconds(self) -> LiveVendorSeconds | None:
        """The progress line's vendor seconds by the summary's rule: needs this process's rows (a local runner) and
        the simulated vendor's record (the embedded vendor), at a time scale other than 1."""
        scale, vendor = self.vendor.time_scale, self.embedded.vendor
        if vendor is None or not scale or scale == 1.0 or self.role.is_master or self.role.is_worker:
            return None
        return LiveVendorSeconds(str(self.run_id), scale, lambda: vendor.truth()[0])

    def note_row(self, record: dict[str, Any]) -> None:
        """A row a user of this process received (its greenlet): the live view's vendor seconds keep it, and a
        shape waiting for its step's last rollout hears of it at once."""
        stage = str(record.get("stage") or self.state.stage.name)
        if self.live_vendor is not None:
            self.live_vendor.add(stage, record)
        self.state.note_row(stage)

    def _unstart_run(self) -> None:
        """The run could not start: no run folder, `latest` as it was, no run for `close` to end."""
        if self.record is not None:
            self.record.discard()
            self.record = None
        self.state.run_id = None
        self.state.run_dir = None

    def refuse_test(self, message: str) -> None:
        """Under the web UI, a test whose provider refused the engine at its start: said in the web UI's log, the
        test stopped at once, the form still served (the next test may bring a better token or option)."""
        log.error("stampede: %s", message)
        self.test_refused = message
        self.run_ready.set()  # users waiting for the run wake and leave
        gevent.spawn(self.runner.stop)

    def _initial_manifest(self) -> dict[str, Any]:
        assert self.run_id is not None
        vendor_pid, shard_pids = self.embedded.pids()
        description = RunDescription(
            run_id=self.run_id,
            scenario=self.role.scenario,
            locustfile=self.environment.locustfile,
            settings=self.settings,
            vendor=self.vendor,
            local_vendor=self.embedded.vendor is not None,
            shape=self.shape.describe() if self.shape else None,
            stop_timeout_s=self.environment.stop_timeout,
            master_of=getattr(self.runner, "worker_count", None) if self.role.is_master else None,
            is_master=self.role.is_master,
        )
        return initial_manifest(description, Writers(self.engine_link.pid, vendor_pid, shard_pids))

    def end_run(self) -> None:
        """At `test_stop`: drain the engine(s), keep the vendor's truth, finish run.json, print the summary. A shape
        that ended on its own under the web UI is finished off Locust's shape greenlet: Locust ignores a new test
        while that greenlet lives, and a drain takes seconds; the next test waits for it (`prepare_test`)."""
        if self.ended or self.run_id is None or self._ending is not None:
            return
        if getattr(self.environment, "web_ui", None) is not None and gevent.getcurrent() is getattr(
            self.runner, "shape_greenlet", None
        ):
            self._ending = gevent.spawn(self._end_run)
            return
        self._end_run()

    def wait_for_last_run(self) -> None:
        """Until the last run's end (drain, run.json, summary) is done, if it is being finished in the background."""
        ending, self._ending = self._ending, None
        if ending is not None:
            ending.join()

    def _end_run(self) -> None:
        mark("end: test stopped")
        self.run_ready.clear()
        if self.progress is not None:
            self.engine_link.refresh_live(self.state)  # the final line's counts: the engine's now
            self.progress.stop()  # its final line names the stage the run ended in
            self.progress = None
        final_stage = self.state.end_run()
        self.live_vendor = None
        self.stopping.end_run()
        self.engine_link.stop_polling()
        if self.worker_link is not None:
            # Off Locust's message loop: a long drain must not starve the master's heartbeats.
            self._finishing = gevent.spawn(self._finish_worker)
            return
        # Locust's reports while the engine drains (a master's wait for its workers' last statistics, below)
        early_reports = self.record.finish_reports if self.record and not self.master_link else None
        summary = self.engine_link.drain(meanwhile=early_reports if self.role.owns_run_folder else None)
        mark("end: engine drained")
        if summary is not None:
            self.engine_summaries = [{**summary, "locust_process": process_usage()}]
        if self.master_link is not None:
            self.engine_summaries = self.master_link.wait_for_workers()
        if not self.role.owns_run_folder or self.record is None:
            return
        if early_reports is None:
            self.record.finish_reports()
        self.embedded.save_truth(self.record.run_dir, str(self.run_id))
        mark("end: vendor truth saved")
        if getattr(self.environment, "web_ui", None) is None:
            # No test follows (no web UI): the engine has drained and the vendor's record is saved, so both end
            # while the run is concluded, not after it; one turn of the loop sends each its stop.
            self._retiring = [gevent.spawn(self.engine_link.shutdown), gevent.spawn(self.embedded.stop)]
            gevent.sleep(0)
        shape = self.shape
        end = RunEnd(
            ending=self.ending,
            engines=self.engine_summaries,
            dropped_starts=dict(self.state.live.dropped),
            is_master=self.role.is_master,
            shape_outcome=shape.outcome if shape is not None else None,
            final_stage=final_stage.name,
            stopped_by=self.stopping.stopped_by,
        )
        conclusion = conclude(self.record, end, self.settings.thresholds, self.settings.seconds)
        self.exit_code = conclusion.exit_code
        cut_short = (EXIT_INTERRUPTED, EXIT_ABORTED) if self.counts_signals else ()
        if conclusion.exit_code in CONCLUDED_EXITS or conclusion.exit_code in cut_short:
            self.environment.process_exit_code = conclusion.exit_code
        self.summary_text = conclusion.text
        print(self.summary_text, flush=True)
        mark("end: summary printed")

    def _finish_worker(self) -> None:
        summary = self.engine_link.drain()
        if self.worker_link is not None:
            self.worker_link.finish_run(summary)

    def close(self) -> None:
        """At `quitting`: stop the engine and the local vendor."""
        if self.counts_signals and not self.ended and self.run_id is not None and self._ending is None:
            self.note_signal(max(1, self.stopping.signals))  # Locust quit mid-run under `locust -f`: its SIGTERM
        self.wait_for_last_run()
        if not self.ended and self.run_id is not None:
            self.end_run()
        if self._finishing is not None:
            self._finishing.join(timeout=300)
        gevent.joinall(self._retiring)
        self._retiring = []
        self.engine_link.shutdown()
        mark("close: engine stopped")
        self.embedded.stop()
        mark("close: vendor stopped")
        if self.worker_link is not None:
            self.worker_link.close()


_ATTRIBUTE = "stampede"
_PARSED = "stampede_settings"  # settings parsed before Locust's `init` (`stampede run`), taken as they are


def hand_over_settings(environment: Environment, settings: RunSettings) -> None:
    """`stampede run` parsed and checked the settings before Locust started: `init` takes them, not a re-parse."""
    setattr(environment, _PARSED, settings)


def session_of(environment: Any) -> StampedeSession | None:
    """The session `init` attached to this Locust environment (None if stampede could not start here)."""
    session = getattr(environment, _ATTRIBUTE, None)
    return session if isinstance(session, StampedeSession) else None


def _fail(environment: Environment, message: str) -> None:
    """One line, exit status 2, and an orderly stop (no traceback)."""
    session = session_of(environment)
    if session is not None:
        session.failed_to_start = message
        session.run_ready.set()  # users waiting for the run wake and leave: no stop timeout sat out
    print(f"stampede: {message}", file=sys.stderr, flush=True)
    environment.process_exit_code = 2
    environment.stop_timeout = 0
    if environment.runner is not None:
        gevent.spawn(environment.runner.quit)


class _UnaskedSpawnRateWarning(logging.Filter):
    """Locust warns of a spawn rate above 100 whenever it is asked for one; a burst asks for its whole size at once
    (its shape's choice, not the user's). The warning stays for a rate the user gave (-r)."""

    def __init__(self, environment: Environment) -> None:
        super().__init__()
        self.environment = environment

    def filter(self, record: logging.LogRecord) -> bool:
        if "spawn rate is very high" not in record.getMessage():
            return True
        session = session_of(self.environment)
        return session is not None and session.settings.spawn_rate is not None


@events.init_command_line_parser.add_listener
def _on_parser(parser: Any, **_: Any) -> None:
    add_arguments(parser)
    bind_web_ui_to_loopback(parser)


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    if session_of(environment) is not None:
        return
    settings = getattr(environment, _PARSED, None)
    # Locust's own main runs this process (`locust -f`): stampede counts the signals. `stampede run` (its workers
    # too) counts its own and never imports locust.main.
    counts_signals = not isinstance(settings, RunSettings) and "locust.main" in sys.modules
    if not isinstance(settings, RunSettings):
        try:  # `locust -f`: the one parse of stampede's options (a web-form test, or a worker's run, reads its own)
            settings = RunSettings.from_options(environment.parsed_options)
            headless = getattr(environment.parsed_options, "headless", False)
            if headless and not isinstance(environment.runner, WorkerRunner):
                check_provider(settings)  # as `stampede run` does; a web-UI test is checked as it starts
        except UsageError as exc:
            _fail(environment, str(exc))
            return
    session = StampedeSession(environment, settings)
    setattr(environment, _ATTRIBUTE, session)
    watch_workers(environment, session.stopping)
    if counts_signals:
        session.count_signals()
    logging.getLogger("locust.runners").addFilter(_UnaskedSpawnRateWarning(environment))
    try:
        session.offer_web_form()
    except UsageError as exc:  # before the web UI serves a page or any vendor starts
        print(f"stampede: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    try:
        session.start_services()
    except (UsageError, EngineError) as exc:
        _fail(environment, str(exc))


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    session = session_of(environment)
    if session is None or session.failed_to_start:
        return
    try:
        session.begin_run()
    except (UsageError, EngineError) as exc:
        if getattr(environment, "web_ui", None) is not None and session.run_id is None:
            session.refuse_test(str(exc))  # the run never started; the form is still there for the next test
        else:
            _fail(environment, str(exc))


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    session = session_of(environment)
    try:
        if session is not None and not session.failed_to_start:
            session.end_run()
    except Exception as exc:  # Locust would log it and exit 0: a run whose end failed says so and exits 2
        _fail(environment, f"the run's end failed ({type(exc).__name__}: {exc}); its rows stay in its folder")


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_: Any) -> None:
    session = session_of(environment)
    if session is not None:
        session.close()
