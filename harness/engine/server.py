"""The rollout engine: a plain asyncio process that owns every live sandbox of one Locust process.

Locust runs under gevent, which asyncio clients (aiohttp, grpclib, the vendors' SDKs) are not built for, so
provider code never runs there. Each Locust process (local, or each worker after the fork) starts one engine
(`python -m harness.engine`), asks it over a Unix socket to run rollouts, and gets back per-phase timings
measured here. The engine's records are the source of truth; it writes them as parquet shards while the run
goes, and on drain it terminates every sandbox it still holds and sweeps the run's label for leftovers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import sys
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.engine.health import LoopHealth
from harness.engine.rollout import RolloutCancelled, RolloutContext, RolloutPlan, SandboxRegistry, run_rollout
from harness.engine.shards import ShardWriter, safe_name
from harness.engine.trainer import Ticket, TrainerEmulator, TrainerSettings
from harness.wire.protocol import MAX_LINE_BYTES, READY_LINE, decode, encode
from harness.wire.records import OUTCOME_CANCELLED, OUTCOME_FAILED, OUTCOME_OK, RolloutRecord
from harness.wire.stage_counters import StageStats
from providers import create_provider
from providers.base import INIT_FAILURE_KINDS, Provider, ProviderConfigError, ProviderError
from providers.open_files import raise_open_files_limit

RECENT_WINDOW_S = 10.0
DRAIN_TIMEOUT_S = 120.0


@dataclass(slots=True)
class EngineConfig:
    """Everything an engine needs for one run; sent by the Locust side as JSON."""

    run_id: str
    worker: str
    out_dir: str
    provider: str
    provider_options: dict[str, Any] = field(default_factory=dict)
    profile: str = ""
    scenario: str = ""
    plan: dict[str, Any] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    flush_interval_s: float = 2.0
    trainer: dict[str, Any] | None = None  # `stampede rehearse`: an emulated trainer (harness.engine.trainer)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineConfig:
        known = {name for name in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown engine config keys: {sorted(unknown)}")
        return cls(**dict(data))

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.run_id


class RehearsalOver(Exception):
    """The emulated trainer has all its steps: no more rollouts are admitted."""


class EngineRun:
    """One configured run: provider, plan, collector, live sandboxes and counters."""

    def __init__(self, config: EngineConfig, provider: Provider, health: LoopHealth) -> None:
        self.config = config
        self.provider = provider
        self.plan = RolloutPlan.from_dict(config.plan)
        self.health = health
        self.writer = ShardWriter(config.run_dir, config.worker, flush_interval_s=config.flush_interval_s)
        self.registry = SandboxRegistry()
        self.tasks: dict[str, asyncio.Task[RolloutRecord]] = {}
        self.versions = dict(provider.versions())
        self.sdk_version = ";".join(f"{name}={version}" for name, version in sorted(self.versions.items()))
        self.seq = 0
        self.inflight = 0
        self.peak_inflight = 0
        self.peak_live = 0
        self.started = 0
        self.outcomes: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.recent: deque[tuple[float, float | None, bool]] = deque()
        self.stage_stats: dict[str, StageStats] = {}
        self.accepting = True
        self.t_start = time.time()
        self.trainer: TrainerEmulator | None = None
        self.tickets: dict[str, Ticket] = {}
        self.killed: set[str] = set()
        if config.trainer is not None:
            self.trainer = TrainerEmulator(TrainerSettings.from_dict(config.trainer), config.run_dir, config.worker)
            self.trainer.kill = self.kill_step
            self.trainer.start()

    def next_rollout_id(self) -> str:
        self.seq += 1
        return f"{safe_name(self.config.worker)}-{self.seq:07d}"

    def start(self, request: Mapping[str, Any]) -> asyncio.Task[RolloutRecord]:
        """A rollout task: admitted by the emulated trainer when there is one, then run and recorded."""
        if self.trainer is None:
            return self._dispatch(request, None)
        return asyncio.get_running_loop().create_task(self._admitted(request))

    async def _admitted(self, request: Mapping[str, Any]) -> RolloutRecord:
        assert self.trainer is not None
        if self.trainer.done.is_set():
            raise RehearsalOver()
        waiter = asyncio.ensure_future(self.trainer.admit())
        done = asyncio.ensure_future(self.trainer.done.wait())
        try:
            finished, _ = await asyncio.wait({waiter, done}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            done.cancel()
        if waiter not in finished:
            waiter.cancel()
            raise RehearsalOver()
        return await self._dispatch(request, waiter.result())

    def kill_step(self, step: int) -> None:
        """Sync oversampling: the step has its samples; cancel its rollouts still running."""
        for rollout_id, ticket in list(self.tickets.items()):
            task = self.tasks.get(rollout_id)
            if ticket.step == step and task is not None and not task.done():
                self.killed.add(rollout_id)
                task.cancel()

    def _dispatch(self, request: Mapping[str, Any], ticket: Ticket | None) -> asyncio.Task[RolloutRecord]:
        rollout_id = self.next_rollout_id()
        if ticket is not None:
            self.tickets[rollout_id] = ticket
        self.inflight += 1
        self.started += 1
        self.peak_inflight = max(self.peak_inflight, self.inflight)
        ctx = RolloutContext(
            run_id=self.config.run_id,
            worker=self.config.worker,
            rollout_id=rollout_id,
            provider=self.config.provider,
            profile=self.config.profile,
            scenario=self.config.scenario,
            stage=str(request.get("stage", "")),
            target_users=int(request.get("target_users", 0)),
            inflight_at_submit=self.inflight,
            sdk_version=self.sdk_version,
            t_intended=request.get("t_intended"),
            attempt=int(request.get("attempt", 1)),
            secrets=tuple(self.config.secrets),
        )
        task = asyncio.get_running_loop().create_task(self._run_and_record(ctx))
        self.tasks[rollout_id] = task
        return task

    async def _run_and_record(self, ctx: RolloutContext) -> RolloutRecord:
        """Every attempt is kept whatever happens to it (done, failed, cancelled, or our own bug).

        Init failures (the sandbox never became usable) are retried up to `plan.retries` times, as an RL
        generator's retry policy would; each attempt is its own row, numbered by `attempt`.
        """
        outcome = "cancelled"  # what the rollout came to, for the emulated trainer
        try:
            while True:
                record = await self._attempt(ctx)
                self.record_row(record)
                outcome = record.outcome
                if not self._retryable(record) or ctx.attempt > self.plan.retries:
                    return record
                await asyncio.sleep(self.plan.retry_backoff_s * self.plan.time_scale)
                ctx = dataclasses.replace(ctx, attempt=ctx.attempt + 1, inflight_at_submit=self.inflight)
        finally:
            self.tasks.pop(ctx.rollout_id, None)
            self.inflight -= 1
            self.stage_stats.setdefault(ctx.stage, StageStats()).ended += 1
            ticket = self.tickets.pop(ctx.rollout_id, None)
            if ticket is not None and self.trainer is not None:
                killed = ctx.rollout_id in self.killed
                self.killed.discard(ctx.rollout_id)
                self.trainer.finished(ticket, outcome, killed)

    async def _attempt(self, ctx: RolloutContext) -> RolloutRecord:
        try:
            return await run_rollout(self.provider, self.plan, ctx, self.writer.add_op, self.registry)
        except RolloutCancelled as cancelled:
            if ctx.rollout_id in self.killed:
                cancelled.record.error = "killed: the step already had its samples (oversampling)"
            return cancelled.record
        except Exception as exc:  # a bug of ours: recorded as `harness`, never a crash
            record = ctx.new_record()
            record.outcome, record.failure_kind, record.failure_phase = OUTCOME_FAILED, "harness", "create"
            record.error = f"{type(exc).__name__}: {exc}"[:300]
            return record

    @staticmethod
    def _retryable(record: RolloutRecord) -> bool:
        return (
            record.outcome == OUTCOME_FAILED
            and record.failure_phase in ("create", "ready")
            and record.failure_kind in INIT_FAILURE_KINDS
        )

    def record_row(self, record: RolloutRecord) -> None:
        self.stage_stats.setdefault(record.stage, StageStats()).add(record.outcome, record.failure_kind, record.tti_s)
        self.writer.add_rollout(record)
        self.outcomes[record.outcome] += 1
        if record.failure_kind:
            self.failures[record.failure_kind] += 1
        self.peak_live = max(self.peak_live, len(self.registry))
        now = time.monotonic()
        self.recent.append((now, record.tti_s, record.outcome == OUTCOME_OK))
        while self.recent and self.recent[0][0] < now - RECENT_WINDOW_S:
            self.recent.popleft()

    def stats(self) -> dict[str, Any]:
        ttis = sorted(tti for _, tti, _ in self.recent if tti is not None)

        def quantile(q: float) -> float | None:
            if not ttis:
                return None
            return ttis[min(len(ttis) - 1, int(q * len(ttis)))]

        health = self.health.snapshot()
        return {
            "run_id": self.config.run_id,
            "worker": self.config.worker,
            "inflight": self.inflight,
            "started": self.started,
            "ok": self.outcomes[OUTCOME_OK],
            "failed": self.outcomes[OUTCOME_FAILED],
            "cancelled": self.outcomes[OUTCOME_CANCELLED],
            "failures": dict(self.failures),
            "live_sandboxes": len(self.registry),
            "peak_inflight": self.peak_inflight,
            "recent_tti_p50_s": quantile(0.5),
            "recent_tti_p99_s": quantile(0.99),
            "recent_completed": len(self.recent),
            "health": asdict(health),
            "rows_written": self.writer.counts.rollouts,
            "stages": {name: stats.to_wire() for name, stats in self.stage_stats.items()},
            "trainer": None
            if self.trainer is None
            else {"steps_done": len(self.trainer.steps), "done": self.trainer.done.is_set(), **self.trainer.counts},
        }

    async def drain(self, timeout_s: float) -> dict[str, Any]:
        """Stop everything: cancel rollouts, terminate what they held, sweep the label, flush the shards."""
        self.accepting = False
        deadline = time.monotonic() + timeout_s
        rehearsal: dict[str, Any] | None = None
        if self.trainer is not None:  # no more admissions: waiting requests are told the rehearsal is over
            self.trainer.done.set()
            self.trainer._notify()
            await self.trainer.stop()
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=max(1.0, deadline - time.monotonic()))
        leftovers = self.registry.snapshot()
        terminate_errors = 0
        if leftovers:
            results = await _bounded_gather(
                [self.provider.terminate(ref) for ref in leftovers], max(1.0, deadline - time.monotonic())
            )
            for ref, result in zip(leftovers, results, strict=True):
                if isinstance(result, BaseException):
                    terminate_errors += 1
                else:
                    self.registry.discard(ref)
        reaped: int | None = None
        sweep_error: str | None = None
        try:
            async with asyncio.timeout(max(1.0, deadline - time.monotonic())):
                # this engine's leftovers only: in a distributed run the others are still working
                reaped = await self.provider.cleanup(self.config.run_id, self.config.worker)
        except Exception as exc:  # an unreachable vendor must not lose the results
            sweep_error = f"{type(exc).__name__}: {exc}"[:300]
        await self.writer.close()
        if self.trainer is not None:
            rehearsal = await asyncio.to_thread(self.trainer.write)
            await asyncio.to_thread(
                _write_json, self.config.run_dir / f"rehearsal-{safe_name(self.config.worker)}.json", rehearsal
            )
        health = self.health.snapshot()
        summary = {
            "worker": self.config.worker,
            "run_id": self.config.run_id,
            "started": self.started,
            "outcomes": dict(self.outcomes),
            "failures": dict(self.failures),
            "unfinished_tasks": sum(1 for task in tasks if not task.done()),
            "terminated_leftovers": len(leftovers) - terminate_errors,
            "terminate_errors": terminate_errors,
            "reaped_by_label": reaped,
            "sweep_error": sweep_error,
            "rows": {"rollouts": self.writer.counts.rollouts, "ops": self.writer.counts.ops},
            "peak_inflight": self.peak_inflight,
            "peak_live_sandboxes": self.peak_live,
            "versions": self.versions,
            "health": asdict(health),
            "t_start": self.t_start,
            "t_end": time.time(),
            "rehearsal": rehearsal,
        }
        await asyncio.to_thread(
            _write_json, self.config.run_dir / f"engine-{safe_name(self.config.worker)}.json", summary
        )
        with contextlib.suppress(Exception):
            await self.provider.aclose()
        return summary


async def _bounded_gather(calls: list[Any], timeout_s: float) -> list[Any]:
    tasks = [asyncio.ensure_future(call) for call in calls]
    _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    results: list[Any] = []
    for task in tasks:
        if task in pending:
            results.append(TimeoutError("terminate did not finish before the drain deadline"))
        elif task.exception() is not None:
            results.append(task.exception())
        else:
            results.append(task.result())
    return results


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


class Engine:
    """Serves the engine protocol on a Unix socket; at most one run configured at a time."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self.health = LoopHealth()
        self.run: EngineRun | None = None
        self.stopped = asyncio.Event()
        self._configure_lock = asyncio.Lock()
        self._last_summary: dict[str, Any] | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    async def configure(self, data: Mapping[str, Any]) -> dict[str, Any]:
        async with self._configure_lock:
            if self.run is not None:
                await self.drain()
            config = EngineConfig.from_dict({"worker": self.worker, **data})
            provider = create_provider(config.provider, config.provider_options)
            try:
                await provider.preflight()
            except BaseException:
                with contextlib.suppress(Exception):
                    await provider.aclose()
                raise
            self.health.reset()
            self.run = EngineRun(config, provider, self.health)
            self.run.writer.start()
            return {"versions": self.run.versions, "worker": config.worker}

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> dict[str, Any]:
        run, self.run = self.run, None
        if run is None:
            return self._last_summary or {"started": 0}
        self._last_summary = await run.drain(timeout_s)
        return self._last_summary

    async def close_connections(self) -> None:
        """Let connection handlers finish their last answers, then end them (a clean interpreter exit)."""
        handlers = [task for task in self._handlers if not task.done()]
        for task in handlers:
            task.cancel()
        if handlers:
            await asyncio.wait(handlers, timeout=10)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection; requests are served concurrently, answers carry their request id."""
        current = asyncio.current_task()
        if current is not None:
            self._handlers.add(current)
            current.add_done_callback(self._handlers.discard)
        pending: set[asyncio.Task[None]] = set()

        def send(message: dict[str, Any]) -> None:
            if not writer.is_closing():
                writer.write(encode(message))

        async def serve(message: dict[str, Any]) -> None:
            op, req_id = message.get("op"), message.get("id")
            try:
                if op == "configure":
                    send({"op": "configured", "id": req_id, **await self.configure(message.get("config", {}))})
                elif op == "stats":
                    send({"op": "stats", "id": req_id, "stats": self.run.stats() if self.run else None})
                elif op == "drain":
                    send(
                        {
                            "op": "drained",
                            "id": req_id,
                            "summary": await self.drain(message.get("timeout_s", DRAIN_TIMEOUT_S)),
                        }
                    )
                elif op == "shutdown":
                    send({"op": "drained", "id": req_id, "summary": await self.drain()})
                    self.stopped.set()
                else:
                    send({"op": "error", "id": req_id, "kind": "harness", "message": f"unknown op {op!r}"})
            except (ProviderConfigError, ProviderError) as exc:
                send({"op": "error", "id": req_id, "kind": "config", "message": str(exc)})
            except Exception as exc:
                send({"op": "error", "id": req_id, "kind": "harness", "message": f"{type(exc).__name__}: {exc}"})

        async def run_one(req_id: Any, message: dict[str, Any]) -> None:
            run = self.run
            if run is None or not run.accepting:
                send({"op": "error", "id": req_id, "kind": "not_configured", "message": "engine has no active run"})
                return
            task = run.start(message)
            tasks_by_request[req_id] = task
            try:
                record = await asyncio.shield(task)
            except asyncio.CancelledError:
                return  # the connection is going away; the task still records itself and the drain owns it
            except RehearsalOver:
                send({"op": "error", "id": req_id, "kind": "done", "message": "the rehearsal has all its steps"})
                return
            finally:
                tasks_by_request.pop(req_id, None)
            send({"op": "result", "id": req_id, "record": record.to_row()})

        tasks_by_request: dict[Any, asyncio.Task[RolloutRecord]] = {}
        try:
            while not reader.at_eof():
                line = await reader.readline()
                if not line:
                    break
                try:
                    message = decode(line)
                except ValueError as exc:
                    send({"op": "error", "id": None, "kind": "harness", "message": f"bad message: {exc}"})
                    continue
                if message["op"] == "rollout":
                    spawned = asyncio.get_running_loop().create_task(run_one(message.get("id"), message))
                elif message["op"] == "cancel":
                    task = tasks_by_request.get(message.get("id"))
                    if task is not None:
                        task.cancel()
                    continue
                else:
                    spawned = asyncio.get_running_loop().create_task(serve(message))
                pending.add(spawned)
                spawned.add_done_callback(pending.discard)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            # The Locust side went away: its rollouts have no one waiting, stop them (the sandboxes are
            # terminated by the rollouts themselves and the drain).
            for task in list(tasks_by_request.values()):
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=DRAIN_TIMEOUT_S)
            with contextlib.suppress(Exception):
                writer.close()


async def serve_engine(socket_path: str, worker: str, *, watch_stdin: bool) -> int:
    """Run until shutdown, a signal, or (with `watch_stdin`) the parent closing our stdin."""
    raise_open_files_limit()
    engine = Engine(worker)
    engine.health.start()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    server = await asyncio.start_unix_server(engine.handle, path=socket_path, limit=MAX_LINE_BYTES)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, engine.stopped.set)
    watcher = loop.create_task(_watch_parent(engine.stopped)) if watch_stdin else None  # keep a reference
    print(READY_LINE, flush=True)
    await engine.stopped.wait()
    server.close()
    await engine.drain()
    await engine.health.stop()
    if watcher is not None:
        watcher.cancel()
    await engine.close_connections()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    return 0


async def _watch_parent(stopped: asyncio.Event) -> None:
    """Our stdin is a pipe from the Locust process: EOF means it died, so drain and leave no sandbox."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except (OSError, ValueError):
        return
    while await reader.read(4096):
        pass
    stopped.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.engine", description=__doc__)
    parser.add_argument("--socket", required=True, help="Unix socket path to listen on")
    parser.add_argument(
        "--worker", default=f"{socket.gethostname()}-{os.getpid()}", help="name of this engine in the results"
    )
    parser.add_argument("--watch-stdin", action="store_true", help="drain and exit when stdin closes")
    args = parser.parse_args(argv)
    return asyncio.run(serve_engine(args.socket, args.worker, watch_stdin=args.watch_stdin))
