"""The README and docs/ stay true: every command they show is run here, in order, as a user would type it.

A command is a line of a ```sh block; a block without a language (output, or a command that needs a vendor's key or a
script of yours) is shown only. Pages run in PAGES's order, each top to bottom, one shell per line, so a page may use
what an earlier one made (the README's `results/eight` runs, its `/tmp/latency_model.json`, a server a page started).
Every `docs/*.md` must be in PAGES: a page left out would be a page whose commands go stale unseen."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from foundation.sandbox_client import CLIENTS
from harness.results.read.run_pointer import resolve_run_dir
from harness.wire.records import SCHEMA_V1_ROLLOUT_COLUMNS
from providers.sim.core.calibration import first_attempt_init_failure_rate
from providers.sim.core.experiments import simulate_burst
from tests.docker_support import default_host, in_ci, machine_daemon, ping

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
# the reading order a newcomer follows, and the order the commands run in (see the module docstring)
PAGES = (
    README,
    DOCS / "commands.md",
    DOCS / "thresholds-and-compare.md",
    DOCS / "reports-and-model.md",
    DOCS / "results-schema.md",
    DOCS / "vendors.md",
    DOCS / "simulated-vendors.md",
    DOCS / "rl-frameworks.md",
)
RUN_BY_CI = "pip install -e '.[test,dev]' && scripts/test"  # the test command itself: CI runs it
pytestmark = pytest.mark.slow


def test_every_check_names_a_command_the_docs_show():
    """A check keyed by a command the README or docs/ no longer show would silently stop running."""
    run = {command.removeprefix("pip install -e . && ") for command in doc_commands()}
    assert set(CHECKS) <= run


def test_every_docs_page_runs():
    """A docs page missing from PAGES would never have its commands run."""
    assert set(DOCS.glob("*.md")) | {README} == set(PAGES)


def page_commands(page: Path) -> list[str]:
    blocks = re.findall(r"^```sh\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def doc_commands() -> list[str]:
    return [command for page in PAGES for command in page_commands(page)]


def latest() -> Path:
    return resolve_run_dir(REPO / "results" / "latest")


def check_default_run(_: subprocess.CompletedProcess) -> None:
    """The main job: reaches 960 in flight and writes every schema-v1 column."""
    frame = pd.read_parquet(latest() / "rollouts")
    assert set(SCHEMA_V1_ROLLOUT_COLUMNS) <= set(frame.columns)
    assert frame["inflight_at_submit"].max() >= 960
    assert not set(frame["failure_kind"].dropna()) & {"unknown", "harness"}
    assert json.loads((latest() / "run.json").read_text())["status"] == "completed"


def check_modal_burst(result: subprocess.CompletedProcess) -> None:
    frame = pd.read_parquet(latest() / "rollouts")
    command = result.args[-1] if isinstance(result.args, list) else result.args
    size = int(re.search(r"--users (\d+)", command).group(1))
    client = re.search(r"--client (\S+)", command)
    failed = frame[frame["outcome"] == "failed"]
    assert not set(failed["failure_kind"]) & {"unknown", "harness"}
    first = frame[frame["attempt"] == 1]
    tti = first.loc[first["outcome"] == "ok", "tti_s"]
    if size == 960 and client and client.group(1) == "swe-rex-uni-agent-pre47":
        # the phenomenon, on the client's side: SWE-ReX's 300 s deadline fails first attempts (never the vendor)
        first_failed = int((first["outcome"] == "failed").sum())
        assert first_failed >= 0.05 * size and tti.quantile(0.99) >= 3 * tti.quantile(0.5)
        assert "client_startup_deadline" in set(failed["failure_kind"])
        # time-scale invariance: at the default 0.1 the live burst's first attempts fail as often as the offline
        # model's given the same first-wave create arrivals in vendor seconds (its truth; a create it refused has
        # none, and counts as the last). A busy machine sends for longer, and later creates meet less congestion
        truth = pd.read_parquet(latest() / "truth", columns=["created_s"])["created_s"]
        arrivals = sorted(t for t in (truth - truth.min()).tolist() if t < 60.0)[:size]
        arrivals += [arrivals[-1]] * (size - len(arrivals))
        burst = simulate_burst("modal-like", size, seed=0, arrivals_s=arrivals, client=CLIENTS[client.group(1)])
        offline = first_attempt_init_failure_rate(burst)
        assert abs(first_failed / size - offline) <= 0.02, (first_failed / size, offline, arrivals[-1])
    else:  # a burst of 100, or 960 through uni-agent's semaphore of 128: no collapse
        assert len(failed) <= 0.05 * size


def check_readiness_probe(result: subprocess.CompletedProcess) -> None:
    """The Prime SDK's readiness beside a direct probe's, and each row carrying the probe."""
    assert "readiness (n=" in result.stdout and "the SDK's polling adds" in result.stdout
    frame = pd.read_parquet(latest() / "rollouts")
    assert frame["ready_probe_s"].notna().sum() > 0
    assert (frame["ready_probe_s"].dropna() <= frame.loc[frame["ready_probe_s"].notna(), "ready_s"] + 1e-6).all()


FAULTS = (
    "stampede run --profile ideal --scenario burst --users 60 --profile-set faults.error_5xx_prob=0.1 --profile-set "
    "faults.reset_prob=0.05 --profile-set faults.malformed_prob=0.05 --profile-set faults.throttle_prob=0.05 "
    "--profile-set faults.retry_after_s=1"
)


def check_transport_faults(result: subprocess.CompletedProcess) -> None:
    """A hostile wire: every rollout classified, the run and its sweep go on, nothing left alive."""
    frame = pd.read_parquet(latest() / "rollouts")
    assert len(frame) == 60 and (frame["outcome"] == "failed").sum() > 0  # the faults reached the rollouts
    assert not set(frame["failure_kind"].dropna()) & {"unknown", "harness"}
    assert "unknown failures 0; harness failures 0" in result.stdout and "sweep failed" not in result.stdout


PANDAS = (
    "python -c \"import numpy as np, pandas as pd; run = 'results/' + open('results/latest').read().strip(); "
    "df = pd.read_parquet(run + '/rollouts').dropna(subset=['tti_vendor_s']); print(df.groupby('stage', "
    "observed=True).tti_vendor_s.agg(lambda tti: np.quantile(tti, 0.99, method='inverted_cdf')))\""
)


def check_plain_pandas(result: subprocess.CompletedProcess) -> None:
    """A plain reader's one line prints the TTI p99 summary.json holds, stage by stage, in vendor seconds."""
    printed = {stage: float(value) for stage, value in re.findall(r"^(\S+)\s+([\d.]+)$", result.stdout, flags=re.M)}
    stages = json.loads((latest() / "summary.json").read_text())["stages"]
    expected = {s["stage"]: s["quantiles"]["tti"]["p99"]["value"] for s in stages if s["quantiles"]["tti"]["p99"]}
    assert printed and printed == pytest.approx({k: v for k, v in expected.items() if v is not None}, rel=1e-5)


