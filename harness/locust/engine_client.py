"""The Locust side of the engine bridge: start an engine process and talk to it without blocking gevent.

One Unix-socket connection per Locust process, multiplexed: every greenlet that waits for a rollout waits on
its own `AsyncResult`, and one reader greenlet hands out the answers. Uses gevent's primitives explicitly,
so it cooperates with the hub whether or not the process was monkey-patched.
"""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import gevent.lock
import gevent.queue
import gevent.socket
import gevent.subprocess
from gevent import GreenletExit

from foundation.phase_marks import mark
from harness.locust import early_processes
from harness.wire import messages as msg
from harness.wire.messages import EngineConfig, EngineStats, RolloutRequest, StageUpdate
from harness.wire.protocol import MAX_LINE_BYTES, READY_LINE, SOCKET_DIR_PREFIX, decode, encode

ENGINE_START_TIMEOUT_S = 30.0
LEASE_CHECK_S = 0.25  # how often the leases' watcher checks whether Locust is stopping their users
_NUDGE: dict[str, Any] = {"op": "nudge"}  # the watcher's wake-up of a waiting lease whose user is stopping


def engine_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The engine's environment: this process's (or `env`), never gevent-patched, this checkout first on its path."""
    child_env = dict(os.environ if env is None else env)
    child_env.pop("LOCUST_SKIP_MONKEY_PATCH", None)
    child_env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), os.getcwd(), child_env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    return child_env


def engine_argv(socket_path: str, worker: str, preload: str | None) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness.engine",
        "--socket",
        socket_path,
        "--worker",
        worker,
        "--watch-stdin",
        *(("--preload", preload) if preload else ()),
    ]


def engine_key(worker: str, preload: str | None, env: dict[str, str]) -> early_processes.Key:
    """What an engine is started as, apart from its socket's (random) path."""
    return early_processes.key_of("engine", engine_argv("", worker, preload), env)


def launch_engine(worker: str, preload: str | None, env: dict[str, str]) -> tuple[str, str, gevent.subprocess.Popen]:
    """The engine's process, started: its socket's folder and path, and the process (not yet ready)."""
    socket_dir = tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)
    socket_path = os.path.join(socket_dir, "engine.sock")
    mark("engine: spawned")
    process = gevent.subprocess.Popen(
        engine_argv(socket_path, worker, preload),
        stdin=gevent.subprocess.PIPE,  # closing it (or our death) tells the engine to drain and exit
        stdout=gevent.subprocess.PIPE,
        env=env,
        start_new_session=True,  # a terminal's Ctrl-C reaches us, and we drain the engine in order
    )
    return socket_dir, socket_path, process


class EngineError(Exception):
    """The engine refused a request or went away."""

    def __init__(self, message: str, kind: str = msg.ERROR_HARNESS) -> None:
        super().__init__(message)
        self.kind = kind


OnCancelled = Callable[[dict[str, Any]], None]


