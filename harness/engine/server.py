"""The rollout engine: a plain asyncio process that owns every live sandbox of one Locust process.

Locust runs under gevent, which asyncio clients (aiohttp, grpclib, the vendors' SDKs) are not built for, so
provider code never runs there. Each Locust process (local, or each worker after the fork) starts one engine
(`python -m harness.engine`), asks it over a Unix socket to run rollouts, and gets back per-phase timings
measured here. The engine's records are the source of truth; it writes them as parquet shards while the run
goes, and on drain it terminates every sandbox it still holds and sweeps the run's label for leftovers.

This module is the process: the socket server, signals and the parent watch. One run's state is `run.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from foundation.gc_freezing import freeze_survivors, tune_for_latency
from foundation.open_files import raise_open_files_limit
from foundation.phase_marks import mark
from harness.engine.health import LoopHealth
from harness.engine.health_rows import HealthRows
from harness.engine.orphaned_futures import OrphanedFutureFilter
from harness.engine.paced_cancel import CancelPacer
from harness.engine.run import EngineRun, RehearsalOver
from harness.wire import messages as msg
from harness.wire.messages import EngineConfig, RolloutRequest, StageUpdate
from harness.wire.protocol import MAX_LINE_BYTES, READY_LINE, SOCKET_DIR_PREFIX, decode, encode
from harness.wire.records import RolloutRecord, live_row, warm_file_types
from harness.wire.redact import RedactingFormatter, redact, secret_values
from providers import create_provider
from providers.base import ProviderConfigError, ProviderError

DRAIN_TIMEOUT_S = 120.0
LEASE_ROW_BATCH_S = 0.005  # how long a leased rollout's row may wait for others to share its write to Locust
STARTS_PER_TURN = 64
"""At most this many rollouts started before the reader gives the loop a turn. A burst's starts arrive as one
flood of lines, which `readline` hands over without ever suspending: unsliced, every rollout's first step (its
create request built and sent) ran in one loop iteration, and the answers already back, and the lag probe,
waited for all of them (the burst-hold protocol's surge, `scenarios/burst-hold.py`)."""
WARM_WAIT_S = 30.0  # the longest a run's configure waits for the file types' imports (a starved machine's)


class StartSlicer:
    """Gives the loop a turn after every `per_turn` rollouts started from one connection (STARTS_PER_TURN)."""

    def __init__(self, per_turn: int = STARTS_PER_TURN) -> None:
        self.per_turn = max(1, per_turn)
        self._since_turn = 0

    async def before_start(self) -> None:
        self._since_turn += 1
        if self._since_turn > self.per_turn:
            self._since_turn = 1
            await asyncio.sleep(0)  # the started ones take their first step, answers are read


class Engine:
    """Serves the engine protocol on a Unix socket; at most one run configured at a time."""

    def __init__(self, worker: str, file_types_warm: threading.Event | None = None) -> None:
        self.worker = worker
        self.file_types_warm = file_types_warm  # set once `warm_file_types` is done (None: nothing to wait for)
        self.health = LoopHealth()
        self.run: EngineRun | None = None
        self.health_rows: HealthRows | None = None  # the run's engine_health/ rows every 5 s
        self.stopped = asyncio.Event()
        self._configure_lock = asyncio.Lock()
        self._last_summary: dict[str, Any] | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self.cancels = CancelPacer()
        self._draining: EngineRun | None = None
        self.hurried = False
        self.secrets: tuple[str, ...] = ()  # the configured run's: every answer and log line is redacted

    async def configure(self, data: Mapping[str, Any]) -> dict[str, Any]:
        async with self._configure_lock:
            if self.run is not None:
                await self.drain()
            config = EngineConfig.from_wire({"worker": self.worker, **data})
            self.secrets = (*config.secrets, *secret_values(config.provider_options))
            redact_logs(self.secrets)
            provider = create_provider(config.provider, config.provider_options)
            try:
                await provider.preflight()
            except BaseException:
                with contextlib.suppress(Exception):
                    await provider.aclose()
                raise
            if self.file_types_warm is not None:
                # the imports hold the interpreter for up to a few hundred ms (an extension module's init at once):
                # done before the first rollout, not during a burst's creates (and frozen below with the rest)
                await asyncio.to_thread(self.file_types_warm.wait, WARM_WAIT_S)
            tune_for_latency()  # its one full collection before the run's lag record starts
            self.health.reset()
            self.run = EngineRun(config, provider, self.health)
            self.run.writer.start()
            run = self.run
            self.health_rows = HealthRows(
                config.run_dir, config.run_id, config.worker, self.health, lambda: run.inflight
            )
            self.health_rows.start()
            mark("engine process: configured")
            return {"versions": self.run.versions, "worker": config.worker}

    def hurry(self) -> None:
        """SIGUSR2, the Locust side's abort (a second Ctrl-C): drain with no grace for rollouts."""
        self.hurried = True
        for run in (self.run, self._draining):
            if run is not None:
                run.hurry()

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> dict[str, Any]:
        run, self.run = self.run, None
        if run is None:
            return self._last_summary or {"started": 0}
        self._draining = run
        if self.hurried:
            run.hurry()
        try:
            self._last_summary = await run.drain(timeout_s)
        finally:
            self._draining = None
            rows, self.health_rows = self.health_rows, None
            if rows is not None:  # written before the drain answers: a worker ships its files then
                await rows.stop()
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
        pending: set[asyncio.Future[Any]] = set()
        loop = asyncio.get_running_loop()
        # The answers of one loop iteration go out as one write: a syscall (and a wake-up of the Locust side) for
        # the rows that end together, not one each. A leased rollout's row, which only Locust's live view waits
        # for, may wait LEASE_ROW_BATCH_S for the rows that end after it; any other answer flushes at once.
        outbox: list[bytes] = []
        timer: asyncio.TimerHandle | None = None
        flush_soon = False

        def flush() -> None:
            nonlocal timer, flush_soon
            if timer is not None:
                timer.cancel()
            timer, flush_soon = None, False
            data = b"".join(outbox)
            outbox.clear()
            if data and not writer.is_closing():
                writer.write(data)

        def send(message: dict[str, Any], *, lease_row: bool = False) -> None:
            nonlocal timer, flush_soon
            if writer.is_closing():
                return
            outbox.append(encode(message))
            if not lease_row and not flush_soon:
                flush_soon = True
                loop.call_soon(flush)
            elif lease_row and timer is None and not flush_soon:
                timer = loop.call_later(LEASE_ROW_BATCH_S, flush)

        def error(req_id: Any, kind: str, message: str) -> None:
            send({"op": msg.ERROR, "id": req_id, "kind": kind, "message": redact(message, self.secrets)})

        async def configure(message: Mapping[str, Any]) -> dict[str, Any]:
            return {"op": msg.CONFIGURED, **await self.configure(message.get("config", {}))}

        async def stats(_: Mapping[str, Any]) -> dict[str, Any]:
            return {"op": msg.STATS, "stats": self.run.stats().to_wire() if self.run else None}

        async def drain(message: Mapping[str, Any]) -> dict[str, Any]:
            return {"op": msg.DRAINED, "summary": await self.drain(message.get("timeout_s", DRAIN_TIMEOUT_S))}

        async def shutdown(_: Mapping[str, Any]) -> dict[str, Any]:
            answer = {"op": msg.DRAINED, "summary": await self.drain()}
            self.stopped.set()
            return answer

        handlers: dict[str, Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]] = {
            msg.CONFIGURE: configure,
            msg.STATS: stats,
            msg.DRAIN: drain,
            msg.SHUTDOWN: shutdown,
        }

        async def serve(message: dict[str, Any]) -> None:
            op, req_id = message.get("op"), message.get("id")
            handler = handlers.get(str(op))
            if handler is None:
                error(req_id, msg.ERROR_HARNESS, f"unknown op {op!r}")
                return
            try:
                send({**await handler(message), "id": req_id})
            except (ProviderConfigError, ProviderError) as exc:
                error(req_id, msg.ERROR_CONFIG, str(exc))
            except Exception as exc:
                error(req_id, msg.ERROR_HARNESS, f"{type(exc).__name__}: {exc}")

        def start_rollout(
            req_id: Any, lease: RolloutRequest | None, message: dict[str, Any]
        ) -> asyncio.Task[RolloutRecord] | None:
            """One rollout for a request (or the next of a lease), started; None: refused, and answered so."""
            run = self.run
            if run is None or not run.accepting:
                error(req_id, msg.ERROR_NOT_CONFIGURED, "engine has no active run")
                return None
            request = run.leased_request(lease) if lease is not None else RolloutRequest.from_wire(message)
            if run.started == 0:
                mark("engine process: first rollout")
            task = run.start(request)
            tasks_by_request[req_id] = task
            return task

        async def run_one(req_id: Any, message: dict[str, Any]) -> None:
            """One rollout, answered with its row."""
            task = start_rollout(req_id, None, message)
            if task is None:
                return
            try:
                record = await asyncio.shield(task)
            except asyncio.CancelledError:
                return  # the connection is going away; the task still records itself, the drain owns it
            except RehearsalOver:
                error(req_id, msg.ERROR_DONE, "the rehearsal has all its steps")
                return
            finally:
                tasks_by_request.pop(req_id, None)
            send({"op": msg.RESULT, "id": req_id, "record": record.to_row()})

        def lease(req_id: Any, message: dict[str, Any]) -> asyncio.Future[None]:
            """Rollouts back to back for one closed-model user, until it cancels, releases or the run ends; done
            when the lease is. Each rollout starts from the end of the one before (its task's done callback): no
            coroutine waits between them, so a lifecycle costs no shield and no wake-up of a waiting task."""
            request = RolloutRequest.from_wire(message)
            leases.add(req_id)
            over: asyncio.Future[None] = loop.create_future()

            def end() -> None:
                leases.discard(req_id)
                ended_leases.discard(req_id)
                if not over.done():
                    over.set_result(None)

            def next_rollout() -> None:
                if req_id in ended_leases:
                    send({"op": msg.RELEASED, "id": req_id})
                    end()
                    return
                task = start_rollout(req_id, request, message)
                if task is None:
                    end()
                    return
                task.add_done_callback(rollout_ended)

            def rollout_ended(task: asyncio.Task[RolloutRecord]) -> None:
                tasks_by_request.pop(req_id, None)
                try:
                    record = task.result()
                except asyncio.CancelledError:
                    end()  # cancelled before it ran: nothing to report
                    return
                except RehearsalOver:
                    error(req_id, msg.ERROR_DONE, "the rehearsal has all its steps")
                    end()
                    return
                except BaseException:
                    end()
                    raise  # our bug: the loop's exception handler reports it
                send({"op": msg.RESULT, "id": req_id, "record": live_row(record)}, lease_row=True)
                next_rollout()

            try:
                next_rollout()
            except BaseException:
                end()
                raise
            return over

        tasks_by_request: dict[Any, asyncio.Task[RolloutRecord]] = {}
        leases: set[Any] = set()
        ended_leases: set[Any] = set()
        slicer = StartSlicer()
        try:
            while not reader.at_eof():
                line = await reader.readline()
                if not line:
                    break
                try:
                    message = decode(line)
                except ValueError as exc:
                    error(None, msg.ERROR_HARNESS, f"bad message: {exc}")
                    continue
                op = message["op"]
                spawned: asyncio.Future[Any]
                if op == msg.ROLLOUT or op == msg.LEASE:
                    await slicer.before_start()
                if op == msg.ROLLOUT:
                    spawned = loop.create_task(run_one(message.get("id"), message))
                elif op == msg.LEASE:
                    spawned = lease(message.get("id"), message)
                elif op == msg.STAGE:
                    update = StageUpdate.from_wire(message)
                    if self.run is not None and update.stage:  # the idle stage at a run's end names none: keep the last
                        self.run.stage = update
                    continue
                elif op == msg.RELEASE:
                    if message.get("id") in leases:
                        ended_leases.add(message.get("id"))  # the rollout in flight finishes first
                    continue
                elif op == msg.CANCEL:
                    if message.get("id") in leases:
                        ended_leases.add(message.get("id"))
                    task = tasks_by_request.get(message.get("id"))
                    if task is not None:
                        self.cancels.cancel(task)  # a stop sends thousands at once: a slice per loop turn
                    continue
                else:
                    spawned = loop.create_task(serve(message))
                pending.add(spawned)
                spawned.add_done_callback(pending.discard)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            # The Locust side went away: its rollouts have no one waiting, stop them (the sandboxes are
            # terminated by the rollouts themselves and the drain).
            for task in list(tasks_by_request.values()):
                self.cancels.cancel(task)
            if pending:
                await asyncio.wait(pending, timeout=DRAIN_TIMEOUT_S)
            with contextlib.suppress(Exception):
                flush()  # the last answers, before the connection closes
                writer.close()


