"""The README and docs/ stay true: every command they show is run here, as a user would type it.

A command is a line of a ```sh block; a block without a language (output, or a command that needs a vendor's key or a
script of yours) is shown only. The commands run in GROUPS, one pytest each beside the others (scripts/test), each in a
folder of its own that holds the clone but a `results/` of its own, as a fresh clone does: one after another they took
~20 min. A group runs its parts in order, each top to bottom, one shell per line, so a part may use what an earlier
part of its group made (`results/latest`, the README's `results/eight` runs and `/tmp/latency_model.json`, a server it
started); never what another group made. Every command of the README and every `docs/*.md` is in exactly one group: a
command left out would be a command that goes stale unseen."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from foundation.sandbox_client import CLIENTS
from harness.results.read.run_pointer import resolve_run_dir
from harness.wire.records import SCHEMA_V1_ROLLOUT_COLUMNS
from tests.docker_support import default_host, in_ci, machine_daemon, ping
from tests.support.modal_burst import BURST_SPREAD_S, first_wave_arrivals, offline_first_attempt_failure

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"


@dataclass(frozen=True)
class Part:
    """A page, or the one `## ` section of it whose title starts with `section`."""

    page: Path
    section: str | None = None

    def commands(self) -> list[str]:
        text = self.page.read_text()
        if self.section is not None:
            sections = [s for s in re.split(r"^(?=## )", text, flags=re.M) if s.startswith(f"## {self.section}")]
            assert len(sections) == 1, f"{self.page.name}: {len(sections)} sections titled {self.section!r}"
            text = sections[0]
        return sh_commands(text)


# Independent groups (see the module docstring), balanced by each command's wall time on 2 cores beside the rest of
# the suite (2026-12-06): the README's main job and docs/commands.md 6 min; Job 1 with compare 5 min, Job 2 to the
# model 5 min; docs/vendors.md's 960 through Modal's SDK 6.5 min, its other sections with the simulated vendors 6.5 min
GROUPS: dict[str, tuple[Part, ...]] = {
    "main-job": (Part(README, "Set up"), Part(DOCS / "commands.md")),
    "job-1": (
        Part(README, "Job 1"),  # results/eight, which thresholds-and-compare.md compares
        Part(DOCS / "thresholds-and-compare.md"),
    ),
    "jobs-2-3": (
        Part(README, "Job 2"),  # results/latest, which Job 3 exports to /tmp/latency_model.json
        Part(README, "Job 3"),
        Part(DOCS / "reports-and-model.md"),  # models /tmp/latency_model.json
        Part(DOCS / "results-schema.md"),  # reads results/latest
        Part(DOCS / "rl-frameworks.md"),
    ),
    "modal": (
        Part(DOCS / "vendors.md", "Modal"),
        Part(README, "Rollouts"),
        Part(DOCS / "rollout-plans.md"),
    ),
    "vendors": (
        Part(DOCS / "vendors.md", "Prime"),
        Part(DOCS / "vendors.md", "E2B"),
        Part(DOCS / "vendors.md", "Daytona"),
        Part(DOCS / "vendors.md", "Your own hardware"),
        Part(DOCS / "simulated-vendors.md"),
    ),
}
RUN_BY_CI = "pip install -e '.[test,dev]' && scripts/test"  # the test command itself: CI runs it
pytestmark = pytest.mark.slow


def test_every_check_names_a_command_the_docs_show():
    """A check keyed by a command the README or docs/ no longer show would silently stop running."""
    run = {command.removeprefix("pip install -e . && ") for command in doc_commands()}
    assert set(CHECKS) <= run


def test_every_command_runs_in_exactly_one_group():
    """A page, section or command in no group would never run; one in two would race itself."""
    grouped = Counter(command for parts in GROUPS.values() for part in parts for command in part.commands())
    shown = Counter(doc_commands())
    assert grouped == shown, {"in no group": list(shown - grouped), "in two": list(grouped - shown)}


def test_scripts_test_runs_every_group():
    """scripts/test runs each group in a pytest of its own; a group it does not name would not run in CI."""
    script = (REPO / "scripts" / "test").read_text()
    assert "readme=tests/test_readme.py::test_documented_commands_run\n" in script
    assert [group for group in GROUPS if f'"$readme[{group}]"' not in script] == []


def test_every_documented_command_is_one_line():
    """The runner takes an `sh` block line by line: a continued or commented line would run as a broken command (a
    measurement too heavy for CI belongs in a plain block, as docs/rollout-plans.md's 960 runs are)."""
    broken = [c for c in doc_commands() if c.endswith("\\") or c.startswith(("#", "-"))]
    assert broken == []


def sh_commands(text: str) -> list[str]:
    blocks = re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def page_commands(page: Path) -> list[str]:
    return sh_commands(page.read_text())


def doc_commands() -> list[str]:
    """Every command of the README and of every page in docs/."""
    return [command for page in (README, *sorted(DOCS.glob("*.md"))) for command in page_commands(page)]


def latest(root: Path) -> Path:
    return resolve_run_dir(root / "results" / "latest")


def check_default_run(_: subprocess.CompletedProcess, root: Path) -> None:
    """The main job: reaches 960 in flight and writes every schema-v1 column."""
    frame = pd.read_parquet(latest(root) / "rollouts")
    assert set(SCHEMA_V1_ROLLOUT_COLUMNS) <= set(frame.columns)
    assert frame["inflight_at_submit"].max() >= 960
    assert not set(frame["failure_kind"].dropna()) & {"unknown", "harness"}
    assert json.loads((latest(root) / "run.json").read_text())["status"] == "completed"


def check_modal_burst(result: subprocess.CompletedProcess, root: Path) -> None:
    frame = pd.read_parquet(latest(root) / "rollouts")
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
        truth = pd.read_parquet(latest(root) / "truth", columns=["created_s"])["created_s"]
        arrivals = first_wave_arrivals(truth, size, within_s=60.0)
        if arrivals[-1] > BURST_SPREAD_S:  # a machine too busy to send a burst (CI's nine pytests on 2 cores)
            print(f"first-wave creates spread over {arrivals[-1]:.1f} vendor s: not compared with the offline model")
            return
        offline = offline_first_attempt_failure("modal-like", arrivals, client=CLIENTS[client.group(1)])
        assert abs(first_failed / size - offline) <= 0.02, (first_failed / size, offline, arrivals[-1])
    else:  # a burst of 100, or 960 through uni-agent's semaphore of 128: no collapse
        assert len(failed) <= 0.05 * size


def check_readiness_probe(result: subprocess.CompletedProcess, root: Path) -> None:
    """The Prime SDK's readiness beside a direct probe's, and each row carrying the probe."""
    assert "readiness (n=" in result.stdout and "the SDK's polling adds" in result.stdout
    frame = pd.read_parquet(latest(root) / "rollouts")
    assert frame["ready_probe_s"].notna().sum() > 0
    assert (frame["ready_probe_s"].dropna() <= frame.loc[frame["ready_probe_s"].notna(), "ready_s"] + 1e-6).all()


FAULTS = (
    "stampede run --profile ideal --scenario burst --users 60 --profile-set faults.error_5xx_prob=0.1 --profile-set "
    "faults.reset_prob=0.05 --profile-set faults.malformed_prob=0.05 --profile-set faults.throttle_prob=0.05 "
    "--profile-set faults.retry_after_s=1"
)


def check_transport_faults(result: subprocess.CompletedProcess, root: Path) -> None:
    """A hostile wire: every rollout classified, the run and its sweep go on, nothing left alive."""
    frame = pd.read_parquet(latest(root) / "rollouts")
    assert len(frame) == 60 and (frame["outcome"] == "failed").sum() > 0  # the faults reached the rollouts
    assert not set(frame["failure_kind"].dropna()) & {"unknown", "harness"}
    assert "unknown failures 0; harness failures 0" in result.stdout and "sweep failed" not in result.stdout


PANDAS = (
    "python -c \"import numpy as np, pandas as pd; run = 'results/' + open('results/latest').read().strip(); "
    "df = pd.read_parquet(run + '/rollouts').dropna(subset=['tti_vendor_s']); print(df.groupby('stage', "
    "observed=True).tti_vendor_s.agg(lambda tti: np.quantile(tti, 0.99, method='inverted_cdf')))\""
)


def check_plain_pandas(result: subprocess.CompletedProcess, root: Path) -> None:
    """A plain reader's one line prints the TTI p99 summary.json holds, stage by stage, in vendor seconds."""
    printed = {stage: float(value) for stage, value in re.findall(r"^(\S+)\s+([\d.]+)$", result.stdout, flags=re.M)}
    stages = json.loads((latest(root) / "summary.json").read_text())["stages"]
    expected = {s["stage"]: s["quantiles"]["tti"]["p99"]["value"] for s in stages if s["quantiles"]["tti"]["p99"]}
    assert printed and printed == pytest.approx({k: v for k, v in expected.items() if v is not None}, rel=1e-5)


VENDORS = ("modal", "prime", "e2b", "daytona", "runloop", "vercel", "coreweave", "agent-sandbox")
EIGHT = "stampede report " + " ".join(f"results/eight/{vendor}" for vendor in VENDORS)


def check_eight_vendors(result: subprocess.CompletedProcess, root: Path) -> None:
    """Each vendor's own SDK against its local control plane: every failure classified, one joined report."""
    assert "side by side" in result.stdout
    for vendor in VENDORS:
        run = root / "results" / "eight" / vendor
        assert json.loads((run / "run.json").read_text())["status"] == "completed"
        frame = pd.read_parquet(run / "rollouts")
        assert len(frame) == 100 and not set(frame["failure_kind"].dropna()) & {"unknown", "harness"}
        assert f"{vendor}/{vendor}-like" in result.stdout


def check_verl_sweep(result: subprocess.CompletedProcess, root: Path) -> None:
    """verl's staleness sweep: the step shortens from 0 to 0.3 and then stops gaining (a batch ahead at each sync)."""
    assert "sweep over staleness_threshold" in result.stdout and "recommend staleness threshold" in result.stdout
    points = json.loads(Path("/tmp/verl-sweep/model.json").read_text())["sweep"]["points"]
    step = {p["value"]: next(r for r in p["results"] if r["engine"] == "simulation")["step_time_s"] for p in points}
    assert step[0.0] > 1.1 * step[0.1] and step[0.1] > 1.05 * step[0.3]
    assert step[0.5] == pytest.approx(step[0.3], rel=0.02)


TOOL_LATENCY = "stampede run --plan tool-latency --profile ideal --scenario burst --users 8"
HELD = f"{TOOL_LATENCY} --profile-set sandbox.exec_overhead_s=1"


def check_injected_overhead(_: subprocess.CompletedProcess, root: Path) -> None:
    """tool-latency reads back a 1 s hold on every answer as its per-call overhead, beyond the run without it (the
    same machine, minutes apart: what the harness itself adds is in both)."""
    runs = sorted(p for p in (root / "results").iterdir() if p.is_dir() and not p.is_symlink() and "burst" in p.name)
    overheads = []
    for run in runs[-2:]:
        steps = pd.read_parquet(run / "steps")
        calls = steps[(steps["kind"] == "exec") & (steps["name"] == "tool-call") & steps["ok"]]
        assert len(calls) == 8 * 150
        overheads.append(float(calls["overhead_vendor_s"].median()))
    without, held = overheads
    assert 0.9 <= held - without <= 1.15, overheads


CHECKS = {
    HELD: check_injected_overhead,
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


def clone_without_results(root: Path) -> Path:
    """A folder that holds the clone (a link per entry) but no `results/`: a group's runs and `results/latest` are
    its own, as in a fresh clone, while the groups run side by side."""
    root.mkdir()
    for entry in REPO.iterdir():
        if entry.name != "results":
            (root / entry.name).symlink_to(entry)
    return root


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("group", GROUPS)
def test_documented_commands_run(group: str, tmp_path: Path) -> None:
    assert RUN_BY_CI in page_commands(README) and "pip install -e . && stampede run" in page_commands(README)
    commands = [command for part in GROUPS[group] for command in part.commands()]
    root = clone_without_results(tmp_path / "clone")
    servers: list[subprocess.Popen] = []
    skipped: list[str] = []
    env = {**os.environ, "STAMPEDE_PROGRESS_INTERVAL": "0"}
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
                    cwd=root,
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
            started = time.monotonic()
            result = subprocess.run(
                ["bash", "-c", command], capture_output=True, text=True, cwd=root, env=env, timeout=600
            )
            # each command's wall time, for balancing GROUPS (scripts/test shows it: pytest -rP)
            print(f"{time.monotonic() - started:7.1f} s  {command}")
            assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
            assert "Traceback" not in result.stderr, command
            result.args = [command]
            if command in CHECKS:
                CHECKS[command](result, root)
    finally:
        for server in servers:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    if skipped:
        pytest.skip(f"no Docker daemon here; not run: {skipped}")
