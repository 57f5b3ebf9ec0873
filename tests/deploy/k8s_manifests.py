"""deploy/k8s's manifests, read the way `kubectl apply -k` takes them, for the tests of tests/deploy."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
# The Kubernetes version whose API schemas the manifests must match (kubernetes-validate bundles 1.25 to 1.37):
# 1.33, the oldest minor release still supported upstream when this was written (2026-12)
K8S_VERSION = "1.33.0"
_EXPANSION = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@dataclass(frozen=True)
class Manifest:
    """One resource of deploy/k8s and the file it came from."""

    path: Path
    resource: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.resource["kind"])

    @property
    def name(self) -> str:
        return str(self.resource["metadata"]["name"])


def kustomization() -> dict[str, Any]:
    loaded = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def manifests() -> list[Manifest]:
    """Every resource the kustomization lists, in its order."""
    found: list[Manifest] = []
    for name in kustomization()["resources"]:
        path = K8S / name
        found.extend(Manifest(path, doc) for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


def one(kind: str, name: str) -> dict[str, Any]:
    matches = [m.resource for m in manifests() if m.kind == kind and m.name == name]
    assert len(matches) == 1, f"want one {kind} {name}, found {len(matches)}"
    return matches[0]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def expand(text: str, values: dict[str, str]) -> str:
    """Kubernetes' $(NAME) expansion of command and args from the container's environment."""
    return _EXPANSION.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def expansions(text: str) -> set[str]:
    return set(_EXPANSION.findall(text))
