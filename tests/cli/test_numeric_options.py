"""Every numeric option of `stampede run` and `locust -f` is finite and in range when the command line is parsed.

`-r nan` once passed (`spawn_rate <= 0` is false for NaN) and `--stages 1000000000` got past the command line
(only the machine's budget stopped it, and `--allow-oversubscribe` lifted that). Each bad value below is one line
on stderr and exit status 2, before any run starts: real `stampede`/`locust` processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# (arguments, the option the error line must name). Run with --allow-oversubscribe: the command line's own
# bound must hold even when the machine's budget is lifted.
BAD_RUN_VALUES: list[tuple[list[str], str]] = [
    (["-r", "nan"], "--spawn-rate"),
    (["-r", "inf"], "--spawn-rate"),
    (["-r", "-1"], "--spawn-rate"),
    (["-r", "1e9"], "--spawn-rate"),
    (["-u", "1000000000"], "--users"),
    (["-u", "0"], "--users"),
    (["--stages", "1000000000"], "--stages"),
    (["--stages", "1..1000000000"], "--stages"),
    (["--hold", "nan"], "--hold"),
    (["--hold", "inf"], "--hold"),
    (["--time-scale", "nan"], "--time-scale"),
    (["--stagger-ms", "nan"], "--stagger-ms"),
    (["--rates", "1e9"], "--rates"),
    (["--max-inflight", "1000000000"], "--max-inflight"),
    (["--batch", "2000000"], "--batch"),
    (["--batch", "1001", "--group", "1000"], "--batch x --group"),
    (["--burst-steps", "1000000000"], "--burst-steps"),
    (["--knee-max-failure", "nan"], "--knee-max-failure"),
    (["--knee-max-p99", "nan"], "--knee-max-p99"),
    (["--rollout-timeout", "inf"], "--rollout-timeout"),
    (["--retries", "1000000000"], "--retries"),
    (["--retry-backoff", "nan"], "--retry-backoff"),
    (["--create-timeout", "nan"], "--create-timeout"),
    (["--ready-timeout", "1e300"], "--ready-timeout"),
    (["--exec-timeout", "nan"], "--exec-timeout"),
    (["--cpu", "nan"], "--cpu"),
    (["--memory-mb", "99999999999"], "--memory-mb"),
    (["--lifetime", "nan"], "--lifetime"),
    (["--progress-interval", "nan"], "--progress-interval"),
    (["--stop-timeout", "nan"], "--stop-timeout"),
    (["--turns", "1000000000"], "--turns"),
    (["--workers", "100000"], "--workers"),
    (["--master", "--expect-workers", "0"], "--expect-workers"),
    (["--master-port", "70000"], "--master-port"),
]


def _one_line_exit_2(result: subprocess.CompletedProcess, option: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert option in lines[0], lines[0]


def _run(command: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(("args", "option"), BAD_RUN_VALUES, ids=[" ".join(a) for a, _ in BAD_RUN_VALUES])
def test_stampede_run_refuses_a_bad_number_at_parse_time(args: list[str], option: str, tmp_path: Path) -> None:
    base = ["--out", str(tmp_path / "out"), "--run-time", "2s", "--allow-oversubscribe"]
    result = _run([sys.executable, "-m", "harness.cli", "run", *base, *args], tmp_path)
    _one_line_exit_2(result, option)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_an_environment_variable_is_held_to_the_same_range(tmp_path: Path) -> None:
    base = ["--out", str(tmp_path / "out"), "--run-time", "2s"]
    result = _run([sys.executable, "-m", "harness.cli", "run", *base], tmp_path, env={"STAMPEDE_HOLD": "nan"})
    _one_line_exit_2(result, "--hold")


@pytest.mark.parametrize(
    ("args", "option"),
    [(["-r", "nan"], "--spawn-rate"), (["--stages", "1000000000"], "--stages"), (["--hold", "nan"], "--hold")],
    ids=["-r nan", "--stages 1000000000", "--hold nan"],
)
def test_locust_f_refuses_a_bad_number(args: list[str], option: str, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "locust", "-f", "scenarios/ramp.py", "--headless", "-t", "2s", *args]
    result = _run([*command, "--out", str(tmp_path / "out"), "--allow-oversubscribe"], tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert option in result.stderr
