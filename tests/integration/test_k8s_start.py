"""The Kubernetes manifests start (issue 25 item 1): render the kustomization with
``kubectl kustomize deploy/k8s``, then run every container of every Deployment and StatefulSet
(init containers first) as a local process: the image's entry point
(``deploy/docker-entrypoint.sh``) with the container's args, and the environment the pod would
get (the image's ``ENV``, the rendered ConfigMap and Secret through ``envFrom`` in order, the
container's ``env``). Twice: the base (no Secret: its reference is optional), and the
``deploy/k8s-overlays/credentials`` overlay rendered from a copy of both folders with a
``credentials.env`` holding every key of ``credentials.env.example`` (see
``_credentials_env`` for the test values), whose generated Secret every container must read.
Each init container must exit 0; each main container must answer 200 on its readiness and
liveness probe paths. The trained test bundle reaches the pods as it would on a cluster: packed
with ``solaris models pack``, served over HTTP on 127.0.0.1, fetched and checked by each pod's
init container into that pod's ``models`` volume.

Only what cannot hold on this machine is replaced, by name (``LOCAL``; a key the manifests no
longer set fails the test): Kafka, Redis, a fresh topic prefix, replication 1 (one broker),
2 partitions, loopback instead of 0.0.0.0, the bundle URL and hash, CPU instead of CUDA for the
FM worker; volume mount paths become folders of the test, container ports free local ports. A
key the Secret sets is not replaced: it must reach the processes as the Secret has it.
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from streams.settings import REPO_ROOT, Settings
from tests.conftest import require_kafka_and_redis
from tests.ports import free_port
from tests.unit.test_deploy_manifests import _dockerfile_env

yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
pytestmark = [pytest.mark.integration, pytest.mark.slow]

K8S = REPO_ROOT / "deploy" / "k8s"
#: beside the base (kustomize refuses an overlay inside the folder it includes)
OVERLAYS = REPO_ROOT / "deploy" / "k8s-overlays"
CREDENTIALS = Path("k8s-overlays") / "credentials"
ENTRYPOINT = REPO_ROOT / "deploy" / "docker-entrypoint.sh"
#: folders the image makes (Dockerfile ``mkdir -p /data /models``): a container that does not
#: mount a volume there writes to its own layer, here a folder of its own
IMAGE_DIRS = ("/data", "/models")
READY_TIMEOUT_S = 150.0
INIT_TIMEOUT_S = 60.0


@dataclass
class Container:
    pod: str
    name: str
    init: bool
    args: list[str]
    env: dict[str, str]
    ready_path: str | None = None
    live_path: str | None = None
    probe_port: int | None = None
    models_dir: Path | None = None
    log: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)


def _render(path: Path = K8S) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (it renders the kustomization)")
    out = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _local_values(settings: Settings, url: str, sha256: str) -> dict[str, str]:
    return {
        "SOLARIS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "SOLARIS_STORE_URL": settings.store_url,
        "SOLARIS_TOPIC_PREFIX": f"k8s{uuid.uuid4().hex[:8]}",
        "SOLARIS_TOPIC_REPLICATION": "1",
        "SOLARIS_TOPIC_PARTITIONS": "2",
        "SOLARIS_BIND_HOST": "127.0.0.1",
        "SOLARIS_BUNDLE_URL": url,
        "SOLARIS_BUNDLE_SHA256": sha256,
    }


def _credentials_env(settings: Settings) -> dict[str, str]:
    """Test values for every key of ``credentials.env.example``, safe with the local,
    unauthenticated services:

    - ``SOLARIS_STORE_URL``: the local Redis URL with user ``default`` and a random password.
      Redis >= 6 accepts ``AUTH default <any>`` while the default user has ``nopass``, so the
      password travels through the Secret to every store client and the start still works; the
      ConfigMap's ``redis://redis:6379/0`` does not resolve here, so a pod that read it instead
      of the Secret's would not get ready. A URL that already holds a password is kept.
    - ``SOLARIS_KAFKA_SASL_USERNAME`` / ``_PASSWORD``: empty. The local broker is PLAINTEXT and
      a SASL user with PLAINTEXT is refused by design (``streams.kafka_security``); SASL end to
      end is ``test_kafka_sasl.py``'s. Empty entries are still entries: they must not break.
    - ``SOLARIS_AEROSPIKE_USER`` / ``_PASSWORD``: a user and a random password, read into the
      settings of every process and unused (the store backend is Redis).
    """
    example = OVERLAYS / "credentials" / "credentials.env.example"
    keys = [
        line.split("=", 1)[0]
        for line in example.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    url = urlsplit(settings.store_url)
    if url.password is None:
        netloc = f"default:k8s-{uuid.uuid4().hex}@{url.hostname}:{url.port or 6379}"
        url = url._replace(netloc=netloc)
    values = {
        "SOLARIS_STORE_URL": urlunsplit(url),
        "SOLARIS_KAFKA_SASL_USERNAME": "",
        "SOLARIS_KAFKA_SASL_PASSWORD": "",
        "SOLARIS_AEROSPIKE_USER": "solaris-k8s-test",
        "SOLARIS_AEROSPIKE_PASSWORD": f"k8s-{uuid.uuid4().hex}",
    }
    assert set(keys) == set(values), f"credentials.env.example changed: update {set(keys)}"
    return values


def _secret_data(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Each rendered Secret's entries, decoded, by name."""
    return {
        d["metadata"]["name"]: {
            k: base64.b64decode(v).decode() for k, v in (d.get("data") or {}).items()
        }
        for d in docs
        if d["kind"] == "Secret"
    }


