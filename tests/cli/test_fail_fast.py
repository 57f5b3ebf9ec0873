"""A provider that cannot start costs one line and exit 2, before any load: no run folder, `results/latest` as it was.

Real `stampede run` and `locust -f` processes. The provider's options and credentials are checked before Locust
starts (its adapter built, a real endpoint's preflight run in a child interpreter); a vendor that still refuses the
engine's own preflight later (a token revoked in between) ends the run at once, not after the stop timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.locust.test_locust_web_ui import form_defaults, web_locust_process

REPO = Path(__file__).resolve().parents[2]
SCRIPTED = "tests.support.scripted_provider:ScriptedProvider"
A_LONG_STOP_TIMEOUT = "600"  # a run that sat out its stop timeout would outlast the subprocess's timeout below


def command(*args: str, out: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("E2B_")}
    return subprocess.run(
        [sys.executable, *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
    )


def results_with_an_earlier_run(tmp_path: Path) -> Path:
    out = tmp_path / "results"
    (out / "earlier").mkdir(parents=True)
    (out / "latest").write_text("earlier\n")
    return out


def assert_no_run(out: Path) -> None:
    assert sorted(p.name for p in out.iterdir()) == ["earlier", "latest"], "a run folder was left behind"
    assert (out / "latest").read_text() == "earlier\n", "results/latest moved to a run that never ran"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--provider", "e2b"],
            "no API key; set E2B_API_KEY (or --provider-option api_key=...), or use --local for the local E2B",
        ),
        (["--provider-option", "bogus=1"], "stub provider: unknown option(s) bogus"),
        (["--provider", "e2b", "--local", "--provider-option", "bogus=1"], "e2b provider: unknown option(s) bogus"),
        (
            ["--provider", "e2b", "--base-url", "http://127.0.0.1:9", "--token", "tok-12345"],
            "127.0.0.1:9 is unreachable",
        ),
    ],
    ids=["no-key", "unknown-option", "unknown-option-local", "unreachable-endpoint"],
)
def test_a_provider_that_cannot_start_is_one_line_exit_2_and_no_run(tmp_path, args, needle):
    out = results_with_an_earlier_run(tmp_path)
    result = command("-m", "harness.cli", "run", "--scenario", "burst", "--users", "2", *args, out=out)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr + result.stdout
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "tok-12345" not in result.stderr and "Traceback" not in result.stderr
    assert "ended:" not in result.stdout
    assert_no_run(out)


@pytest.mark.parametrize("front", ["stampede run", "locust -f"])
def test_a_vendor_that_refuses_the_engine_after_the_check_ends_the_run_at_once(tmp_path, front):
    """The check before the run passes (the first preflight); the engine's own is refused (a revoked token)."""
    out = results_with_an_earlier_run(tmp_path)
    options = ["--provider", SCRIPTED, "--provider-option", f"preflight_once={tmp_path / 'checked'}"]
    if front == "stampede run":
        args = ["-m", "harness.cli", "run", "--scenario", "burst", "--stop-timeout", A_LONG_STOP_TIMEOUT]
    else:
        args = ["-m", "locust", "-f", "scenarios/burst.py", "--headless", "--stop-timeout", A_LONG_STOP_TIMEOUT]
    result = command(*args, "--users", "2", *options, out=out)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "scripted vendor refused the token (revoked)" in result.stderr
    assert (tmp_path / "checked").exists()  # the check before the run did pass: the engine's preflight refused
    assert "ended:" not in result.stdout
    assert_no_run(out)


@pytest.mark.slow
def test_under_the_web_ui_a_test_refused_at_its_start_leaves_no_run_and_the_form_served(tmp_path):
    out = tmp_path / "webui"
    flag = tmp_path / "checked"
    args = ("--provider", SCRIPTED, "--provider-option", f"preflight_once={flag}", "--stages", "2", "--hold", "1")
    with web_locust_process(out, "ramp", *args) as locust:
        for attempt in (1, 2):  # the engine refuses the first; the check before the second refuses it
            assert locust.post("/swarm", form_defaults(locust)).get("success")
            deadline = time.monotonic() + 120
            while locust.get("/logs").count("scripted vendor refused the token (revoked)") < attempt:
                assert time.monotonic() < deadline, locust.log.read_text()[-3000:]
                time.sleep(0.25)
            while locust.stats()["state"] not in ("stopped", "ready"):
                assert time.monotonic() < deadline, "the refused test did not stop"
                time.sleep(0.25)
            assert locust.runs() == [], "a refused test left a run folder"
            assert not (out / "latest").exists()
            assert locust.process.poll() is None  # the form is still served: the next test may start
