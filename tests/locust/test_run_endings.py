"""How a run ended is always recorded, and nothing it started is lost: Ctrl-C, a second Ctrl-C, SIGTERM and kill -9
of every process of a real `stampede run` against a standalone stub (real Locust, engine and HTTP on loopback).

Per interruption: the ending run.json / `stampede summary` record, the exit status, the sandboxes the vendor still
holds (0, after `stampede cleanup --all-owned` for kill -9), and the submitted rollouts without a row (0: every
sandbox the vendor ever made for the run is some row's, and kill -9 leaves `unfinished` rows from the write-ahead).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from harness.results.read.dataset import load_rollouts
from harness.results.render.report import build_report
from tests.support.commands import stampede
from tests.support.serve_process import standalone_stub
from tests.support.stub_vendor import rollout_label, vendor_sandboxes

REPO = Path(__file__).resolve().parents[2]
TOKEN = "endings-token"
pytestmark = pytest.mark.slow
FIGURES: dict[str, dict[str, object]] = {}
FLUSH_INTERVAL_S = 2.0  # harness.engine.shards / EngineConfig.flush_interval_s: rows reach parquet this often


def in_process(*args: str, capsys: pytest.CaptureFixture[str]) -> str:
    """`stampede ARGS` in this interpreter (the analysis commands import no Locust): its stdout; exit 0 asserted."""
    from harness.cli.main import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def stub_url():
    with standalone_stub(TOKEN) as url:
        try:
            yield url
        finally:
            if FIGURES:
                print("\n" + "\n".join(f"{name}: {figures}" for name, figures in FIGURES.items()))


def sandboxes(url: str, run_id: str, *, active: bool) -> list[dict]:
    return vendor_sandboxes(url, TOKEN, run_id, active=active)


def start_run(url: str, out: Path, run_id: str, workers: int = 0) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        "--base-url",
        url,
        "--token",
        TOKEN,
        "--run-id",
        run_id,
        "--stages",
        "40",
        "--hold",
        "120",
        "--commands",
        "true; sleep 1",
        "--out",
        str(out),
        "--progress-interval",
        "0",
        "--workers",
        str(workers),
    ]
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,  # its own process group, as a terminal gives it
    )


class StderrReader:
    """A run's stderr read as it comes, so a test can wait for what the run said (and the pipe never fills)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.lines.append(line)

    def wait_for(self, text: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(text in line for line in list(self.lines)):
                return True
            time.sleep(0.05)
        return False

    def text(self) -> str:
        self._thread.join(timeout=30)  # the process has exited: its stderr ends
        return "".join(self.lines)


def under_load(url: str, run_id: str, run_dir: Path) -> None:
    """Until 30 sandboxes are live and rollouts have finished (some rows are on disk, more are buffered)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(sandboxes(url, run_id, active=True)) >= 30 and list((run_dir / "rollouts").glob("*.parquet")):
            return
        time.sleep(0.2)
    pytest.fail("the run never reached 30 sandboxes with rows written")


def kill_every_process(process: subprocess.Popen) -> None:
    """kill -9 of the run's process group and of its engine (a session of its own, so it drains on a parent's
    ordinary death): nothing of the run survives to record anything."""
    children = psutil.Process(process.pid).children(recursive=True)
    os.killpg(process.pid, signal.SIGKILL)
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


CASES = {
    "SIGINT": ([signal.SIGINT], "interrupted", 130),
    "double SIGINT": ([signal.SIGINT, signal.SIGINT], "aborted", 131),
    "SIGTERM": ([signal.SIGTERM], "interrupted", 130),
    "SIGTERM to a master with two workers": ([signal.SIGTERM], "interrupted", 130),
    "kill -9 of every process": (None, "crashed", -signal.SIGKILL),
}
WORKERS = {"SIGTERM to a master with two workers": 2}
# Locust's own quit ended the master's test before it told a worker to stop: the run waited out the workers'
# 60 s heartbeat timeout. Stopped as a local run is, it takes seconds.
STOPPED_WITHIN_S = 40.0


@dataclass
class Interrupted:
    run_dir: Path
    returncode: int
    stderr: str
    killed_at: float
    sandboxes_left: int
    exited_after_s: float


@pytest.fixture(scope="module")
def interrupted_runs(stub_url, tmp_path_factory) -> dict[str, Interrupted]:
    """The five runs side by side (one stub, one results folder), each interrupted its way once under load."""
    out = tmp_path_factory.mktemp("endings")
    runs = {case: start_run(stub_url, out, run_id_of(case), WORKERS.get(case, 0)) for case in CASES}
    said = {case: StderrReader(run) for case, run in runs.items()}
    exited_at: dict[str, float] = {}
    try:
        for case in CASES:
            under_load(stub_url, run_id_of(case), out / run_id_of(case))
        killed_at = time.time()
        kill_every_process(runs["kill -9 of every process"])
        for case, (signals, _, _) in CASES.items():
            if signals:
                runs[case].send_signal(signals[0])
        # The second only once the run has handled the first (two signals pending at once are one), while it still
        # drains: a busy machine may take longer than any fixed pause to run the first handler.
        assert said["double SIGINT"].wait_for("stampede: stopping", 60), "the first SIGINT was never handled"
        runs["double SIGINT"].send_signal(signal.SIGINT)
        while len(exited_at) < len(runs) and time.time() - killed_at < 120:
            for case, run in runs.items():
                if case not in exited_at and run.poll() is not None:
                    exited_at[case] = time.time()
            time.sleep(0.1)
        for run in runs.values():
            run.wait(timeout=120)
        errors = {case: said[case].text() for case in runs}
    finally:
        for run in runs.values():
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
    return {
        case: Interrupted(
            out / run_id_of(case),
            run.returncode,
            errors[case],
            killed_at,
            len(sandboxes(stub_url, run_id_of(case), active=True)),
            exited_at.get(case, time.time()) - killed_at,
        )
        for case, run in runs.items()
    }


def run_id_of(case: str) -> str:
    return "cut-" + case.replace(" ", "-")


@pytest.mark.parametrize("case", list(CASES))
def test_every_interruption_records_its_ending_and_loses_no_rollout(stub_url, interrupted_runs, case, capsys):
    signals, ending, exit_code = CASES[case]
    found = interrupted_runs[case]
    run_id, run_dir, killed_at, left = run_id_of(case), found.run_dir, found.killed_at, found.sandboxes_left
    tmp_path = run_dir.parent
    assert found.returncode == exit_code, found.stderr[-2000:]
    assert "Traceback" not in found.stderr
    if signals is not None:
        assert found.exited_after_s < STOPPED_WITHIN_S, found.stderr[-2000:]

    assert in_process("summary", str(run_dir), capsys=capsys).splitlines()[0].startswith(f"ended: {ending}")

    if signals is None:
        # The next run finds it crashed, records that, and names the command that reaps its leftovers.
        assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
        following = stampede(
            "run",
            "--base-url",
            stub_url,
            "--token",
            TOKEN,
            "--stages",
            "1",
            "--hold",
            "0.5",
            "--commands",
            "true",
            "--out",
            str(tmp_path),
            "--progress-interval",
            "0",
        )
        assert following.returncode == 0, following.stderr
        assert f"run {run_id} crashed earlier" in following.stderr
        assert f"stampede cleanup --provider stub --base-url {stub_url} --run-id {run_id}" in following.stderr
        assert json.loads((run_dir / "run.json").read_text())["status"] == "crashed"
        assert left > 0  # kill -9 left sandboxes behind: the vendor still has them
        reaped = in_process(
            "cleanup", "--provider", "stub", "--base-url", stub_url, "--token", TOKEN, "--all-owned", capsys=capsys
        )
        assert int(reaped.split()[1]) >= left
    else:
        manifest = json.loads((run_dir / "run.json").read_text())
        assert (manifest["status"], manifest["exit_code"]) == (ending, exit_code)
        assert left == 0  # the run terminated every sandbox itself
    after_cleanup = len(sandboxes(stub_url, run_id, active=True))
    assert after_cleanup == 0

    rows = load_rollouts(run_dir)
    vendor = sandboxes(stub_url, run_id, active=False)
    made = {sandbox["id"] for sandbox in vendor}
    # every rollout the vendor made a sandbox for (its own label says which) has a row; a rollout cancelled while
    # its create was on the wire has one too, without the sandbox id it never received
    rollout_of = {rollout_label(sandbox) for sandbox in vendor}
    without_row = rollout_of - set(rows["rollout_id"])
    assert len(rollout_of) == len(made) and without_row == set()
    unfinished = int((rows["outcome"] == "unfinished").sum())
    # Finished before the kill, yet without a row of their own: their rows were still in the engine's buffer.
    ended = {
        sandbox["id"]: datetime.fromisoformat(sandbox["terminatedAt"]).timestamp()
        for sandbox in vendor
        if sandbox.get("terminatedAt")
    }
    lost_finished = [
        ended[sid]
        for sid in rows.loc[rows["outcome"] == "unfinished", "sandbox_id"].dropna()
        if sid in ended and ended[sid] < killed_at
    ]
    oldest_lost_s = round(killed_at - min(lost_finished), 2) if lost_finished else 0.0
    if signals is None:
        assert unfinished > 0  # in flight or buffered at the kill: rows from the write-ahead, not silence
        assert oldest_lost_s <= FLUSH_INTERVAL_S + 2.0  # at most one flush interval of finished rows (+ slack)
    FIGURES[case] = {
        "ending": ending,
        "exit": found.returncode,
        "sandboxes_left": left,
        "after_cleanup": after_cleanup,
        "rows": len(rows),
        "vendor_sandboxes": len(made),
        "without_row": len(without_row),
        "unfinished": unfinished,
        "finished_but_unflushed": len(lost_finished),
        "oldest_unflushed_finish_s_before_kill": oldest_lost_s,
    }

    if signals is None:
        # The report says it first, withholds the knee verdict, and reads a folder the kill left without any
        # rollouts shard (only ops shards and the write-ahead).
        report = build_report([run_dir], tmp_path / "kill-report", figures=False)
        assert report.text.splitlines()[0].startswith(f"{run_id}: ended: crashed")
        assert "no verdict" in report.text
        html = report.html_path.read_text()
        assert html.index("ended: crashed") < html.index("<table")
        bare = tmp_path / "ops-only"
        shutil.copytree(run_dir, bare, ignore=shutil.ignore_patterns("rollouts*", "report"))
        assert "ended: crashed" in in_process("summary", str(bare), capsys=capsys).splitlines()[0]
        assert len(load_rollouts(bare)) == len(rows.drop_duplicates(["rollout_id", "attempt"]))


# -- `stampede cleanup --all-owned`: every sandbox stampede tagged on a vendor, whatever the run -----------------


def serve_local_vendor(provider: str) -> tuple[subprocess.Popen, dict]:
    """The provider's simulated vendor as a child process, and the options its provider needs to reach it."""
    from providers import LOCAL_VENDORS

    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            LOCAL_VENDORS[provider],
            "--profile=ideal",
            "--seed=0",
            "--host=127.0.0.1",
            "--port=0",
            f"--token={TOKEN}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )
    info = json.loads(process.stdout.readline())
    options = {
        **{key: str(value) for key, value in (info.get("provider_options") or {}).items()},
        "base_url": info["url"],
        "token": TOKEN,
    }
    return process, options


