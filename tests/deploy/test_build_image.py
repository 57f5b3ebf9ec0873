"""deploy/build-image builds the image offline, and the image runs master and workers as deploy/k8s says.

The run takes the master's and the workers' commands from the manifests (the ConfigMap expanded into them as
Kubernetes does), as uid 10001 on a read-only root with /tmp in memory, as the pods run, on the local daemon with
host networking: loopback only, so the 0.0.0.0 binds become 127.0.0.1 and the ports free ones. The vendor is the
image's own `stampede stub serve`. Needs a Docker daemon: skips without one on a user's machine, fails under CI=true.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.deploy.k8s_manifests import REPO, container, expand, one
from tests.docker_support import machine_daemon

BUILD = REPO / "deploy" / "build-image"
RUN_WITHIN = 240.0  # seconds for the whole master + workers run (about 40 s here)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)


def test_a_bad_argument_is_one_error_line() -> None:
    done = subprocess.run(["bash", str(BUILD), "--tag"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("build-image: usage:"), done.stderr


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return str(answer.read().decode())
    except OSError:
        return ""


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.timeout(900)
def test_the_image_runs_master_and_workers_from_the_manifests(tmp_path: Path) -> None:
    machine_daemon()
    tag = f"stampede:test-{uuid.uuid4().hex[:8]}"
    built = subprocess.run(["bash", str(BUILD), tag], capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stderr
    assert re.fullmatch(rf"build-image: built {re.escape(tag)} \(\d+ MiB, .*\) in \d+s\n", built.stdout), built.stdout
    names: list[str] = []
    try:
        results = tmp_path / "results"
        results.mkdir()
        results.chmod(0o777)  # the pods' uid 10001 writes here, as fsGroup lets it on the volume
        stub_port, master_port, metrics_port = free_port(), free_port(), free_port()
        token = uuid.uuid4().hex
        pod = ["--network", "host", "--user", "10001:10001", "--read-only", "--tmpfs", "/tmp"]
        pod += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
        prefix = f"stampede-deploy-test-{uuid.uuid4().hex[:6]}"

        def start(role: str, *args: str) -> str:
            name = f"{prefix}-{role}"
            names.append(name)
            started = docker("run", "-d", "--name", name, *pod, *args)
            assert started.returncode == 0, started.stderr
            return name

        start("vendor", tag, "stampede", "stub", "serve", "--profile", "ideal", "--port", str(stub_port),
              "--token", token)  # fmt: skip
        worker = container(one("Deployment", "stampede-worker"))
        scenario = {"STAMPEDE_SCENARIO": str(one("ConfigMap", "stampede-run")["data"]["STAMPEDE_SCENARIO"])}
        worker_args = [
            expand(a, scenario).replace("stampede-master", "127.0.0.1").replace("5557", str(master_port))
            for a in worker["args"]
        ]
        replicas = one("Deployment", "stampede-worker")["spec"]["replicas"]
        for index in range(replicas):
            start(f"worker{index}", tag, *worker_args)

        master = container(one("Deployment", "stampede-master"))
        config = dict(one("ConfigMap", "stampede-run")["data"])
        config.update(STAMPEDE_BASE_URL=f"http://127.0.0.1:{stub_port}", STAMPEDE_STAGES="20,40", STAMPEDE_HOLD="2")
        script = expand(master["args"][0], config)
        for old, new in (("0.0.0.0", "127.0.0.1"), ("5557", str(master_port)), ("9464", str(metrics_port))):
            assert old in script
            script = script.replace(old, new)
        env = [f"--env={key}={value}" for key, value in config.items()] + [f"--env=STAMPEDE_TOKEN={token}"]
        master_name = start("master", *env, "-v", f"{results}:/results", "--entrypoint", master["command"][0], tag,
                            *master["command"][1:], script)  # fmt: skip

        deadline = time.monotonic() + RUN_WITHIN
        logs, metrics = "", ""
        while time.monotonic() < deadline and "the run ended" not in logs:
            time.sleep(1.0)
            logs = docker("logs", master_name).stdout
            if "stampede_" not in metrics:
                metrics = scrape(metrics_port)
        ended = re.search(r"the run ended \(exit (\d+)\)", logs)
        assert ended, f"no end of run within {RUN_WITHIN:.0f} s:\n{logs[-3000:]}"
        assert ended.group(1) == "0", logs[-3000:]
        assert "stampede_" in metrics, "the master's --metrics-port never answered with the run's figures"
        (run,) = [p for p in results.iterdir() if p.is_dir() and not p.is_symlink()]
        workers_said = "".join(docker("logs", name).stderr[-1500:] for name in names if "worker" in name)
        master_said = docker("logs", master_name).stderr[-3000:]
        assert (run / "summary.json").exists(), f"no summary.json:\n{logs[-3000:]}\n{master_said}\n{workers_said}"
        summary = json.loads((run / "summary.json").read_text())
        assert (summary["status"], summary["exit_code"]) == ("completed", 0)
        assert len(list(run.glob("engine-*.json"))) == replicas, "not every worker's engine took part"
        assert list((run / "rollouts").iterdir()), "no rollout shards shipped to the master"
    finally:
        for name in names:
            docker("rm", "-f", name)
        docker("rmi", "-f", tag, timeout=120)
