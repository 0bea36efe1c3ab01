"""The Kubernetes Secret of Kafka / Redis / Aerospike credentials (issue 25 item 1).

``deploy/k8s-overlays/credentials`` adds a ``solaris-credentials`` Secret to the base, generated
from ``credentials.env`` (git-ignored; ``credentials.env.example`` lists the keys). Rendered with
``kubectl kustomize`` from a copy of ``deploy/k8s`` and the overlay with the example as ``credentials.env``: the
Secret holds the documented keys, every container and init container reads it after the
ConfigMap (so its values win), and no ConfigMap carries a credential.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from pydantic import SecretStr

from streams.settings import REPO_ROOT, Settings, unknown_variables

yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")

K8S = REPO_ROOT / "deploy" / "k8s"
#: outside the base's folder: kustomize refuses an overlay inside the base it includes (a cycle)
OVERLAYS = REPO_ROOT / "deploy" / "k8s-overlays"
OVERLAY = Path("k8s-overlays") / "credentials"
EXAMPLE = OVERLAYS / "credentials" / "credentials.env.example"
DOCS = REPO_ROOT / "docs" / "deploying.md"
SECRET = "solaris-credentials"
#: what the example holds: the Kafka SASL user, the Redis URL (with its password), Aerospike's
CREDENTIAL_KEYS = {
    "SOLARIS_KAFKA_SASL_USERNAME",
    "SOLARIS_KAFKA_SASL_PASSWORD",
    "SOLARIS_STORE_URL",
    "SOLARIS_AEROSPIKE_USER",
    "SOLARIS_AEROSPIKE_PASSWORD",
}
PLACEHOLDER = "CHANGE-ME"
#: names of settings or URL query parameters that hold a secret
_SECRET_NAME = re.compile(
    r"PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|SIGNATURE|(^|_)SIG$|API_?KEY", re.I
)


def _env_file(path: Path, *, commented: bool = False) -> dict[str, str]:
    """``KEY=VALUE`` lines as kustomize's ``envs`` reads them (``commented``: the ``# KEY=VALUE``
    lines instead, the optional keys of the example)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if commented:
            match = re.match(r"^#\s*(SOLARIS_[A-Z0-9_]+)=(.*)$", line)
            if match:
                out[match[1]] = match[2]
        elif line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (it renders the kustomization)")
    return kubectl


def _kustomize(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=60
    )


def _render(path: Path) -> list[dict[str, Any]]:
    out = _kustomize(path)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _copy(tmp_path: Path, credentials: str | None) -> Path:
    """``deploy/k8s`` and ``deploy/k8s-overlays`` copied under ``tmp_path`` (nothing is written
    into the repo), with ``credentials`` as the overlay's ``credentials.env``; returns the
    copy's root (the overlay at ``root / OVERLAY``, the base at ``root / "k8s"``)."""
    root = tmp_path / "deploy"
    for src in (K8S, OVERLAYS):
        shutil.copytree(src, root / src.name, ignore=shutil.ignore_patterns("credentials.env"))
    if credentials is not None:
        (root / OVERLAY / "credentials.env").write_text(credentials)
    return root


@pytest.fixture
def overlay(tmp_path: Path) -> list[dict[str, Any]]:
    """The credentials overlay rendered with the example as ``credentials.env``."""
    return _render(_copy(tmp_path, EXAMPLE.read_text()) / OVERLAY)


def _secrets(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "Secret"]


