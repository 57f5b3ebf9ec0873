"""`locust -f scenarios/ramp.py` with its web UI, driven over HTTP as the browser drives it.

One real Locust process (the embedded stub, the `ideal` profile, two tiny stages) serves every test here in
order: the form, three tests started one after another from it (each its own run folder, settings edited
in the form taking effect), and a test stopped mid-stage whose cut-off rollouts show as `cancelled`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.results.read.dataset import load_rollouts, load_truth
from tests.support.ports import reserved_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

HTTP_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 60.0


@dataclass
class WebLocust:
    """A running `locust -f` with its web UI, its results folder and its log."""

    process: subprocess.Popen[bytes]
    base: str
    out: Path
    log: Path

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.base + path, timeout=HTTP_TIMEOUT_S) as answer:
            return str(answer.read().decode())

    def post(self, path: str, form: dict[str, str] | None = None) -> dict[str, Any]:
        body = urllib.parse.urlencode(form or {}).encode()
        request = urllib.request.Request(self.base + path, data=body, method="POST")
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
            text = answer.read().decode()
        return dict(json.loads(text)) if text.startswith("{") else {"text": text}

    def stats(self) -> dict[str, Any]:
        return dict(json.loads(self.get("/stats/requests")))

    def runs(self) -> list[Path]:
        return sorted(p for p in self.out.iterdir() if p.is_dir() and not p.is_symlink())

    def manifest(self, run: Path) -> dict[str, Any]:
        return dict(json.loads((run / "run.json").read_text()))

    def start_test(self, **settings: str) -> Path:
        """POST /swarm as the form does (hidden users fields post 0, every stampede field as text): the new
        test's run folder, once the test ran to its end and its run.json is final."""
        before = set(self.runs())
        answer = self.post("/swarm", {**form_defaults(self), **settings})
        assert answer.get("success"), answer
        return self.wait_for_new_run(before)

    def wait_for_new_run(self, before: set[Path]) -> Path:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            new = [run for run in self.runs() if run not in before]
            if new and (new[0] / "run.json").exists() and self.manifest(new[0]).get("status") != "running":
                return new[0]
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            time.sleep(0.25)
        raise AssertionError(f"no finished new run within {RUN_TIMEOUT_S}s:\n{self.log.read_text()[-3000:]}")


def template_args(locust: WebLocust) -> dict[str, Any]:
    """What the page hands the web UI's script: `window.templateArgs = {...}`."""
    match = re.search(r"window\.templateArgs = (\{.*?\})\s*</script>", locust.get("/"), re.S)
    assert match, "the page carries no templateArgs"
    return dict(json.loads(match.group(1)))


def form_defaults(locust: WebLocust) -> dict[str, str]:
    """Every field the browser posts: Locust's own (users and ramp-up disabled: "0") and stampede's, as text."""
    args = template_args(locust)
    form = {"user_count": "0", "spawn_rate": "0", "host": "", "run_time": "", "profile": ""}
    for name, option in args["extra_options"].items():
        value = option["default_value"]
        form[name] = (
            ("true" if value else "false") if isinstance(value, bool) else ("" if value is None else str(value))
        )
    return form


