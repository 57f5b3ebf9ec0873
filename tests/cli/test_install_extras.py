"""`pip install stampede` runs the main job (the stub provider on the embedded Prime-like vendor) without any
vendor's SDK; each SDK is an extra (`stampede[modal]`, ...), and a provider whose SDK is missing says which.

The SDKs are installed here (the test extra pulls `all`), so a child interpreter is made to lack them: a
`sitecustomize` on PYTHONPATH marks their modules absent in every process of the run (Locust, engine, vendor)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from providers import SDK_EXTRAS

REPO = Path(__file__).resolve().parents[2]
SDK_MODULES = (
    "prime_sandboxes",
    "modal",
    "modal_proto",
    "e2b",
    "daytona",
    "connectrpc",
    "grpclib",
    "pyqwest",
    "vercel",
    "runloop_api_client",
    "k8s_agent_sandbox",
    "kubernetes_asyncio",
    "cwsandbox",
)


@pytest.fixture
def without_sdks(tmp_path) -> dict[str, str]:
    """An environment whose interpreters cannot import any vendor SDK (as after a bare `pip install stampede`)."""
    (tmp_path / "sitecustomize.py").write_text(
        f"import sys\nfor name in {SDK_MODULES!r}:\n    sys.modules[name] = None  # import raises ModuleNotFoundError\n"
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}


def stampede(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "harness.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd, env=env, check=False)


def test_the_extras_exist_and_the_test_extra_pulls_every_sdk():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    base = " ".join(project["dependencies"])
    for extra in SDK_EXTRAS.values():
        assert extra in extras, extra
    for sdk in ("prime-sandboxes", "modal", "e2b", "daytona"):
        assert sdk not in base, f"{sdk} is a base dependency again"
    assert extras["all"] == [f"stampede[{','.join(SDK_EXTRAS.values())}]"]
    assert "stampede[all]" in extras["test"]


@pytest.mark.parametrize("provider", sorted(SDK_EXTRAS))
def test_a_provider_without_its_sdk_names_the_extra_in_one_line(provider, without_sdks, tmp_path):
    result = stampede(["run", "--provider", provider, "--local", "-t", "5s"], without_sdks, tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert result.stderr.strip().endswith(f"pip install 'stampede[{SDK_EXTRAS[provider]}]'"), result.stderr


def test_the_local_modal_plane_without_the_sdk_names_the_extra(without_sdks, tmp_path):
    result = stampede(["modal-local", "serve", "--port", "0"], without_sdks, tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    line = result.stderr.strip()
    assert line.startswith("stampede: error: stampede modal-local serve needs the modal SDK") and "\n" not in line
    assert line.endswith("pip install 'stampede[modal]'"), line


@pytest.mark.slow
def test_the_main_job_runs_without_any_vendor_sdk(without_sdks, tmp_path):
    args = ["run", "--provider", "stub", "--scenario", "burst", "--users", "20", "--profile", "ideal"]
    result = stampede([*args, "--out", str(tmp_path / "results"), "--run-id", "bare"], without_sdks, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ended: completed" in result.stdout
    assert (tmp_path / "results" / "bare" / "summary.json").is_file()
