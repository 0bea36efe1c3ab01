"""Kubernetes per-component knobs (issue 25 item 1): an image override per component, an
optional credentials Secret in every pod, and disruption budgets that select real pods."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from streams.settings import REPO_ROOT

yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
K8S = REPO_ROOT / "deploy" / "k8s"
COMPONENTS = {
    "solaris-pipeline": "solaris:cpu",
    "solaris-fm-worker": "solaris:gpu",
    "solaris-ranker": "solaris:cpu",
    "solaris-exporter": "solaris:cpu",
}


def _render(folder: Path) -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (needed to render the kustomization)")
    out = subprocess.run(
        ["kubectl", "kustomize", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _images(docs: list[dict[str, Any]]) -> dict[str, str]:
    return {
        d["metadata"]["name"]: c["image"]
        for d in docs
        if d["kind"] in ("Deployment", "StatefulSet")
        for c in d["spec"]["template"]["spec"]["containers"]
    }


def test_one_components_image_is_overridden_alone(tmp_path: Path) -> None:
    """What `kustomize edit set image solaris-fm-worker=...` writes: only the FM worker moves
    (with one shared image name, overriding it also replaced the FM worker's GPU build)."""
    before = _images(_render(K8S))
    assert sorted(before.values()) == sorted(COMPONENTS.values())
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    kust = yaml.safe_load((copy / "kustomization.yaml").read_text())
    names = [entry["name"] for entry in kust["images"]]
    assert sorted(names) == sorted(COMPONENTS)
    for entry in kust["images"]:
        if entry["name"] == "solaris-fm-worker":
            entry.update(newName="registry.example/solaris", newTag="gpu-9")
    (copy / "kustomization.yaml").write_text(yaml.safe_dump(kust))
    after = _images(_render(copy))
    changed = {name for name in after if after[name] != before[name]}
    assert changed == {"solaris-fm"}  # the FM worker's StatefulSet/Deployment
    assert after["solaris-fm"] == "registry.example/solaris:gpu-9"


def test_every_pod_reads_the_optional_credentials_secret() -> None:
    for doc in _render(K8S):
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            refs = [e["secretRef"] for e in container.get("envFrom", []) if "secretRef" in e]
            assert refs == [{"name": "solaris-credentials", "optional": True}], doc["metadata"][
                "name"
            ]


def test_disruption_budgets_select_the_workloads_they_protect() -> None:
    docs = _render(K8S)
    pods = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
        for d in docs
        if d["kind"] in ("Deployment", "StatefulSet")
    }
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    covered = set()
    for pdb in budgets:
        want = pdb["spec"]["selector"]["matchLabels"]
        matched = [n for n, labels in pods.items() if want.items() <= labels.items()]
        assert len(matched) == 1, (pdb["metadata"]["name"], matched)
        covered.update(matched)
    assert covered == {"solaris-pipeline", "solaris-fm", "solaris-ranker"}


def test_pods_that_load_a_bundle_fetch_it_first_into_their_models_volume() -> None:
    """Model delivery that works on a cluster: every pod whose main container mounts `models`
    runs `solaris models fetch` first (same image, the ConfigMap and the optional Secret) into
    that volume, an emptyDir of the pod (no claim that nothing fills)."""
    docs = _render(K8S)
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    assert {"SOLARIS_BUNDLE_URL", "SOLARIS_BUNDLE_SHA256"} <= config.keys()
    fetching = set()
    for doc in docs:
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        spec = doc["spec"]["template"]["spec"]
        (main,) = spec["containers"]
        mounts = {m["name"]: m["mountPath"] for m in main.get("volumeMounts", [])}
        if "models" not in mounts:
            assert not spec.get("initContainers"), doc["metadata"]["name"]
            continue
        assert mounts["models"] == config["SOLARIS_MODEL_DIR"]
        (init,) = spec["initContainers"]
        assert init["args"] == ["models", "fetch"] and init["image"] == main["image"]
        assert init["envFrom"] == main["envFrom"]
        assert {m["name"]: m["mountPath"] for m in init["volumeMounts"]} == {
            "models": config["SOLARIS_MODEL_DIR"]
        }
        (volume,) = [v for v in spec["volumes"] if v["name"] == "models"]
        assert "emptyDir" in volume
        fetching.add(doc["metadata"]["name"])
    assert fetching == {"solaris-pipeline", "solaris-fm", "solaris-ranker"}
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