def _containers(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet"):
            spec = d["spec"]["template"]["spec"]
            for c in spec.get("initContainers", []) + spec["containers"]:
                out.append((f"{d['metadata']['name']}/{c['name']}", c))
    return out


def _secret_keys_read(container: dict[str, Any], secret: str, keys: set[str]) -> set[str]:
    """Which of ``keys`` of Secret ``secret`` reach the container with their Secret value: all
    of them through an ``envFrom`` secretRef listed after every configMapRef (later sources win;
    an ``env`` entry of the same name would replace it), or one by one through ``env``
    ``valueFrom.secretKeyRef``."""
    sources = container.get("envFrom", [])
    refs = [i for i, s in enumerate(sources) if s.get("secretRef", {}).get("name") == secret]
    maps = [i for i, s in enumerate(sources) if "configMapRef" in s]
    env = {e["name"]: e for e in container.get("env", [])}
    read = set()
    if refs and all(m < refs[-1] for m in maps):
        read = {k for k in keys if k not in env}
    for name, item in env.items():
        ref = item.get("valueFrom", {}).get("secretKeyRef", {})
        if ref.get("name") == secret and ref.get("key") == name and name in keys:
            read.add(name)
    return read


def credential_problems(data: dict[str, str]) -> list[str]:
    """What in a ConfigMap's ``data`` looks like a credential: a setting that holds a secret
    (a ``SecretStr`` field, or a secret-sounding name), a URL with a password, or a URL query
    parameter that carries a token or a signature (a pre-signed link)."""
    secret_fields = {
        f"SOLARIS_{name.upper()}"
        for name, field in Settings.model_fields.items()
        if field.annotation is SecretStr
    }
    problems = []
    for key, value in data.items():
        if key in secret_fields or _SECRET_NAME.search(key):
            problems.append(f"{key}: a secret setting")
        for url in re.findall(r"[a-z][a-z0-9+.-]*://\S+", str(value), re.I):
            parts = urlsplit(url)
            if parts.password is not None:
                problems.append(f"{key}: a URL with a password")
            for name, _ in parse_qsl(parts.query):
                if (
                    _SECRET_NAME.search(name.replace("-", "_"))
                    or name.lower() == "x-amz-credential"
                ):
                    problems.append(f"{key}: a URL with a {name} parameter")
    return problems


# --- the example ---------------------------------------------------------------------------------


def test_example_lists_the_credential_settings_without_real_values() -> None:
    keys = _env_file(EXAMPLE)
    assert set(keys) == CREDENTIAL_KEYS
    optional = _env_file(EXAMPLE, commented=True)
    assert unknown_variables(dict.fromkeys([*keys, *optional], "")) == []
    secret_fields = {
        f"SOLARIS_{name.upper()}"
        for name, field in Settings.model_fields.items()
        if field.annotation is SecretStr
    }
    assert secret_fields <= set(keys), "a SecretStr setting the example does not list"
    for key, value in {**keys, **optional}.items():  # placeholders, never a real password
        if _SECRET_NAME.search(key) or urlsplit(value).password or "token=" in value:
            assert PLACEHOLDER in value, f"{key}={value}: not the {PLACEHOLDER} placeholder"
    for key, value in keys.items():  # kustomize and kubectl keep quotes and spaces as is
        assert value == value.strip().strip("'\""), f"{key}: quoted or padded value"


def test_example_values_parse_as_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("SOLARIS_")]:
        monkeypatch.delenv(key)
    for key, value in _env_file(EXAMPLE).items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.kafka_sasl_password.get_secret_value() == PLACEHOLDER
    assert urlsplit(settings.store_url).password == PLACEHOLDER


def test_docs_name_every_key_and_how_to_apply_it() -> None:
    text = DOCS.read_text()
    for key in [*_env_file(EXAMPLE), *_env_file(EXAMPLE, commented=True)]:
        assert f"`{key}`" in text, f"docs/deploying.md does not document {key}"
    assert "kubectl apply -k deploy/k8s-overlays/credentials" in text
    assert f"kubectl create secret generic {SECRET} --from-env-file=" in text


def test_filled_in_credentials_are_git_ignored() -> None:
    ignored = (OVERLAYS / "credentials" / ".gitignore").read_text().split()
    assert "credentials.env" in ignored


def test_overlay_does_not_render_without_credentials_env(tmp_path: Path) -> None:
    """No credentials.env, no manifests: the example's placeholders are never applied."""
    out = _kustomize(_copy(tmp_path, None) / OVERLAY)
    assert out.returncode != 0
    assert "credentials.env" in out.stderr