@contextlib.contextmanager
def web_locust_process(out: Path, scenario: str, *args: str) -> Iterator[WebLocust]:
    """`locust -f scenarios/<scenario>.py` with its web UI on a free loopback port; its process group is
    interrupted (then killed) at the end whatever happened."""
    out.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.log"
    port = reserved_port()
    with log.open("wb") as sink:
        command = [sys.executable, "-m", "locust", "-f", f"scenarios/{scenario}.py", *args]
        command += ["--web-host", "127.0.0.1", "--web-port", str(port), "--out", str(out)]
        command += ["--sim-profile", "ideal", "--progress-interval", "0"]
        process = subprocess.Popen(
            command,
            cwd=REPO,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    locust = WebLocust(process, f"http://127.0.0.1:{port}", out, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                locust.get("/")
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.25)
        yield locust
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture(scope="module")
def web_locust(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebLocust]:
    with web_locust_process(tmp_path_factory.mktemp("webui"), "ramp", "--stages", "2,3", "--hold", "1") as locust:
        yield locust


def test_the_form_starts_with_the_scenarios_settings_and_no_host_banner(web_locust: WebLocust) -> None:
    args = template_args(web_locust)
    options = args["extra_options"]
    for name in ("stages", "hold", "sim_profile", "commands", "provider", "burst_steps", "rates", "image", "cpu"):
        assert name in options, f"--{name} is not in the web form"
    assert options["stages"]["default_value"] == "2,3"  # what the command line said
    # users and ramp-up start at the ramp's peak and spawn rate (-u, -r), not at a disabled 0
    assert not args["hide_common_options"], "the form shows users and ramp-up as 0"
    assert (args["num_users"], args["spawn_rate"]) == (3, 100.0)
    assert not args["missing_host_warning"] and not args["override_host_warning"], "Locust's no-host banner shows"


def test_each_test_started_from_the_form_runs_its_shape_into_its_own_run(web_locust: WebLocust) -> None:
    first = web_locust.start_test()
    first_manifest = web_locust.manifest(first)
    first_rows = len(load_rollouts(first))
    second = web_locust.start_test(hold="2", stages="3", seed="5", memory_mb="2048")  # edited in the form
    third = web_locust.start_test()

    assert len({first, second, third}) == 3
    manifests = [web_locust.manifest(run) for run in (first, second, third)]
    assert len({m["run_id"] for m in manifests}) == 3
    for run, manifest in zip((first, second, third), manifests, strict=True):
        assert manifest["status"] == "completed"
        rows = load_rollouts(run)
        assert len(rows) > 0 and set(rows.run_id) == {manifest["run_id"]}
        assert manifest["rows"]["rollouts"] == len(rows)
        truth = load_truth(run)  # the simulated vendor's own records: every sandbox of this run ended
        assert len(truth) > 0 and truth.ended_wall.notna().all()
    # the whole shape ran each time: every stage of it, not a shape that stopped at once
    assert set(load_rollouts(first).stage) == {"01-ramp2", "02-ramp3"}
    assert set(load_rollouts(third).stage) == {"01-ramp2", "02-ramp3"}
    # what the form posted took effect for that test only
    assert manifests[1]["parameters"]["hold_s"] == 2.0 and manifests[1]["shape"]["stages"] == [3]
    assert (manifests[0]["seed"], manifests[1]["seed"], manifests[2]["seed"]) == (0, 5, 0)
    assert [m["parameters"]["plan"]["memory_mb"] for m in manifests] == [1024, 2048, 1024]
    vendors = [m["processes"]["vendor"]["pid"] for m in manifests]  # a new seed: a vendor simulating it
    assert vendors[0] != vendors[1] != vendors[2]
    assert set(load_rollouts(second).stage) == {"01-ramp3"}
    assert manifests[2]["parameters"]["hold_s"] == 1.0
    # the first test's results are as it left them
    kept = ("run_id", "status", "rows", "t_end", "parameters", "engines")
    assert {key: web_locust.manifest(first)[key] for key in kept} == {key: first_manifest[key] for key in kept}
    assert len(load_rollouts(first)) == first_rows


def test_a_test_started_the_moment_the_last_one_ends_still_runs(web_locust: WebLocust) -> None:
    """Locust shows `stopped` (and offers a new test) while stampede still drains the last run; a test
    started then waits for that run's end instead of being dropped."""
    stops = web_locust.get("/logs").count("Shape test stopping")
    before = set(web_locust.runs())
    assert web_locust.post("/swarm", {**form_defaults(web_locust), "stages": "2"}).get("success")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while web_locust.get("/logs").count("Shape test stopping") == stops:
        assert time.monotonic() < deadline, "the first test never ended"
        time.sleep(0.05)
    second = web_locust.start_test(stages="2")
    (first,) = set(web_locust.runs()) - before - {second}
    for run in (first, second):
        assert web_locust.manifest(run)["status"] == "completed" and len(load_rollouts(run)) > 0


def test_a_bad_value_in_the_form_refuses_that_test_and_says_why(web_locust: WebLocust) -> None:
    before = set(web_locust.runs())
    assert web_locust.post("/swarm", {**form_defaults(web_locust), "hold": "soon"}).get("success")
    deadline = time.monotonic() + 30
    while "--hold takes a number (got 'soon' in the web form)" not in web_locust.get("/logs"):
        assert time.monotonic() < deadline, "the refusal never reached the web UI's log"
        time.sleep(0.25)
    while web_locust.stats()["state"] != "stopped":
        assert time.monotonic() < deadline, "the refused test did not stop"
        time.sleep(0.25)
    assert set(web_locust.runs()) == before  # no run folder for a test that never ran
    assert web_locust.process.poll() is None  # the form is still served: the next test may start


def test_rollouts_cut_off_by_stop_show_as_cancelled_not_failed(web_locust: WebLocust) -> None:
    before = set(web_locust.runs())
    assert web_locust.post("/swarm", {**form_defaults(web_locust), "hold": "30"}).get("success")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while web_locust.stats().get("user_count", 0) < 2:  # the first stage's users are mid-rollout
        assert time.monotonic() < deadline, "the test never reached its first stage"
        time.sleep(0.25)
    time.sleep(1.0)
    web_locust.post("/stop")
    run = web_locust.wait_for_new_run(before)

    assert web_locust.manifest(run)["status"] == "interrupted"  # stopped before its shape ended
    rows = load_rollouts(run)
    cancelled_rows = int((rows.outcome == "cancelled").sum())
    assert cancelled_rows >= 1
    deadline = time.monotonic() + 60  # Locust caches /stats/requests for a couple of seconds; a hang guard
    while True:
        stats = {entry["method"]: entry for entry in web_locust.stats()["stats"] if entry["name"] != "Aggregated"}
        if "cancelled" in stats or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "cancelled" in stats, f"no cancelled request type in Locust's stats: {sorted(stats)}"
    assert stats["cancelled"]["num_requests"] == cancelled_rows
    assert stats["cancelled"]["num_failures"] == 0
    assert all(entry["num_failures"] == 0 for entry in stats.values())
    assert load_truth(run).ended_wall.notna().all()  # no sandbox left behind by the stop


def test_a_burst_started_again_from_the_form_runs_every_step_again(tmp_path: Path) -> None:
    """The burst's gate closed at the end of the first test; the second test's users wait at a fresh one."""
    with web_locust_process(tmp_path / "out", "burst", "-u", "3", "--burst-steps", "2") as locust:
        first = locust.start_test()
        second = locust.start_test()
    for run in (first, second):
        rows = load_rollouts(run)
        assert rows.groupby("stage").size().to_dict() == {"01-burst3": 3, "02-burst3": 3}, run
