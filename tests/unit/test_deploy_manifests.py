"""The deployable artefacts (Dockerfile, deploy/compose*.yaml, deploy/k8s/*.yaml) checked without
Docker or a cluster: Kubernetes schemas (``kubernetes-validate``, strict), the compose-spec JSON
schema, every ``SOLARIS_*`` variable they set is a real setting with a valid value, and every
``solaris`` command line they run parses with the real CLI.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.settings import REPO_ROOT, Settings, unknown_variables

yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")

DEPLOY = REPO_ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE_FILES = (DEPLOY / "compose.yaml", DEPLOY / "compose.gpu.yaml")
#: oldest still-common cluster version and the newest schema the package ships
K8S_VERSIONS = ("1.30.0", "latest")
SOLARIS_SERVICES = ("pipeline", "fm", "ranker", "exporter")
#: processes with Faust/ranker state or models: each gets its own /data volume in compose
WORKERS = ("pipeline", "fm", "ranker")
#: the option that sets each SOLARIS process's Prometheus port
METRICS_OPTION = {
    "pipeline": "--metrics-port",
    "fm": "--metrics-port",
    "ranker": "--metrics-port",
    "exporter": "--port",
}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _k8s_docs() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            for doc in _docs(path):
                yield path, doc


def _compose(path: Path = COMPOSE_FILES[0]) -> dict[str, Any]:
    return _docs(path)[0]


def _pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for _, doc in _k8s_docs():
        if doc["kind"] in ("Deployment", "StatefulSet"):
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]


# --- Kubernetes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_manifests_pass_strict_schema_validation(version: str) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    from kubernetes_validate.utils import latest_version

    target = latest_version() if version == "latest" else version
    docs = list(_k8s_docs())
    assert {d["kind"] for _, d in docs} >= {
        "ConfigMap",
        "StatefulSet",
        "Deployment",
        "Service",
    }
    for path, doc in docs:
        try:
            kv.validate(doc, target, strict=True)
        except kv.SchemaNotFoundError as exc:  # schemas ship in the wheel; absent = broken install
            pytest.skip(f"kubernetes-validate has no schema for {target}: {exc}")
        except kv.ValidationError as exc:
            where = f"{path.name} {doc['kind']}/{doc['metadata']['name']}"
            pytest.fail(f"{where}: {exc.message}", pytrace=False)


def test_kustomization_lists_every_manifest() -> None:
    listed = set(_docs(K8S / "kustomization.yaml")[0]["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


def test_pipeline_statefulset_has_a_volume_per_pod_at_the_cache_dir() -> None:
    (sts,) = [d for _, d in _k8s_docs() if d["kind"] == "StatefulSet"]
    config = _configmap()
    claims = {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    # Faust keeps RocksDB under SOLARIS_CACHE_DIR: it must be the per-pod claim
    assert mounts[config["SOLARIS_CACHE_DIR"]] in claims
    assert "--agents" in container["args"] and "embed" not in container["args"]


def test_fm_worker_requests_a_gpu_and_requires_cuda() -> None:
    (fm,) = [
        d for _, d in _k8s_docs() if d["kind"] == "Deployment" and "fm" in d["metadata"]["name"]
    ]
    (container,) = fm["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    env = {e["name"]: e["value"] for e in container.get("env", [])}
    assert env["SOLARIS_ONNX_PROVIDERS"].split(",")[0] == "CUDAExecutionProvider"
    assert container["args"][:3] == ["worker", "--agents", "embed"]


def test_pods_run_as_non_root_and_probe_health() -> None:
    for name, spec in _pod_specs():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for c in spec["containers"]:
            if c["args"][0] == "exporter":  # a bare prometheus_client server: /metrics answers
                assert c["readinessProbe"]["httpGet"]["path"] == "/metrics", name
                continue
            assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", name
            assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", name


def test_services_select_existing_pods_and_ports() -> None:
    pods = {
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]: d["spec"][
            "template"
        ]["spec"]
        for _, d in _k8s_docs()
        if d["kind"] in ("Deployment", "StatefulSet")
    }
    for _, svc in _k8s_docs():
        if svc["kind"] != "Service":
            continue
        spec = pods[svc["spec"]["selector"]["app.kubernetes.io/name"]]
        ports = {p["name"]: p["containerPort"] for c in spec["containers"] for p in c["ports"]}
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            assert target in ports or target in ports.values(), (svc["metadata"]["name"], port)


def test_network_policy_admits_only_the_named_ports_of_solaris_pods() -> None:
    """Issue 24: nothing but probes, metrics and SOLARIS's own pods reach SOLARIS pods; every
    port the policy names is a named port of a SOLARIS container, and every such port is
    named (an unnamed one would be closed by the policy)."""
    (policy,) = [d for _, d in _k8s_docs() if d["kind"] == "NetworkPolicy"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/part-of": "solaris"}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    served = {
        p["name"]
        for _, spec in _pod_specs()
        for c in spec["containers"]
        for p in c.get("ports", [])
    }
    assert allowed == served
    for _, d in _k8s_docs():
        if d["kind"] in ("Deployment", "StatefulSet"):
            assert d["spec"]["template"]["metadata"]["labels"].items() >= selector.items()


# --- compose ------------------------------------------------------------------------------------


def _compose_schema() -> dict[str, Any]:
    try:
        from importlib.resources import files

        text = (files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text()
    except (ImportError, FileNotFoundError) as exc:
        pytest.skip(f"no compose-spec schema (pip install check-jsonschema): {exc}")
    return dict(json.loads(text))


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_files_match_the_compose_spec(path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = _compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(_compose(path)), key=lambda e: list(e.path))
    assert not errors, [f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors]


def test_compose_runs_the_whole_stack() -> None:
    services = _compose()["services"]
    assert set(services) == {"kafka", "redis", *SOLARIS_SERVICES, "prometheus", "grafana"}
    kafka_env = services["kafka"]["environment"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper
    volumes = [v.split(":")[0] for s in WORKERS for v in services[s]["volumes"]]
    data = [v for v in volumes if v.endswith("-data")]
    assert len(set(data)) == len(WORKERS), "each worker needs its own data volume"


def test_compose_bind_mounts_exist_in_the_repo() -> None:
    for path in COMPOSE_FILES:
        for name, svc in _compose(path)["services"].items():
            for volume in svc.get("volumes", []):
                source = volume.split(":")[0]
                if source.startswith("."):
                    assert (path.parent / source).exists(), (path.name, name, source)
            build = svc.get("build")
            if build:
                assert (path.parent / build["context"] / build["dockerfile"]).is_file()


def test_compose_prometheus_scrapes_the_metrics_ports_of_infra_jobs() -> None:
    services = _compose()["services"]
    deploy_cfg = _docs(DEPLOY / "prometheus.yml")[0]["scrape_configs"]
    infra_cfg = _docs(REPO_ROOT / "infra" / "prometheus.yml")[0]["scrape_configs"]
    assert {j["job_name"] for j in deploy_cfg} >= {j["job_name"] for j in infra_cfg}
    metrics = {s: _option(services[s]["command"], METRICS_OPTION[s]) for s in SOLARIS_SERVICES}
    targets = {t for j in deploy_cfg for c in j["static_configs"] for t in c["targets"]}
    assert targets == {f"{s}:{port}" for s, port in metrics.items()}


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


# --- settings and command lines -----------------------------------------------------------------


def _configmap() -> dict[str, str]:
    (cm,) = [d for _, d in _k8s_docs() if d["kind"] == "ConfigMap"]
    return dict(cm["data"])


def _dockerfile_env() -> dict[str, str]:
    """``ENV`` of the Dockerfile's final stage (``KEY=value`` pairs, continued lines joined)."""
    text = (REPO_ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    final = text.rsplit("\nFROM ", 1)[1]
    env: dict[str, str] = {}
    for line in final.splitlines():
        if line.startswith("ENV "):
            env.update(kv.split("=", 1) for kv in line[4:].split())
    return env


def _deployment_envs() -> dict[str, dict[str, str]]:
    """Every environment a SOLARIS process gets, by where it is set."""
    image = _dockerfile_env()
    envs = {"Dockerfile": image}
    for path in COMPOSE_FILES:
        for name, svc in _compose(path)["services"].items():
            env = {k: str(v) for k, v in (svc.get("environment") or {}).items()}
            if name in SOLARIS_SERVICES:
                envs[f"{path.name}:{name}"] = {**image, **env}
    config = _configmap()
    for name, spec in _pod_specs():
        for c in spec.get("initContainers", []) + spec["containers"]:
            env = {e["name"]: e["value"] for e in c.get("env", [])}
            envs[f"k8s:{name}/{c['name']}"] = {**image, **config, **env}
    return envs


def _interpolated() -> set[str]:
    names: set[str] = set()
    for path in (*COMPOSE_FILES, *K8S.glob("*.yaml")):
        names |= set(re.findall(r"\$\{(\w+)", path.read_text()))
    return names


def test_every_solaris_variable_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    envs = _deployment_envs()
    seen = {k for env in envs.values() for k in env if k.startswith("SOLARIS_")}
    assert "SOLARIS_KAFKA_BOOTSTRAP" in seen and "SOLARIS_ONNX_PROVIDERS" in seen
    assert unknown_variables(dict.fromkeys(seen | _interpolated(), "")) == []
    for where, env in envs.items():  # and each deployment's values parse
        for key in [k for k in os.environ if k.startswith("SOLARIS_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            if key.startswith("SOLARIS_"):
                monkeypatch.setenv(key, value)
        try:
            Settings()
        except Exception as exc:
            pytest.fail(f"{where}: {exc}", pytrace=False)


def _command_lines() -> dict[str, list[str]]:
    lines = {}
    for name, svc in _compose()["services"].items():
        if name in SOLARIS_SERVICES:
            lines[f"compose:{name}"] = list(svc["command"])
    for name, spec in _pod_specs():
        for c in spec.get("initContainers", []) + spec["containers"]:
            lines[f"k8s:{name}/{c['name']}"] = list(c["args"])
    return lines


def test_command_lines_parse_with_the_real_cli() -> None:
    import typer

    from streams.cli.main import app

    root = typer.main.get_command(app)  # typer's own click: no isinstance on click.Group
    for where, args in _command_lines().items():
        command, rest = root, list(args)
        while hasattr(command, "get_command") and rest:  # down sub-groups (`models fetch`)
            name, rest = rest[0], rest[1:]
            command = command.get_command(command.make_context(name, [name]), name)
            assert command is not None, f"{where}: no command {name!r}"
        try:
            command.make_context(args[0], rest)
        except Exception as exc:  # typer's click raises its own UsageError family
            pytest.fail(f"{where}: {exc}", pytrace=False)


def test_dockerfile_is_multi_stage_non_root_with_the_solaris_entry_point() -> None:
    text = (REPO_ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM \S+ AS (\w+)", text, re.M)
    assert stages == ["builder", "runtime"]
    final = text.rsplit("\nFROM ", 1)[1]
    assert re.search(r"^USER (?!0\b|root\b)\S+", final, re.M)
    assert "COPY --from=builder /opt/venv /opt/venv" in final
    assert re.search(r"^ARG EXTRAS=cpu$", text, re.M)
    assert "deploy/requirements-${EXTRAS}.lock" in text
    entry = (DEPLOY / "docker-entrypoint.sh").read_text()
    assert 'exec solaris "$@"' in entry
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)


# --- Kubernetes service links (issue 25 item 1) --------------------------------------------------


def _service_link_env(services: list[dict[str, Any]]) -> dict[str, str]:
    """What Kubernetes injects into a pod for these Services (enableServiceLinks), by its rules:
    ``<NAME>_SERVICE_HOST``/``_SERVICE_PORT``/``_SERVICE_PORT_<PORTNAME>`` and the docker-link
    style ``<NAME>_PORT``, ``<NAME>_PORT_<p>_<PROTO>[_PROTO|_PORT|_ADDR]``."""
    env: dict[str, str] = {}
    for n, svc in enumerate(services):
        name = svc["metadata"]["name"].upper().replace("-", "_")
        ip = f"10.96.0.{10 + n}"
        ports = svc["spec"]["ports"]
        env[f"{name}_SERVICE_HOST"] = ip
        env[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        first = ports[0]
        env[f"{name}_PORT"] = f"{first.get('protocol', 'TCP').lower()}://{ip}:{first['port']}"
        for port in ports:
            proto = port.get("protocol", "TCP")
            if "name" in port:
                env[f"{name}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(
                    port["port"]
                )
            base = f"{name}_PORT_{port['port']}_{proto}"
            env[base] = f"{proto.lower()}://{ip}:{port['port']}"
            env[f"{base}_PROTO"] = proto.lower()
            env[f"{base}_PORT"] = str(port["port"])
            env[f"{base}_ADDR"] = ip
    return env


def _rendered_services() -> list[dict[str, Any]]:
    import shutil
    import subprocess

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (it renders the kustomization)")
    out = subprocess.run(
        [kubectl, "kustomize", str(K8S)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Service"]


def test_settings_ignore_the_service_links_kubernetes_injects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod started with service links on (a manifest that forgets enableServiceLinks, or a
    Service of another team named solaris-*) still starts: the injected variables are not
    settings, and SOLARIS_EXPORTER_PORT=tcp://... does not replace the exporter's port."""
    env = _service_link_env(_rendered_services())
    assert "SOLARIS_EXPORTER_PORT" in env and env["SOLARIS_EXPORTER_PORT"].startswith("tcp://")
    for key in [k for k in os.environ if k.startswith("SOLARIS_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.exporter_port == Settings.model_fields["exporter_port"].default
    assert unknown_variables(os.environ) == []
    monkeypatch.setenv("SOLARIS_EXPORTER_PORT", "9200")  # a real setting still applies
    assert Settings().exporter_port == 9200
    monkeypatch.setenv("SOLARIS_KAFKA_BOOTSTRAPP", "x:9092")  # and a typo is still refused
    with pytest.raises(ValueError, match="SOLARIS_KAFKA_BOOTSTRAPP"):
        Settings()


def test_pods_turn_service_links_off() -> None:
    for name, spec in _pod_specs():
        assert spec.get("enableServiceLinks") is False, name