# --- the rendered overlay ------------------------------------------------------------------------


def test_overlay_renders_one_secret_with_the_documented_keys(
    overlay: list[dict[str, Any]],
) -> None:
    (secret,) = _secrets(overlay)
    assert secret["type"] == "Opaque"
    # a hash suffix: new credentials = a new name in every pod template = a rolling restart
    assert re.fullmatch(rf"{SECRET}-[a-z0-9]+", secret["metadata"]["name"])
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data == _env_file(EXAMPLE)
    assert secret["metadata"]["labels"]["app.kubernetes.io/part-of"] == "solaris"


def test_every_container_reads_every_key_of_the_secret(overlay: list[dict[str, Any]]) -> None:
    (secret,) = _secrets(overlay)
    keys = set(secret["data"])
    containers = _containers(overlay)
    assert {name.split("/")[0] for name, _ in containers} == {
        "solaris-pipeline",
        "solaris-fm",
        "solaris-ranker",
        "solaris-exporter",
    }
    assert any(name.endswith("/fetch-bundle") for name, _ in containers)
    for name, c in containers:
        missing = keys - _secret_keys_read(c, secret["metadata"]["name"], keys)
        assert not missing, f"{name} does not get {sorted(missing)} from the Secret"


def test_base_pods_start_without_the_secret() -> None:
    """``kubectl apply -k deploy/k8s`` creates no Secret: the pods' reference must be optional
    (a Secret made by ``kubectl create secret`` or an operator is picked up when it exists)."""
    docs = _render(K8S)
    assert _secrets(docs) == []
    for name, c in _containers(docs):
        refs = [s["secretRef"] for s in c.get("envFrom", []) if "secretRef" in s]
        assert refs == [{"name": SECRET, "optional": True}], name
        assert _secret_keys_read(c, SECRET, CREDENTIAL_KEYS) == CREDENTIAL_KEYS, name


@pytest.mark.parametrize("variant", ["base", "overlay"])
def test_no_configmap_carries_a_credential(variant: str, tmp_path: Path) -> None:
    root = _copy(tmp_path, EXAMPLE.read_text())
    docs = _render(root / "k8s" if variant == "base" else root / OVERLAY)
    maps = [d for d in docs if d["kind"] == "ConfigMap"]
    assert maps
    for cm in maps:
        assert credential_problems(cm.get("data", {})) == [], cm["metadata"]["name"]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"SOLARIS_STORE_URL": "redis://:pw@redis:6379/0"}, "a URL with a password"),
        ({"SOLARIS_STORE_URL": "rediss://solaris:pw@redis:6380/0"}, "a URL with a password"),
        ({"SOLARIS_KAFKA_SASL_PASSWORD": "pw"}, "a secret setting"),
        ({"SOLARIS_AEROSPIKE_PASSWORD": ""}, "a secret setting"),
        ({"SOLARIS_BUNDLE_URL": "https://h/b.tgz?token=abc"}, "a token parameter"),
        ({"SOLARIS_BUNDLE_URL": "https://h/b.tgz?X-Amz-Signature=abc"}, "parameter"),
        ({"SOLARIS_BUNDLE_URL": "https://h/b.tgz?sig=abc&se=2030"}, "a sig parameter"),
    ],
)
def test_the_credential_check_sees_credentials(data: dict[str, str], problem: str) -> None:
    problems = credential_problems(data)
    assert problems and problem in problems[0], problems


def test_overlay_manifests_pass_strict_schema_validation(overlay: list[dict[str, Any]]) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    from kubernetes_validate.utils import latest_version

    for doc in _secrets(overlay):
        try:
            kv.validate(doc, latest_version(), strict=True)
        except kv.ValidationError as exc:
            pytest.fail(f"Secret/{doc['metadata']['name']}: {exc.message}", pytrace=False)