class EngineClient:
    """A started engine process and the one connection to it."""

    def __init__(self, process: gevent.subprocess.Popen, sock: gevent.socket.socket, socket_dir: str) -> None:
        self.process = process
        self._sock = sock
        self._socket_dir = socket_dir
        self._ids = itertools.count(1)
        self._waiting: dict[int, gevent.event.AsyncResult] = {}
        self._streams: dict[int, gevent.queue.Queue[dict[str, Any] | BaseException]] = {}
        # Rollouts cancelled from this side (Locust killed the user): their row still comes, to this callback.
        self._cancelled: dict[int, tuple[OnCancelled, bool]] = {}  # request id: (callback, is a lease)
        self._send_lock = gevent.lock.Semaphore()
        self._closed = False
        self._reader = gevent.spawn(self._read_loop)
        self._stopping: dict[int, Callable[[], bool]] = {}  # leases whose user has not been seen stopping yet
        self._watcher: gevent.Greenlet | None = None

    @classmethod
    def spawn(cls, worker: str, *, env: dict[str, str] | None = None, preload: str | None = None) -> EngineClient:
        """Start `python -m harness.engine` in a fresh interpreter (no gevent) and connect to it; `preload`
        names the provider whose adapter it imports while starting (harness.engine.server.preload_provider).
        An engine `stampede run` started ahead for exactly this (`harness.locust.early_processes`) is taken instead."""
        child_env = engine_env(env)
        early = early_processes.take(engine_key(worker, preload, child_env))
        if early is not None:
            mark("engine: taken from the head start")
            process, socket_dir, socket_path = early.process, early.facts["socket_dir"], early.facts["socket_path"]
        else:
            socket_dir, socket_path, process = launch_engine(worker, preload, child_env)
        try:
            with gevent.Timeout(ENGINE_START_TIMEOUT_S, EngineError("engine did not start in time")):
                line = process.stdout.readline().decode(errors="replace").strip()
                if line != READY_LINE:
                    raise EngineError(f"engine failed to start (exit {process.poll()}): {line or 'no output'}")
                mark("engine: ready line read")
            sock = gevent.socket.socket(gevent.socket.AF_UNIX, gevent.socket.SOCK_STREAM)
            sock.connect(socket_path)
        except BaseException:
            process.kill()
            process.wait()
            raise
        return cls(process, sock, socket_dir)

    # -- requests ------------------------------------------------------------------------------------
    def request(
        self, message: dict[str, Any], timeout: float | None = None, on_cancelled: OnCancelled | None = None
    ) -> dict[str, Any]:
        """Send one request and wait cooperatively for its answer; a rollout cancelled by killing the waiting
        greenlet hands its row (outcome `cancelled`) to `on_cancelled` when the engine sends it."""
        if self._closed:
            raise EngineError("engine connection is closed")
        req_id = next(self._ids)
        result = gevent.event.AsyncResult()
        self._waiting[req_id] = result
        try:
            self._send({**message, "id": req_id})
            answer: dict[str, Any] = result.get(timeout=timeout)
        except GreenletExit:
            # Locust killed the user mid-rollout: stop the rollout, the engine terminates its sandbox.
            if message.get("op") == msg.ROLLOUT:
                self._cancel(req_id, on_cancelled, lease=False)
            raise
        except gevent.Timeout:
            raise EngineError(f"engine did not answer {message.get('op')!r} within {timeout}s") from None
        finally:
            self._waiting.pop(req_id, None)
        if answer.get("op") == msg.ERROR:
            raise EngineError(answer.get("message", "engine error"), kind=answer.get("kind", msg.ERROR_HARNESS))
        return answer

    def configure(self, config: EngineConfig, timeout: float = 120.0) -> dict[str, Any]:
        return self.request({"op": msg.CONFIGURE, "config": config.to_wire()}, timeout=timeout)

    def run_rollout(self, request: RolloutRequest, on_cancelled: OnCancelled | None = None) -> dict[str, Any]:
        answer = self.request({"op": msg.ROLLOUT, **request.to_wire()}, on_cancelled=on_cancelled)
        record: dict[str, Any] = answer["record"]
        return record

    def lease(
        self,
        request: RolloutRequest,
        stopping: Callable[[], bool] = lambda: False,
        on_cancelled: OnCancelled | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Rollouts run back to back by the engine for one closed-model user: each row as it arrives.

        No socket round trip between one rollout and the next, so the user's loop is never the harness's
        queue. Once `stopping()` turns true (Locust's graceful stop), the rollout in flight finishes and the
        lease ends; closing the iterator (or killing the greenlet that reads it) cancels the lease and its
        rollout in flight, whose row then goes to `on_cancelled`.
        """
        if self._closed:
            raise EngineError("engine connection is closed")
        req_id = next(self._ids)
        stream: gevent.queue.Queue[dict[str, Any] | BaseException] = gevent.queue.Queue()
        self._streams[req_id] = stream
        finished = released = False
        try:
            self._send({"op": msg.LEASE, "id": req_id, **request.to_wire()})
            self._watch(req_id, stopping)
            while True:
                if not released and stopping():
                    released = True
                    self._try_send({"op": msg.RELEASE, "id": req_id})
                # No timeout per wait (a gevent timer per row): the watcher wakes this wait when the user stops.
                answer = stream.get()
                if answer is _NUDGE:
                    continue
                if isinstance(answer, BaseException):
                    finished = True
                    raise answer
                if answer.get("op") == msg.RELEASED:
                    finished = True
                    return
                if answer.get("op") == msg.ERROR:
                    finished = True
                    raise EngineError(answer.get("message", "engine error"), kind=answer.get("kind", msg.ERROR_HARNESS))
                yield answer["record"]
        finally:
            self._streams.pop(req_id, None)
            self._stopping.pop(req_id, None)
            if not finished:
                self._cancel(req_id, on_cancelled, lease=True)

    def _watch(self, req_id: int, stopping: Callable[[], bool]) -> None:
        """Have the watcher look at this lease's `stopping()` every LEASE_CHECK_S while its user waits for a row."""
        self._stopping[req_id] = stopping
        if self._watcher is None or self._watcher.dead:
            self._watcher = gevent.spawn(self._watch_leases)

    def _watch_leases(self) -> None:
        """One greenlet for every lease of this connection: a lease whose user Locust is stopping is woken (it
        releases at once) instead of each lease waking itself every LEASE_CHECK_S. Ends with the connection."""
        while not self._closed and self._stopping:
            gevent.sleep(LEASE_CHECK_S)
            for req_id, stopping in list(self._stopping.items()):
                if stopping():
                    self._stopping.pop(req_id, None)
                    stream = self._streams.get(req_id)
                    if stream is not None:
                        stream.put(_NUDGE)

    def stage(self, update: StageUpdate) -> None:
        """What leased rollouts record from now on (no answer)."""
        self._try_send({"op": msg.STAGE, **update.to_wire()})

    def stats(self, timeout: float = 10.0) -> EngineStats | None:
        stats = self.request({"op": msg.STATS}, timeout=timeout).get("stats")
        return EngineStats.from_wire(stats) if stats else None

    def drain(self, timeout: float = 180.0) -> dict[str, Any]:
        summary: dict[str, Any] = self.request({"op": msg.DRAIN}, timeout=timeout)["summary"]
        return summary

    def shutdown(self, timeout: float = 180.0) -> dict[str, Any] | None:
        """Drain, stop the engine process and wait for it (killing it only if it hangs)."""
        summary = None
        if not self._closed and self.process.poll() is None:
            try:
                summary = self.request({"op": msg.SHUTDOWN}, timeout=timeout).get("summary")
            except EngineError:
                summary = None
        self._close_socket()
        try:
            self.process.wait(timeout=30)
        except gevent.subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return summary

    # -- plumbing ------------------------------------------------------------------------------------
    def _send(self, message: dict[str, Any]) -> None:
        data = encode(message)
        with self._send_lock:
            self._sock.sendall(data)

    def _cancel(self, req_id: int, on_cancelled: OnCancelled | None, *, lease: bool) -> None:
        if on_cancelled is not None and not self._closed:
            self._cancelled[req_id] = (on_cancelled, lease)
        self._try_send({"op": msg.CANCEL, "id": req_id})

    def _hand_over_cancelled(self, message: dict[str, Any]) -> None:
        """An answer to a request nobody waits for any more: each row (the cancelled rollout's) goes to its
        callback; a rollout is forgotten after its one answer, a lease once it is released or refused."""
        req_id = int(message.get("id") or 0)
        callback, lease = self._cancelled[req_id]
        if message.get("op") == msg.RESULT:
            if not lease:
                del self._cancelled[req_id]
            try:
                callback(message["record"])
            except Exception:  # a live-view callback must never end the reader
                pass
        else:
            del self._cancelled[req_id]

    def _try_send(self, message: dict[str, Any]) -> None:
        try:
            self._send(message)
        except OSError:
            pass

    def _read_loop(self) -> None:
        buffer = b""
        try:
            while True:
                chunk = self._sock.recv(1 << 16)
                if not chunk:
                    break
                buffer += chunk
                if len(buffer) > MAX_LINE_BYTES:
                    raise EngineError("engine answer too long")
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    message = decode(line)
                    stream = self._streams.get(message.get("id"))  # type: ignore[arg-type]
                    if stream is not None:
                        stream.put(message)
                        continue
                    waiter = self._waiting.get(message.get("id"))  # type: ignore[arg-type]
                    if waiter is not None and not waiter.ready():
                        waiter.set(message)
                    elif message.get("id") in self._cancelled:
                        self._hand_over_cancelled(message)
        except (OSError, ValueError, EngineError):
            pass
        finally:
            self._closed = True
            self._cancelled.clear()
            failure = EngineError(f"engine process ended (exit {self.process.poll()})")
            for waiter in list(self._waiting.values()):
                if not waiter.ready():
                    waiter.set_exception(failure)
            for stream in list(self._streams.values()):
                stream.put(failure)

    def _close_socket(self) -> None:
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass
        try:
            os.rmdir(self._socket_dir)
        except OSError:
            pass

    @property
    def alive(self) -> bool:
        return not self._closed and self.process.poll() is None