async def reap_all_owned(provider_name: str, options: dict) -> tuple[set[str], set[str], int, set[str]]:
    """Two runs' sandboxes: what list_all_owned sees of them, what cleanup_all_owned reaps, what is left."""
    from providers import create_provider
    from providers.base import SandboxSpec

    provider = create_provider(provider_name, options)
    try:
        await provider.preflight()
        made = set()
        for run_id in ("all-owned-a", "all-owned-b"):
            ref = await provider.create(SandboxSpec(run_id=run_id, rollout_id=f"{run_id}-1"))
            made.add(ref.sandbox_id)
        listed = {ref.sandbox_id for ref in await provider.list_all_owned()}
        runs = {ref.run_id for ref in await provider.list_all_owned() if ref.sandbox_id in made}
        reaped = await provider.cleanup_all_owned()
        left = {ref.sandbox_id for ref in await provider.list_all_owned()} & made
        return made & listed, runs, reaped, left
    finally:
        await provider.aclose()


@pytest.mark.parametrize("provider_name", ["stub", "prime", "modal", "e2b", "daytona"])
async def test_cleanup_all_owned_reaps_every_run_on_each_vendor(provider_name, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no user SDK configuration is read
    vendor, options = serve_local_vendor(provider_name)
    try:
        seen, runs, reaped, left = await reap_all_owned(provider_name, options)
    finally:
        vendor.send_signal(signal.SIGTERM)
        vendor.wait(timeout=30)
    assert len(seen) == 2 and runs == {"all-owned-a", "all-owned-b"}
    assert reaped >= 2 and left == set()


@pytest.mark.docker
async def test_docker_lists_every_run_it_tagged(docker_host):
    """Listing only, on the shared daemon: reaping everything there would take other runs' containers."""
    from providers import create_provider
    from providers.base import SandboxSpec

    provider = create_provider("docker", {"host": docker_host})
    runs = (f"all-owned-a-{time.monotonic_ns()}", f"all-owned-b-{time.monotonic_ns()}")
    try:
        await provider.preflight()
        refs = [await provider.create(SandboxSpec(run_id=run_id, rollout_id="r1")) for run_id in runs]
        listed = {ref.sandbox_id: ref.run_id for ref in await provider.list_all_owned()}
        assert {listed.get(ref.sandbox_id) for ref in refs} == set(runs)
    finally:
        for run_id in runs:
            await provider.cleanup(run_id)
        await provider.aclose()


def test_a_run_in_progress_is_told_from_a_crashed_one_by_its_owner_pid_and_start_time():
    from harness.results.read.run_ending import run_ending

    me = psutil.Process()
    owner = {"pid": me.pid, "started": me.create_time(), "hostname": socket.gethostname()}
    assert run_ending({"status": "running", "processes": {"owner": owner}}).ending == "running"
    reused = {**owner, "started": owner["started"] - 3600}  # the pid now belongs to another process
    assert run_ending({"status": "running", "processes": {"owner": reused}}).ending == "crashed"
    elsewhere = {**owner, "pid": 2**22 + 7, "hostname": "another-host"}  # cannot tell from here: not crashed
    assert run_ending({"status": "running", "processes": {"owner": elsewhere}}).ending == "running"
    assert run_ending({"status": "complete"}).ending == "completed"  # run.json from before endings were recorded


def test_an_abort_bounds_the_drain_when_the_vendor_hangs_on_terminate(tmp_path):
    """The engine's side of a second Ctrl-C (SIGUSR2): a vendor whose terminate takes 60 s holds an ordinary
    drain at least that long; aborted, the drain gives rollouts 1 s and ends within its 10 s bound, says so, and
    every submitted rollout still has a row."""
    import gevent

    from harness.engine.run import ABORT_DEADLINE_S
    from harness.locust.engine_client import EngineClient
    from harness.wire.messages import EngineConfig, RolloutRequest

    engine = EngineClient.spawn("t0")
    try:
        engine.configure(
            EngineConfig(
                run_id="abort",
                worker="t0",
                out_dir=str(tmp_path),
                provider="tests.support.scripted_provider:ScriptedProvider",
                provider_options={"exec_delay_s": 60, "terminate_delay_s": 60},
                profile="scripted",
                scenario="test",
                plan={"commands": [["true"], ["sleep"]]},
                flush_interval_s=0.2,
            )
        )
        users = [gevent.spawn(engine.run_rollout, RolloutRequest("01-s", 5)) for _ in range(5)]
        deadline = time.monotonic() + 30
        while (engine.stats() or None) is None or engine.stats().inflight < 5:
            assert time.monotonic() < deadline
            gevent.sleep(0.1)
        engine.process.send_signal(signal.SIGUSR2)
        started = time.monotonic()
        summary = engine.drain(timeout=120)
        drained_s = time.monotonic() - started
        gevent.killall(users, block=False)
    finally:
        engine.shutdown(timeout=60)
    assert summary["aborted"] is True and summary["started"] == 5
    assert drained_s < ABORT_DEADLINE_S + 10  # not the 60 s the vendor's terminates take
    rows = load_rollouts(tmp_path / "abort")
    assert len(rows) == 5 and set(rows["outcome"]) <= {"cancelled", "unfinished"}
    figures = {key: summary[key] for key in ("terminated_leftovers", "terminate_errors", "unfinished_tasks")}
    print(
        f"\nabort drain (terminate hangs 60 s): drain {drained_s:.1f} s, {figures}, outcomes "
        f"{rows['outcome'].value_counts().to_dict()}"
    )
