"""One run id, two invocations: neither destroys the other's sandboxes or folder; run ids are safe as paths
and every command printed for pasting is quoted (issue 28, rows 3 and 9).

Real pieces: the Prime-like stub vendor over loopback HTTP, a second Python process creating sandboxes as
another invocation's engine would, and `stampede run` processes started at once with one --run-id.
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.read.run_ending import cleanup_command
from providers.base import SandboxSpec
from providers.sim.prime.api import StubSettings, start_stub
from providers.vendors.stub.provider import StubProvider

REPO = Path(__file__).resolve().parents[2]
RUN_ID = "shared-run"

OTHER_INVOCATION = """
import asyncio, sys
from providers.base import SandboxSpec
from providers.vendors.stub.provider import StubProvider

async def main() -> None:
    provider = StubProvider.from_options({"base_url": sys.argv[1], "token": sys.argv[2], "poll_interval_s": 0.01})
    for i in range(3):
        ref = await provider.create(SandboxSpec(run_id=sys.argv[3], rollout_id=f"b{i}", engine="local", lifetime_s=600))
        await provider.wait_ready(ref, timeout=20)
        print(ref.sandbox_id, flush=True)
    await provider.aclose()

asyncio.run(main())
"""


async def test_a_runs_sweep_spares_another_invocation_of_the_same_run_id_and_cleanup_reaps_both() -> None:
    stub = await start_stub(StubSettings(profile="ideal", seed=1))
    provider = StubProvider.from_options({"base_url": stub.url, "token": stub.token, "poll_interval_s": 0.01})
    try:
        # invocation B: another process, the same --run-id and engine name, its sandboxes still in use
        other = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            OTHER_INVOCATION,
            stub.url,
            stub.token,
            RUN_ID,
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
        )
        stdout, _ = await asyncio.wait_for(other.communicate(), timeout=120)
        assert other.returncode == 0
        theirs = set(stdout.decode().split())
        assert len(theirs) == 3
        # invocation A: this process, creating then sweeping as an engine's drain does
        refs = [
            await provider.create(SandboxSpec(run_id=RUN_ID, rollout_id=f"a{i}", engine="local", lifetime_s=600))
            for i in range(2)
        ]
        for ref in refs:
            await provider.wait_ready(ref, timeout=20)

        assert await provider.cleanup(RUN_ID, "local") == 2  # the end-of-run sweep: this invocation's only
        alive = {ref.sandbox_id for ref in await provider.list_owned(RUN_ID)}
        assert alive == theirs, "the sweep reaped another invocation's sandboxes"
        # `stampede cleanup --run-id shared-run`: every invocation of that run id
        assert await provider.cleanup(RUN_ID) == 3
        assert await provider.list_owned(RUN_ID) == []
    finally:
        await provider.aclose()
        await stub.close()


def stampede_run(out: Path, run_id: str, *extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "harness.cli", "run", "--profile", "ideal", "--stages", "1", "--hold", "1"]
    command += ["--out", str(out), "--run-id", run_id, "--progress-interval", "0", "--stop-timeout", "0", *extra]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_runs_started_at_once_with_one_id_in_one_folder_one_of_them_refuses_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "results"
    processes = [stampede_run(out, "same-id") for _ in range(2)]
    results = [(process.wait(timeout=300), *process.communicate()) for process in processes]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    (refused_err,) = [err for code, _, err in results if code == 2]
    lines = [line for line in refused_err.splitlines() if line.strip()]
    assert len(lines) == 1 and "same-id" in lines[0] and "already exists" in lines[0], refused_err
    assert "Traceback" not in refused_err
    assert [path.name for path in out.iterdir() if path.is_dir()] == ["same-id"]


@pytest.mark.parametrize(
    ("run_id", "why"),
    [
        ("../../escape", "escape"),
        ("x" * 300, "300 characters"),
        ("r1 $(touch pwned)", "shell"),
        (".hidden", "dot"),
    ],
)
def test_a_run_id_outside_the_safe_set_is_refused_in_one_line_before_anything_is_written(
    tmp_path: Path, run_id: str, why: str
) -> None:
    out = tmp_path / "a" / "b" / "results"
    process = stampede_run(out, run_id)
    code = process.wait(timeout=120)
    _, err = process.communicate()
    assert code == 2, (why, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("stampede: ") and "--run-id" in lines[0], (why, err)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == [], why  # nothing, above --out either
    assert not (REPO / "pwned").exists()


def test_the_printed_cleanup_command_pastes_back_as_the_same_words() -> None:
    manifest = {"provider": "stub", "run_id": "r1 $(touch pwned)", "base_url": "http://h:1/a b"}
    command = cleanup_command(manifest)
    assert command is not None
    assert shlex.split(command) == [
        "stampede",
        "cleanup",
        "--provider",
        "stub",
        "--base-url",
        "http://h:1/a b",
        "--run-id",
        "r1 $(touch pwned)",
    ]
