"""Distributed runs: what a master and its workers tell each other, over Locust's own messages.

- master -> workers: the current stage (every rollout records it), the burst gate (release a step, close) and
  an interrupt (the master's Ctrl-C/SIGTERM count: stop at once, and from the second on abort);
- workers -> master: engine stats every second (counters and mergeable TTI histograms: the master's live view,
  burst steps and knee search run on them), the parquet shards their engines write, each into its table folder
  (so the master's results folder holds the whole run however many machines took part), and a final `done` with
  the engine's summary.

Locust's messages travel over its master/worker connection (ZeroMQ over TCP), so the same route works for
workers on this machine and on others; nothing relies on a shared filesystem.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import psutil
from locust.rpc import Message

from harness.locust.engine_client import EngineClient
from harness.locust.run_state import MSG_GATE, MSG_STAGE, RunState, Stage
from harness.results.read.layout import files_to_ship, shipped_path
from harness.wire.messages import EngineStats

log = logging.getLogger("stampede")

STATS_INTERVAL_S = 1.0
FORWARD_INTERVAL_S = 1.0
DONE_TIMEOUT_S = 240.0

MSG_STATS = "stampede_stats"
MSG_FILE = "stampede_file"
MSG_DONE = "stampede_done"
MSG_INTERRUPT = "stampede_interrupt"


def process_usage() -> dict[str, float]:
    """This Locust process's own CPU and memory: the harness's cost, beside the engine's."""
    process = psutil.Process()
    times = process.cpu_times()
    return {"cpu_seconds": round(times.user + times.system, 3), "rss_mb": round(process.memory_info().rss / 2**20, 1)}


SENT_DIR = "sent"


class MasterLink:
    """The master's side: broadcasts stage and gate, collects stats, files and summaries from workers."""

    def __init__(self, runner: Any, state: RunState) -> None:
        self.runner = runner
        self.state = state
        self.files: dict[str, int] = {}  # worker node id -> files received
        self.done: dict[str, dict[str, Any]] = {}  # worker node id -> its `done` message
        self._repeater: gevent.Greenlet | None = None
        state.broadcast = self.broadcast
        runner.register_message(MSG_STATS, self._on_stats)
        runner.register_message(MSG_FILE, self._on_file)
        runner.register_message(MSG_DONE, self._on_done)

    def broadcast(self, kind: str, data: dict[str, Any]) -> None:
        self.runner.send_message(kind, data)

    def interrupt(self, count: int) -> None:
        """Workers stop their users at once (no stop timeout), as a local run does on the same signal."""
        self.broadcast(MSG_INTERRUPT, {"count": count})

    def start_run(self) -> None:
        self.files.clear()
        self.done.clear()
        if self._repeater is None:
            self._repeater = gevent.spawn(self._repeat_state)

    def _repeat_state(self) -> None:
        """Stage and gate again every second: a worker that joined late (or missed one) catches up."""
        while True:
            gevent.sleep(STATS_INTERVAL_S)
            state = self.state
            if state.run_id is None or state.ended:
                continue
            self.broadcast(MSG_STAGE, state.stage.to_wire())
            if state.gate_closed:
                self.broadcast(MSG_GATE, {"closed": True})
            elif state.gate_step:
                self.broadcast(MSG_GATE, {"step": state.gate_step})

    def _on_stats(self, environment: Any, msg: Any, **_: Any) -> None:
        data = msg.data or {}
        if data.get("run_id") == self.state.run_id:
            stats = data.get("stats")
            self.state.live.update(
                data.get("engine") or msg.node_id, EngineStats.from_wire(stats) if stats else None, data.get("dropped")
            )
            self.state.note_change()

    def _on_file(self, environment: Any, msg: Any, **_: Any) -> None:
        data = msg.data or {}
        run_dir = self.state.run_dir
        if run_dir is None or data.get("run_id") != self.state.run_id:
            return
        target = shipped_path(run_dir, str(data.get("name", "")))
        if target is None:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = run_dir / f".{target.parent.name}-{target.name}.part"  # outside the table folder: readers see whole files
        tmp.write_bytes(data["data"])
        os.replace(tmp, target)
        self.files[msg.node_id] = self.files.get(msg.node_id, 0) + 1

    def _on_done(self, environment: Any, msg: Any, **_: Any) -> None:
        data = msg.data or {}
        if data.get("run_id") == self.state.run_id:
            self.done[msg.node_id] = data

    def wait_for_workers(self, timeout_s: float = DONE_TIMEOUT_S) -> list[dict[str, Any]]:
        """Until every worker that took part said `done` (bounded): its last shards are in by then.

        When the shape ends, Locust's master quits without telling workers to stop first (they only hear
        `quit` after test_stop): so stop them here, and they drain their engines and report.
        """
        runner = self.runner
        if runner.user_count > 0:
            for client in runner.clients.all:
                runner.server.send_to_client(Message("stop", None, client.id))
        expected = {client.id for client in runner.clients.all} | set(self.files)
        deadline = time.monotonic() + timeout_s
        while expected - set(self.done) and time.monotonic() < deadline:
            gevent.sleep(0.2)
        missing = expected - set(self.done)
        if missing:
            log.warning("no final report from %d worker(s) within %.0fs: %s", len(missing), timeout_s, sorted(missing))
        for node, done in self.done.items():
            if done.get("files") != self.files.get(node, 0):
                log.warning("worker %s sent %s files but %s arrived", node, done.get("files"), self.files.get(node, 0))
        return [done.get("summary") or {} for done in self.done.values()]