def redact_logs(secrets: tuple[str, ...]) -> None:
    """Whatever a provider or SDK logs reaches the run's stderr only through `redact` (warnings and up)."""
    root = logging.getLogger()
    handler = next((h for h in root.handlers if isinstance(h.formatter, RedactingFormatter)), None)
    if handler is None:
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        root.addHandler(handler)
    handler.setFormatter(RedactingFormatter(secrets, "%(levelname)s %(name)s: %(message)s"))
    if not any(isinstance(f, OrphanedFutureFilter) for f in handler.filters):
        handler.addFilter(OrphanedFutureFilter())


def preload_provider(name: str | None) -> None:
    """Import a provider's adapter (and its SDK) before saying ready, not when `configure` names it.

    The engine starts while the Locust process imports Locust and the simulated vendor starts, so an import
    here is off the way to the first rollout; at `configure` it was on it (~0.2 s for aiohttp, more for an SDK).
    A name that does not load is left for `configure` to report.
    """
    if not name:
        return
    from providers import provider_class

    with contextlib.suppress(Exception):
        provider_class(name)


async def serve_engine(socket_path: str, worker: str, *, watch_stdin: bool, preload: str | None = None) -> int:
    """Run until shutdown, a signal, or (with `watch_stdin`) the parent closing our stdin."""
    mark("engine process: imported")
    raise_open_files_limit()
    preload_provider(preload)
    mark("engine process: provider preloaded")
    file_types_warm = threading.Event()
    engine = Engine(worker, file_types_warm)
    engine.health.start()
    freezer = asyncio.get_running_loop().create_task(freeze_survivors())
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    server = await asyncio.start_unix_server(engine.handle, path=socket_path, limit=MAX_LINE_BYTES)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, engine.stopped.set)
    loop.add_signal_handler(signal.SIGUSR2, engine.hurry)
    watcher = loop.create_task(_watch_parent(engine.stopped)) if watch_stdin else None  # keep a reference
    print(READY_LINE, flush=True)
    # while Locust's side imports and configures; `configure` waits for it, so it is over before the first rollout
    threading.Thread(target=_warm_file_types, args=(file_types_warm,), name="warm-file-types", daemon=True).start()
    await engine.stopped.wait()
    mark("engine process: stopping")
    server.close()
    await engine.drain()
    await engine.health.stop()
    freezer.cancel()
    if watcher is not None:
        watcher.cancel()
    await engine.close_connections()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    # and the folder made for it (harness.locust.engine_client.launch_engine): when the Locust process was killed,
    # no one else is left to remove it; rmdir leaves a folder that holds anything else alone
    folder = os.path.dirname(os.path.abspath(socket_path))
    if os.path.basename(folder).startswith(SOCKET_DIR_PREFIX):
        with contextlib.suppress(OSError):
            os.rmdir(folder)
    mark("engine process: done")
    return 0


def _warm_file_types(done: threading.Event) -> None:
    try:
        warm_file_types()
    finally:
        done.set()  # a failed import is the first flush's to report, not a reason to hold the run
        mark("engine process: file types warm")


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
    parser.add_argument("--preload", default=None, help="import this provider's adapter before saying ready")
    args = parser.parse_args(argv)
    return asyncio.run(serve_engine(args.socket, args.worker, watch_stdin=args.watch_stdin, preload=args.preload))