def _pod_env(
    container: dict[str, Any], config: dict[str, Any], secrets: dict[str, dict[str, str]]
) -> dict[str, str]:
    """The variables of one container: image ENV, then envFrom in order, then env."""
    env = {k: v for k, v in _dockerfile_env().items() if k != "PATH"}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            assert source["configMapRef"]["name"] == config["metadata"]["name"]
            env.update(config["data"])
        elif source["secretRef"]["name"] in secrets:
            env.update(secrets[source["secretRef"]["name"]])
        else:  # a Secret that is not rendered: it must be optional for the pod to start
            assert source["secretRef"].get("optional") is True, source
    for item in container.get("env", []):
        ref = item.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            env[item["name"]] = secrets[ref["name"]][ref["key"]]
            continue
        assert "value" in item, f"only literal and Secret env values are resolved here: {item}"
        env[item["name"]] = item["value"]
    return env


def _localise(
    c: dict[str, Any], env: dict[str, str], volumes: dict[str, Path], own: Path
) -> tuple[list[str], dict[str, str]]:
    """Mount paths -> the pod's volume folders, image dirs -> the container's own folders,
    container ports -> free local ports (in the args that name them)."""
    paths = {m["mountPath"]: volumes[m["name"]] for m in c.get("volumeMounts", [])}
    for image_dir in IMAGE_DIRS:
        paths.setdefault(image_dir, own / image_dir.strip("/"))
    for key, value in env.items():
        for mount, local in paths.items():
            if value == mount or value.startswith(mount + "/"):
                env[key] = str(local) + value[len(mount) :]
    ports = {str(p["containerPort"]): str(free_port()) for p in c.get("ports", [])}
    assert set(ports) <= set(c["args"]), f"{c['name']}: a port its args do not set: {ports}"
    return [ports.get(a, a) for a in c["args"]], env


def _containers(docs: list[dict[str, Any]], local: dict[str, str], root: Path) -> list[Container]:
    (config,) = [d for d in docs if d["kind"] == "ConfigMap"]
    missing = set(local) - set(config["data"])
    assert not missing, f"the ConfigMap no longer sets {missing}: update LOCAL"
    secrets = _secret_data(docs)
    secret_keys = {k for data in secrets.values() for k in data}
    local = {k: v for k, v in local.items() if k not in secret_keys}
    out = []
    for doc in [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]:
        pod, spec = doc["metadata"]["name"], doc["spec"]["template"]["spec"]
        names = [v["name"] for v in spec.get("volumes", [])]
        names += [t["metadata"]["name"] for t in doc["spec"].get("volumeClaimTemplates", [])]
        volumes = {n: root / pod / "volumes" / n for n in names}
        for path in volumes.values():
            path.mkdir(parents=True)
        for init, c in [(True, c) for c in spec.get("initContainers", [])] + [
            (False, c) for c in spec["containers"]
        ]:
            env = {**_pod_env(c, config, secrets), **local}
            if "SOLARIS_ONNX_PROVIDERS" in env:  # the FM pod requires CUDA: none here
                env["SOLARIS_ONNX_PROVIDERS"] = "CPUExecutionProvider"
            args, env = _localise(c, env, volumes, root / pod / c["name"])
            item = Container(pod, c["name"], init, args, env, log=root / f"{pod}-{c['name']}.log")
            if "models" in volumes:
                item.models_dir = volumes["models"]
            if not init:
                ready, live = c["readinessProbe"]["httpGet"], c["livenessProbe"]["httpGet"]
                port = {p["name"]: p["containerPort"] for p in c["ports"]}.get(
                    ready["port"], ready["port"]
                )
                item.ready_path, item.live_path = ready["path"], live["path"]
                item.probe_port = int(args[c["args"].index(str(port))])
            out.append(item)
    return out