VENDORS = ("modal", "prime", "e2b", "daytona", "runloop", "vercel", "coreweave", "agent-sandbox")
EIGHT = "stampede report " + " ".join(f"results/eight/{vendor}" for vendor in VENDORS)


def check_eight_vendors(result: subprocess.CompletedProcess) -> None:
    """Each vendor's own SDK against its local control plane: every failure classified, one joined report."""
    assert "side by side" in result.stdout
    for vendor in VENDORS:
        run = REPO / "results" / "eight" / vendor
        assert json.loads((run / "run.json").read_text())["status"] == "completed"
        frame = pd.read_parquet(run / "rollouts")
        assert len(frame) == 100 and not set(frame["failure_kind"].dropna()) & {"unknown", "harness"}
        assert f"{vendor}/{vendor}-like" in result.stdout


def check_verl_sweep(result: subprocess.CompletedProcess) -> None:
    """verl's staleness sweep: the step shortens from 0 to 0.3 and then stops gaining (a batch ahead at each sync)."""
    assert "sweep over staleness_threshold" in result.stdout and "recommend staleness threshold" in result.stdout
    points = json.loads(Path("/tmp/verl-sweep/model.json").read_text())["sweep"]["points"]
    step = {p["value"]: next(r for r in p["results"] if r["engine"] == "simulation")["step_time_s"] for p in points}
    assert step[0.0] > 1.1 * step[0.1] and step[0.1] > 1.05 * step[0.3]
    assert step[0.5] == pytest.approx(step[0.3], rel=0.02)


