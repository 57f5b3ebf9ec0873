"""deploy/k8s against Kubernetes' own API schemas (offline: kubernetes-validate ships them), and Locust's layout.

The schemas are the strict ones (an unknown field is an error, as `kubectl apply --validate=strict` has it), for
the version K8S_VERSION names. A broken copy of each kind of manifest must fail, so the validation can.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from typing import Any

import pytest
import yaml

from tests.deploy.k8s_manifests import K8S, K8S_VERSION, REPO, container, expansions, kustomization, manifests, one
from tests.docker_support import in_ci

try:  # the test extra's kubernetes-validate==1.37.0: Kubernetes' schemas, 1.25 to 1.37, offline
    import kubernetes_validate
except ImportError:  # pragma: no cover - a user's machine without the test extra
    if in_ci():
        raise
    pytest.skip("kubernetes-validate is not installed (pip install -e '.[test]')", allow_module_level=True)


def validate(resource: dict[str, Any]) -> None:
    kubernetes_validate.validate(resource, K8S_VERSION, strict=True)


def test_the_kustomization_lists_every_manifest() -> None:
    files = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization()["resources"]) == files


@pytest.mark.parametrize("manifest", manifests(), ids=lambda m: f"{m.path.name}:{m.kind}")
def test_each_manifest_matches_the_api_schema(manifest: Any) -> None:
    validate(manifest.resource)


BROKEN = [
    # (file, text replaced, its broken form): a misspelt field, a wrong type, a field where it does not belong
    ("worker-deployment.yaml", "  replicas: 2", "  replica: 2"),
    ("master-service.yaml", "      port: 5557", '      port: "five-five-five-seven"'),
    ("master-deployment.yaml", "            requests:", "            request:"),
    ("results-pvc.yaml", "  accessModes: [ReadWriteOnce]", "  accessModes: ReadWriteOnce"),
    ("run-config.yaml", 'STAMPEDE_HOLD: "30"', "STAMPEDE_HOLD: 30"),  # a ConfigMap's values are strings
]


@pytest.mark.parametrize(("name", "good", "bad"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_copy_fails_validation(name: str, good: str, bad: str) -> None:
    text = (K8S / name).read_text()
    assert text.count(good) == 1, f"{name} no longer holds {good!r}: update the broken copy"
    validate(yaml.safe_load(text))
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(yaml.safe_load(text.replace(good, bad)))


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl to render the kustomization")
def test_the_rendered_kustomization_validates() -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    resources = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert len(resources) == len(manifests())
    for resource in resources:
        validate(resource)
        assert resource["metadata"]["labels"]["app.kubernetes.io/name"] == "stampede"
        if resource["kind"] == "Deployment":
            assert container(resource)["image"] == "stampede:local"


def test_a_broken_rendering_fails_too() -> None:
    worker = copy.deepcopy(one("Deployment", "stampede-worker"))
    worker["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = ["576Mi"]
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(worker)


def master_args() -> str:
    return " ".join(container(one("Deployment", "stampede-master"))["args"])


def flag(args: str, name: str) -> str:
    match = re.search(rf"{re.escape(name)}[ =]+\"?([^\s\";]+)", args)
    assert match, f"no {name} in {args!r}"
    return match.group(1)


def test_locust_layout_master_service_workers_and_metrics() -> None:
    master = one("Deployment", "stampede-master")
    workers = one("Deployment", "stampede-worker")
    service = one("Service", "stampede-master")
    args = master_args()
    assert master["spec"]["replicas"] == 1
    assert service["spec"]["selector"] == master["spec"]["template"]["metadata"]["labels"]
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports["master"] == int(flag(args, "--master-port")) == 5557
    assert ports["metrics"] == int(flag(args, "--metrics-port"))
    assert flag(args, "--master-bind-host") == flag(args, "--metrics-host") == "0.0.0.0"
    for annotated in (service["metadata"], master["spec"]["template"]["metadata"]):
        annotations = annotated["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert int(annotations["prometheus.io/port"]) == ports["metrics"]
    worker_args = container(workers)["args"]
    assert worker_args[:3] == ["stampede", "run", "--worker"]
    # the master's scenario, from the same ConfigMap key (a worker of another scenario is refused)
    assert worker_args[worker_args.index("--scenario") + 1] == "$(STAMPEDE_SCENARIO)"
    (scenario_env,) = [e for e in container(workers)["env"] if e["name"] == "STAMPEDE_SCENARIO"]
    assert scenario_env["valueFrom"]["configMapKeyRef"] == {"name": "stampede-run", "key": "STAMPEDE_SCENARIO"}
    assert '--scenario "$(STAMPEDE_SCENARIO)"' in container(one("Deployment", "stampede-master"))["args"][0]
    assert worker_args[worker_args.index("--master-host") + 1] == service["metadata"]["name"]
    assert int(worker_args[worker_args.index("--master-port") + 1]) == ports["master"]
    config = one("ConfigMap", "stampede-run")["data"]
    assert int(config["STAMPEDE_EXPECT_WORKERS"]) == workers["spec"]["replicas"]


def test_results_volume_is_where_out_writes() -> None:
    master = one("Deployment", "stampede-master")
    claim = one("PersistentVolumeClaim", "stampede-results")
    volumes = {v["name"]: v for v in master["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container(master)["volumeMounts"]}
    out = flag(master_args(), "--out")
    assert volumes[mounts[out]]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]


def test_the_token_comes_from_a_secret_and_nowhere_else() -> None:
    secret = one("Secret", "stampede-vendor-token")
    for manifest in manifests():
        if manifest.kind != "Deployment":
            continue
        for entry in container(manifest.resource).get("env", []):
            if "TOKEN" in entry["name"]:
                assert "value" not in entry, f"{manifest.name} sets {entry['name']} in plain text"
                assert entry["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]
        assert "--token" not in " ".join(container(manifest.resource).get("args", []))
    assert not any("TOKEN" in key for key in one("ConfigMap", "stampede-run")["data"])


def test_every_setting_in_the_config_map_is_read() -> None:
    """Each key is expanded into the master's args, or is an env var `stampede run` reads (its --help says)."""
    config = one("ConfigMap", "stampede-run")["data"]
    expanded = expansions(master_args())
    assert expanded <= set(config), f"the master expands {expanded - set(config)}, which the ConfigMap lacks"
    helped = subprocess.run(
        [sys.executable, "-c", "import sys; from harness.cli.main import main; sys.exit(main())", "run", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=REPO,
    ).stdout
    read = set(re.findall(r"\[env\s+(STAMPEDE_[A-Z_]+)\]", helped))
    assert "STAMPEDE_STAGES" in read
    unread = set(config) - expanded - read
    assert not unread, f"the ConfigMap sets {unread}, which stampede run does not read"


def quantity(text: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    number, unit = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", text).groups()  # type: ignore[union-attr]
    return int(number) * units[unit]


def test_worker_memory_covers_the_measured_cost_per_rollout() -> None:
    """bench/README.md's run-limits row, for 5,000 in flight per engine, over two interpreters' baseline."""
    row = next(line for line in (REPO / "bench" / "README.md").read_text().splitlines() if "bench_run_limits" in line)
    locust_kb, engine_kb = (float(x) for x in re.search(r"Locust ([\d.]+) KB, engine ([\d.]+) KB", row).groups())  # type: ignore[union-attr]
    per_engine, baseline = 5_000, 2 * 150 * 2**20  # an engine's comfortable peak; two interpreters (143 MB measured)
    needed = per_engine * (locust_kb + engine_kb) * 1000 + baseline
    resources = container(one("Deployment", "stampede-worker"))["resources"]
    assert quantity(resources["requests"]["memory"]) >= needed
    assert quantity(resources["limits"]["memory"]) >= 1.5 * needed
    assert "cpu" not in resources["limits"], "a CPU limit throttles the engine, which the run counts as loop lag"
