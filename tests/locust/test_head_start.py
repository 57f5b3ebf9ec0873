"""`stampede run` starts its engine and embedded vendor before importing Locust (harness.cli.head_start), on a guess
from its command line. What a user relies on: the run uses those very processes when the guess was right, a run
whose guess was wrong still runs as asked (the guessed processes are killed, never used), and a refused run
leaves no process behind.

Real `stampede run` processes, each tagged by an environment variable of its own that every process it starts
inherits, so what is still alive afterwards is found in /proc (loopback only, a few rollouts on the ideal profile).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from foundation.phase_marks import VARIABLE
from tests.support.commands import stampede

TAG = "STAMPEDE_HEAD_START_TEST"


def tagged_env(tmp_path: Path) -> tuple[dict[str, str], str]:
    tag = uuid.uuid4().hex
    return {**os.environ, TAG: tag, VARIABLE: str(tmp_path / "marks.log")}, tag


def alive_with(tag: str) -> list[int]:
    """Processes (not zombies) whose environment carries `tag`: whatever a run left running."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found


def marks(tmp_path: Path) -> list[str]:
    path = tmp_path / "marks.log"
    return [line.split(" ", 2)[2] for line in path.read_text().splitlines()] if path.exists() else []


def rows_of(out: Path) -> dict[str, object]:
    (run_dir,) = [path for path in out.iterdir() if path.is_dir() and not path.is_symlink()]
    return dict(json.loads((run_dir / "run.json").read_text()))


@pytest.mark.parametrize(
    ("shape", "paced"),
    [(("--scenario", "burst", "--users", "3"), True), (("--stages", "3", "--hold", "1"), False)],  # a ramp: unpaced
    ids=["burst", "ramp"],
)
def test_a_run_takes_the_engine_and_vendor_its_head_start_began(
    tmp_path: Path, shape: tuple[str, ...], paced: bool
) -> None:
    env, tag = tagged_env(tmp_path)
    out = tmp_path / "results"
    args = ("run", *shape, "--profile", "ideal", "--progress-interval", "0")
    result = stampede(*args, "--out", str(out), env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = marks(tmp_path)
    assert "engine: taken from the head start" in seen
    assert "vendor: taken from the head start" in seen
    assert seen.count("engine: spawned") == 1 and seen.count("vendor: spawned") == 1  # none started twice
    manifest = rows_of(out)
    assert manifest["status"] == "completed" and manifest["parameters"]["burst_pacing"] is paced
    if paced:  # the burst of 3 (a ramp's rows are as many as its hold let its users make)
        assert manifest["rows"] == {"rollouts": 3}
    assert alive_with(tag) == []


def test_a_wrong_guess_is_killed_and_the_run_gets_what_it_asked_for(tmp_path: Path) -> None:
    env, tag = tagged_env(tmp_path)
    env["STAMPEDE_PROFILE"] = "prime-like"  # the guess; `--sim-prof` (argparse's abbreviation) asks for ideal
    out = tmp_path / "results"
    args = ("run", "--scenario", "burst", "--sim-prof", "ideal", "--users", "3", "--progress-interval", "0")
    result = stampede(*args, "--out", str(out), env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = marks(tmp_path)
    assert "vendor: taken from the head start" not in seen
    assert seen.count("vendor: spawned") == 2  # the guess, then the vendor the run asked for
    assert rows_of(out)["profile"] == "ideal"
    assert alive_with(tag) == []


def test_a_refused_run_leaves_no_process_behind(tmp_path: Path) -> None:
    env, tag = tagged_env(tmp_path)
    (tmp_path / "results" / "taken").mkdir(parents=True)
    args = ("run", "--scenario", "burst", "--profile", "ideal", "--users", "3", "--run-id", "taken")
    result = stampede(*args, "--out", str(tmp_path / "results"), env=env)
    assert result.returncode == 2
    assert "already exists" in result.stderr and "Traceback" not in result.stderr
    assert "command: head start begun" in marks(tmp_path)  # the engine and vendor had been started
    assert alive_with(tag) == []