CHECKS = {
    EIGHT: check_eight_vendors,
    FAULTS: check_transport_faults,
    PANDAS: check_plain_pandas,
    "stampede run": check_default_run,
    "stampede model --latency /tmp/latency_model.json --config examples/rl-verl-fully-async.toml --sweep "
    "staleness_threshold --values 0,0.1,0.3,0.5 -o /tmp/verl-sweep": check_verl_sweep,
    "stampede run --profile modal-like --scenario burst --users 960 --seed 0 --client swe-rex-uni-agent-pre47 -t 300s": (
        check_modal_burst
    ),
    "stampede run --profile modal-like --scenario burst --users 960 --seed 0 --client swe-rex-uni-agent": check_modal_burst,
    "stampede run --profile modal-like --scenario burst --users 100 --seed 0": check_modal_burst,
    "stampede run --provider prime --local --stages 20,40 --hold 5 --provider-option readiness_probe=1": (
        check_readiness_probe
    ),
}


@pytest.mark.timeout(1800)
def test_every_documented_command_runs():
    assert RUN_BY_CI in page_commands(README) and "pip install -e . && stampede run" in page_commands(README)
    commands = doc_commands()
    servers: list[subprocess.Popen] = []
    skipped: list[str] = []
    env = {**os.environ, "STAMPEDE_PROGRESS_INTERVAL": "0"}
    # runs that name their run id are refused when it exists: start from none, as a clone does (a second local
    # run of this test found the first one's results/readme-ramp; the eight-vendor runs are among them)
    for command in commands:
        named = dict(itertools.pairwise(shlex.split(command)))
        if command.startswith("stampede run") and "--run-id" in named:
            shutil.rmtree(REPO / named.get("--out", "results") / named["--run-id"], ignore_errors=True)
    try:
        for command in commands:
            if command == RUN_BY_CI:
                continue
            command = command.removeprefix("pip install -e . && ")  # CI installed the package already
            # a serve command may set its token first (`STAMPEDE_SERVE_TOKEN=… stampede stub serve`: not in ps)
            words = shlex.split(command)
            assigned = dict(word.split("=", 1) for word in itertools.takewhile(lambda w: "=" in w, words))
            served = " ".join(words[len(assigned) :])
            if served.startswith(("stampede stub serve", "stampede modal-local serve")):
                server = subprocess.Popen(
                    words[len(assigned) :],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    cwd=REPO,
                    env={**os.environ, **assigned},
                )
                servers.append(server)
                assert json.loads(server.stdout.readline())["url"]
                continue
            if "docker" in command and not ping(default_host()):
                if in_ci():
                    machine_daemon()  # starts one, or fails: CI has no excuse
                else:
                    skipped.append(command)
                    continue
            result = subprocess.run(
                ["bash", "-c", command], capture_output=True, text=True, cwd=REPO, env=env, timeout=600
            )
            assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
            assert "Traceback" not in result.stderr, command
            result.args = [command]
            if command in CHECKS:
                CHECKS[command](result)
    finally:
        for server in servers:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    if skipped:
        pytest.skip(f"no Docker daemon here; not run: {skipped}")