class WorkerLink:
    """A worker's side: follows stage and gate, reports stats, ships its engine's shards to the master."""

    def __init__(
        self,
        runner: Any,
        state: RunState,
        name: str,
        engine: Callable[[], EngineClient | None],
        interrupted: Callable[[int], None],
    ) -> None:
        self.runner = runner
        self.interrupted = interrupted
        self.state = state
        self.name = name
        self.engine = engine
        self.spool = Path(tempfile.mkdtemp(prefix="stampede-spool-"))
        self.sent = 0
        self._greenlets: list[gevent.Greenlet] = []
        runner.register_message(MSG_STAGE, self._on_stage)
        runner.register_message(MSG_GATE, self._on_gate)
        runner.register_message(MSG_INTERRUPT, self._on_interrupt)

    def _on_interrupt(self, environment: Any, msg: Any, **_: Any) -> None:
        self.interrupted(int((msg.data or {}).get("count", 1)))

    def _on_stage(self, environment: Any, msg: Any, **_: Any) -> None:
        self.state.stage = Stage.from_wire(msg.data)

    def _on_gate(self, environment: Any, msg: Any, **_: Any) -> None:
        data = msg.data or {}
        if data.get("closed"):
            self.state.close_gate(broadcast=False)
        else:
            self.state.release(int(data["step"]), broadcast=False)

    def start_run(self) -> None:
        self.sent = 0
        self._greenlets = [gevent.spawn(self._report_loop), gevent.spawn(self._forward_loop)]

    def run_dir(self) -> Path:
        return self.spool / str(self.state.run_id)

    def _send(self, kind: str, data: dict[str, Any]) -> None:
        self.runner.send_message(kind, data)

    def _report(self) -> None:
        engine = self.engine()
        if engine is None or not engine.alive:
            return
        try:
            stats = engine.stats(timeout=5)
        except Exception:  # a slow answer now is a fresher one next second
            return
        self._send(
            MSG_STATS,
            {
                "run_id": self.state.run_id,
                "engine": self.name,
                "stats": stats.to_wire() if stats is not None else None,
                "dropped": dict(self.state.dropped),
            },
        )

    def _report_loop(self) -> None:
        while True:
            gevent.sleep(STATS_INTERVAL_S)
            self._report()

    def _forward_loop(self) -> None:
        while True:
            gevent.sleep(FORWARD_INTERVAL_S)
            self.forward()

    def forward(self) -> None:
        """Ship every complete file the engine wrote (shards are renamed into place when complete), table files
        under their table folder's name (`rollouts/rollouts-w1-00003.parquet`)."""
        run_dir = self.run_dir()
        if not run_dir.is_dir():
            return
        sent_dir = run_dir / SENT_DIR
        for path in files_to_ship(run_dir):
            name = path.relative_to(run_dir).as_posix()
            self._send(MSG_FILE, {"run_id": self.state.run_id, "name": name, "data": path.read_bytes()})
            kept = sent_dir / name
            kept.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, kept)  # kept until the spool is removed: nothing is lost in transit
            self.sent += 1

    def finish_run(self, engine_summary: dict[str, Any] | None) -> None:
        """After the engine drained: the last shards, the last stats, then `done`."""
        for greenlet in self._greenlets:
            greenlet.kill(block=False)
        self._report()
        self.forward()
        summary = {**(engine_summary or {}), "locust_process": process_usage()}
        self._send(MSG_DONE, {"run_id": self.state.run_id, "files": self.sent, "summary": summary})

    def close(self) -> None:
        shutil.rmtree(self.spool, ignore_errors=True)
