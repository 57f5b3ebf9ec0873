"""A run.json or latency model a careless or hostile hand wrote: `stampede summary`, `report` and `model` answer one
line and exit 2 (a real run folder of parquet shards, the real command as a subprocess), never a traceback, and a
run.json's fields are checked as they are read (a time scale of 0 divided every duration into infinity)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.commands import stampede
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

REPO = Path(__file__).resolve().parents[2]
DEEP = "[" * 100_000 + "]" * 100_000  # parses in any JSON reader without a depth limit; Python's recurses


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single line a bad input earns (exit 2, no traceback)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    return lines[0]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    return write_synthetic_run(root, SyntheticRun(run_id="good", stages=(SyntheticStage(10, 200),), seed=1))


def with_run_json(good_run: Path, tmp_path: Path, text: str) -> Path:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    (run / "run.json").write_text(text)
    return run


@pytest.mark.parametrize("command", ["summary", "report"])
def test_a_deeply_nested_run_json_is_one_line(good_run: Path, tmp_path: Path, command: str) -> None:
    run = with_run_json(good_run, tmp_path, DEEP)
    extra = ["-o", str(tmp_path / "out")] if command == "report" else []
    assert "run.json" in one_line(stampede(command, str(run), *extra))


@pytest.mark.parametrize("value", [0, -1, "abc", float("inf"), True, None])
def test_a_run_json_time_scale_must_be_a_positive_finite_number(good_run: Path, tmp_path: Path, value: object) -> None:
    manifest = json.loads((good_run / "run.json").read_text())
    if value is None:
        manifest.pop("time_scale")  # absent: a run without a recorded scale reads at 1, as before
        assert stampede("summary", str(with_run_json(good_run, tmp_path, json.dumps(manifest)))).returncode == 0
        return
    manifest["time_scale"] = value
    text = json.dumps(manifest).replace("Infinity", "1e999")
    line = one_line(stampede("summary", str(with_run_json(good_run, tmp_path, text))))
    assert "time_scale" in line and "run.json" in line


@pytest.mark.parametrize(("field", "value"), [("run_id", ["x"]), ("parameters", "p"), ("versions", 3)])
def test_a_run_json_field_of_the_wrong_type_is_one_line(
    good_run: Path, tmp_path: Path, field: str, value: object
) -> None:
    manifest = json.loads((good_run / "run.json").read_text())
    manifest[field] = value
    line = one_line(stampede("summary", str(with_run_json(good_run, tmp_path, json.dumps(manifest)))))
    assert field in line


def test_a_deeply_nested_latency_model_is_one_line(tmp_path: Path) -> None:
    model = tmp_path / "latency_model.json"
    model.write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    line = one_line(stampede("model", "--latency", str(model), "--config", str(REPO / "examples/rl-glm5-slime.toml")))
    assert str(model) in line
