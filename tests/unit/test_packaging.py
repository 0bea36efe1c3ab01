"""ONNX Runtime comes from exactly one of the ``cpu`` / ``gpu`` extras.

``onnxruntime`` and ``onnxruntime-gpu`` both install the ``onnxruntime`` module, so a host that
gets both has whichever wheel was installed last. The base dependencies and the ``train`` extra
must therefore pull in neither (directly or through what they require), ``cpu`` and ``gpu`` must
each name one, and the installers (``infra/venv.sh``, the Dockerfile) must pick one of them.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from streams.settings import REPO_ROOT

PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
ORT = {"onnxruntime", "onnxruntime-gpu"}


def names(requirements: Iterable[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def ort_in(requirements: Iterable[str]) -> set[str]:
    """The ONNX Runtime distributions named (``onnxruntime*``), canonical names."""
    return {n for n in names(requirements) if n.startswith("onnxruntime")}


def installed_closure(requirements: Iterable[str]) -> set[str]:
    """Every distribution these requirements pull in, following the installed packages'
    metadata (with the extras each one is asked for); ones not installed end the walk."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            sub = Requirement(text)
            wanted = [{"extra": e} for e in req.extras] or [{"extra": ""}]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in wanted):
                todo.append(sub)
    return seen


def test_base_and_train_declare_no_onnxruntime() -> None:
    assert ort_in(PROJECT["dependencies"]) == set()
    for extra, requirements in EXTRAS.items():
        if extra not in ("cpu", "gpu"):
            assert ort_in(requirements) == set(), extra


def test_base_and_train_pull_in_no_onnxruntime() -> None:
    """Transitively, as installed here (onnx/onnxscript of ``train`` need no runtime)."""
    assert installed_closure(PROJECT["dependencies"]) & ORT == set()
    closure = installed_closure(EXTRAS["train"])
    assert {"torch", "onnx", "onnxscript"} <= closure  # the walk did follow the extra
    assert closure & ORT == set()


def test_cpu_and_gpu_are_separate_extras_with_one_runtime_each() -> None:
    assert ort_in(EXTRAS["cpu"]) == {"onnxruntime"}
    assert ort_in(EXTRAS["gpu"]) == {"onnxruntime-gpu"}
    # neither extra drags in the other (e.g. through "solaris-recsys[cpu]")
    for extra in ("cpu", "gpu"):
        assert "solaris-recsys" not in names(EXTRAS[extra]), extra


def test_installers_pick_exactly_one_runtime_extra() -> None:
    venv_sh = (REPO_ROOT / "infra" / "venv.sh").read_text()
    default = re.search(r"^EXTRAS=\$\{SOLARIS_EXTRAS:-\$LOCKED_EXTRAS\}", venv_sh, re.M)
    locked = re.search(r"^LOCKED_EXTRAS=(\S+)", venv_sh, re.M)
    assert default and locked, "infra/venv.sh: EXTRAS=${SOLARIS_EXTRAS:-$LOCKED_EXTRAS} not found"
    assert set(locked.group(1).split(",")) & {"cpu", "gpu"} == {"cpu"}
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    args = re.findall(r"^ARG EXTRAS=(\S+)$", dockerfile, re.M)
    assert args and all(set(a.split(",")) & {"cpu", "gpu"} == {"cpu"} for a in args), args


def test_this_environment_has_one_onnxruntime_wheel() -> None:
    installed = set()
    for name in ORT:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        installed.add(name)
    assert len(installed) == 1, installed
