"""The dependency locks are complete, hash-pinned and consistent with ``pyproject.toml``.

``infra/lock.sh`` writes them with uv; the installers use them with ``pip --require-hashes
--no-deps``, so a lock missing a package (pip would not fetch it) or a hash (pip refuses the
file) breaks the install of a clean machine, not of this one whose venv is already built. These
tests read the files only.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from streams.settings import REPO_ROOT

PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
VENV_LOCK = REPO_ROOT / "requirements.lock"
IMAGE_LOCKS = {
    extra: REPO_ROOT / "deploy" / f"requirements-{extra}.lock" for extra in ("cpu", "gpu")
}


@dataclass(frozen=True)
class Pin:
    version: Version
    hashes: tuple[str, ...]


#: what CI and the images run; the venv lock also holds Python 3.12 and 3.13 through markers
LINUX = {
    "sys_platform": "linux",
    "platform_machine": "x86_64",
    "platform_system": "Linux",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
PYTHONS = ("3.11", "3.12", "3.13")


def environment(python: str) -> dict[str, str]:
    return {**LINUX, "python_version": python, "python_full_version": f"{python}.0", "extra": ""}


def read_lock(path: Path, python: str = "3.11") -> dict[str, Pin]:
    """``name -> Pin`` of the packages pip installs from ``path`` on Linux x86_64 with
    ``python`` (continuation lines joined, comments out, environment markers evaluated)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    pins: dict[str, Pin] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split(" --")
        requirement, _, marker = spec.partition(";")
        if marker.strip() and not Marker(marker.strip()).evaluate(environment(python)):
            continue
        name, sep, version = requirement.strip().partition("==")
        assert sep, f"{path.name}: {spec!r} is not pinned with =="
        hashes = tuple(o.split("=", 1)[1].strip() for o in options if o.startswith("hash="))
        assert canonicalize_name(name) not in pins, f"{path.name}: {name} twice for {python}"
        pins[canonicalize_name(name)] = Pin(Version(version.strip()), hashes)
    return pins


def lock_extras(path: Path) -> list[str]:
    """The extras named in the lock's header line (written by infra/lock.sh)."""
    header = re.search(r"extras: ([a-z, -]+)\)", path.read_text().splitlines()[0])
    assert header, f"{path.name}: no 'extras: ...' header; regenerate with make lock"
    return header.group(1).replace(",", " ").split()


def declared(extras: list[str]) -> list[Requirement]:
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
    return reqs


ALL_LOCKS = [VENV_LOCK, *IMAGE_LOCKS.values()]


@pytest.mark.parametrize("path", ALL_LOCKS, ids=lambda p: p.name)
def test_every_pin_carries_sha256_hashes(path: Path) -> None:
    pins = read_lock(path)
    assert len(pins) > 20
    unhashed = [n for n, p in pins.items() if not p.hashes]
    assert unhashed == []
    assert all(h.startswith("sha256:") and len(h) == 71 for p in pins.values() for h in p.hashes)


CASES = [(VENV_LOCK, py) for py in PYTHONS] + [(p, "3.11") for p in IMAGE_LOCKS.values()]


@pytest.mark.parametrize(("path", "python"), CASES, ids=lambda v: getattr(v, "name", v))
def test_lock_holds_every_declared_dependency_at_an_allowed_version(
    path: Path, python: str
) -> None:
    """pip installs the lock with --no-deps: a dependency missing here is missing there."""
    pins = read_lock(path, python)
    for req in declared(lock_extras(path)):
        if req.marker is not None and not req.marker.evaluate(environment(python)):
            continue
        pin = pins.get(canonicalize_name(req.name))
        assert pin is not None, f"{path.name} lacks {req.name}: run make lock"
        assert req.specifier.contains(pin.version, prereleases=True), (path.name, req, pin)


def test_the_venv_lock_is_compiled_for_the_extras_venv_sh_installs_by_default() -> None:
    venv_sh = (REPO_ROOT / "infra" / "venv.sh").read_text()
    locked = re.search(r"^LOCKED_EXTRAS=(\S+)", venv_sh, re.M)
    assert locked is not None
    assert sorted(locked.group(1).split(",")) == sorted(lock_extras(VENV_LOCK))
    assert "--require-hashes --no-deps -r" in venv_sh


@pytest.mark.parametrize("extra", sorted(IMAGE_LOCKS))
def test_image_locks_carry_the_versions_ci_tested(extra: str) -> None:
    """The image's packages that CI's venv also has are at CI's version (and hash set)."""
    venv, image = read_lock(VENV_LOCK), read_lock(IMAGE_LOCKS[extra])
    assert lock_extras(IMAGE_LOCKS[extra]) == [extra]
    differ = {
        n: (venv[n].version, p.version)
        for n, p in image.items()
        if n in venv and venv[n].version != p.version
    }
    assert differ == {}
    assert "torch" not in image  # the serving image does not train


def test_the_dockerfile_installs_its_extras_lock_with_hashes() -> None:
    text = (REPO_ROOT / "Dockerfile").read_text()
    assert 'pip install --require-hashes --no-deps -r "deploy/requirements-${EXTRAS}.lock"' in text
    assert "pip install --no-deps ." in text
    for path in IMAGE_LOCKS.values():
        assert f"deploy/{path.name}" in text


def test_every_python_pyproject_allows_is_tested() -> None:
    """3.11 runs the whole suite; ``infra/test-pythons.sh`` runs the unit suite on the others."""
    from packaging.specifiers import SpecifierSet

    allowed = SpecifierSet(PROJECT["requires-python"])
    supported = [f"3.{minor}" for minor in range(8, 16) if f"3.{minor}" in allowed]
    assert supported == list(PYTHONS)
    script = (REPO_ROOT / "infra" / "test-pythons.sh").read_text()
    default = re.search(r"\|\| versions=\(([^)]*)\)", script)
    assert default is not None
    assert ["3.11", *default.group(1).split()] == list(PYTHONS)
    makefile = (REPO_ROOT / "Makefile").read_text()
    test_recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "infra/test-pythons.sh" in test_recipe  # `make test` (CI) runs them