def _start(c: Container, root: Path) -> None:
    home = root / c.pod / c.name / "home"  # the image's WORKDIR and HOME
    home.mkdir(parents=True, exist_ok=True)
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    env = {"PATH": path, "HOME": str(home), **c.env}
    assert c.log is not None
    with c.log.open("ab") as log:
        c.proc = subprocess.Popen(
            ["sh", str(ENTRYPOINT), *c.args],
            cwd=home,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(c: Container) -> None:
    if c.proc is None or c.proc.poll() is not None:
        return
    os.killpg(c.proc.pid, signal.SIGTERM)
    try:
        c.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(c.proc.pid, signal.SIGKILL)
        c.proc.wait()


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


def _tail(c: Container) -> str:
    assert c.log is not None
    return c.log.read_text(errors="replace")[-4000:]


def _loaded_bundles(c: Container) -> list[str]:
    """The ``bundle`` of each "models loaded" JSON log line of the container."""
    assert c.log is not None
    lines = [line for line in c.log.read_text().splitlines() if line.startswith("{")]
    return [
        record["bundle"]
        for record in map(json.loads, lines)
        if record.get("event") == "models loaded"
    ]


def _wait_ready(mains: list[Container]) -> None:
    waiting = list(mains)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while waiting and time.monotonic() < deadline:
        for c in list(waiting):
            assert c.proc is not None and c.probe_port is not None and c.ready_path
            if c.proc.poll() is not None:
                pytest.fail(f"{c.pod}/{c.name} exited {c.proc.returncode}:\n{_tail(c)}")
            if _status(c.probe_port, c.ready_path) == 200:
                waiting.remove(c)
        time.sleep(0.5)
    stuck = {f"{c.pod}/{c.name}": _tail(c)[-1500:] for c in waiting}
    assert not waiting, f"not ready after {READY_TIMEOUT_S} s: {stuck}"


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def served_bundle(bundle: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The test bundle as `solaris models pack` writes it, served over HTTP on 127.0.0.1."""
    from streams.bundle_fetch import pack

    public = tmp_path / "public"
    sha256 = pack(bundle, public / "bundle.tar.gz")
    handler = functools.partial(_QuietFiles, directory=str(public))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/bundle.tar.gz", sha256
    finally:
        httpd.shutdown()
        httpd.server_close()


def _process_env(pid: int) -> dict[str, str] | None:
    """The environment a running process has (Linux ``/proc``); None where there is none."""
    path = Path(f"/proc/{pid}/environ")
    if not path.exists():
        return None
    items = path.read_bytes().decode(errors="replace").split("\0")
    return dict(item.split("=", 1) for item in items if "=" in item)


@pytest.mark.parametrize("variant", ["base", "credentials"])
def test_every_rendered_container_starts_and_answers_its_probes(
    variant: str,
    base_settings: Settings,
    bundle: Path,
    served_bundle: tuple[str, str],
    tmp_path: Path,
) -> None:
    require_kafka_and_redis(base_settings)
    url, sha256 = served_bundle
    credentials: dict[str, str] = {}
    if variant == "base":
        docs = _render()
        assert not [d for d in docs if d["kind"] == "Secret"]
    else:  # the overlay, from a copy of both folders: nothing is written into the repo
        credentials = _credentials_env(base_settings)
        copy = tmp_path / "deploy"
        for src in (K8S, OVERLAYS):
            ignore = shutil.ignore_patterns("credentials.env")
            shutil.copytree(src, copy / src.name, ignore=ignore)
        (copy / CREDENTIALS / "credentials.env").write_text(
            "".join(f"{k}={v}\n" for k, v in credentials.items())
        )
        docs = _render(copy / CREDENTIALS)
        assert list(_secret_data(docs).values()) == [credentials]
    containers = _containers(docs, _local_values(base_settings, url, sha256), tmp_path)
    for c in containers:  # every container and init container gets the Secret's entries
        assert c.env.items() >= credentials.items(), f"{c.pod}/{c.name}"
    inits = [c for c in containers if c.init]
    mains = [c for c in containers if not c.init]
    assert {f"{c.pod}/{c.name}" for c in mains} == {
        "solaris-pipeline/worker",
        "solaris-fm/fm",
        "solaris-ranker/ranker",
        "solaris-exporter/exporter",
    }
    assert {c.pod for c in inits} == {"solaris-pipeline", "solaris-fm", "solaris-ranker"}
    try:
        for c in inits:  # one pod's init containers run before its main ones
            _start(c, tmp_path)
            assert c.proc is not None
            rc = c.proc.wait(timeout=INIT_TIMEOUT_S)
            assert rc == 0, f"{c.pod}/{c.name} exited {rc}:\n{_tail(c)}"
            assert c.models_dir is not None
            assert (c.models_dir / bundle.name / "meta.json").is_file(), _tail(c)
        for c in mains:
            _start(c, tmp_path)
        _wait_ready(mains)
        for c in mains:
            assert c.probe_port is not None and c.live_path is not None
            assert _status(c.probe_port, c.live_path) == 200, f"{c.pod}/{c.name}"
            assert c.proc is not None  # the entry point execs solaris: same process
            running = _process_env(c.proc.pid)
            if running is not None:
                assert running.items() >= credentials.items(), f"{c.pod}/{c.name}"
            if c.models_dir is not None:  # it serves the bundle its init container fetched
                assert _loaded_bundles(c) == [str(c.models_dir / bundle.name)], _tail(c)
    finally:
        for c in containers:
            _stop(c)
    passwords = [v for k, v in credentials.items() if "PASSWORD" in k and v]
    passwords += [p for p in [urlsplit(credentials.get("SOLARIS_STORE_URL", "")).password] if p]
    for c in containers:  # never logged
        assert c.log is not None
        logged = [p for p in passwords if p in c.log.read_text(errors="replace")]
        assert not logged, f"{c.pod}/{c.name} logs a password"
