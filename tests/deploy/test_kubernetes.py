"""deploy/kubernetes/: ``kubectl kustomize`` renders ``base`` and each overlay; every object validates
against the Kubernetes schema of ``KUBERNETES_VERSION`` (kubernetes-validate, strict); checkov's
Kubernetes checks pass, each skip an annotation with its reason; and what the deployment relies on
is asserted on the rendered objects: the restricted security context, the probes and the drain, the
secrets wired to the paths the environment names, and each ConfigMap's hatchway.yaml loading.

No cluster runs here. kubectl (the machine's) renders offline; kubernetes-validate and checkov are
pinned in ``.ci/deploy-requirements.txt`` and installed by ``.ci/run`` into ``.ci/deploy-venv``. A
missing tool skips what needs it, or fails it when ``HATCHWAY_REQUIRE_NODE_TOOLS`` is set (CI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from hatchway import __version__
from hatchway.config.settings import load_settings
from hatchway.environment import env_value
from tests.support.paths import ROOT

KUBERNETES_VERSION = "1.32.0"
"""The Kubernetes release whose API schemas the manifests must match (the one place it is pinned;
kubernetes-validate 1.37.0 ships 1.25 to 1.37). The oldest release the manifests claim to support."""

KUBERNETES = ROOT / "deploy" / "kubernetes"
KUSTOMIZATIONS = ("base", "overlays/single", "overlays/ha")
TOOLS = ROOT / ".ci" / "deploy-venv" / "bin"
INSTALL = "python3 -m venv .ci/deploy-venv; .ci/deploy-venv/bin/pip install -r .ci/deploy-requirements.txt"
IMAGE = f"hatchway:{__version__}"  # the kustomization's newTag must follow the package
UID = 10001

JUSTIFIED_SKIPS = {
    "CKV_K8S_43": {"hatchway", "hatchway-worker"},  # image digest: a locally built image has none
    "CKV_K8S_15": {"hatchway", "hatchway-worker"},  # pull policy Always: no registry for a loaded image
    "CKV_K8S_8": {"hatchway-worker"},  # liveness: the worker serves no HTTP
    "CKV_K8S_9": {"hatchway-worker"},  # readiness: no Service sends it traffic
}
"""The checkov checks a Deployment may skip (each with its reason in an annotation): a new skip must
be added here too, so none creeps in unreviewed."""

Objects = list[dict[str, Any]]


def missing(reason: str) -> None:
    if os.environ.get("HATCHWAY_REQUIRE_NODE_TOOLS"):
        pytest.fail(reason)
    pytest.skip(reason)


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        missing("kubectl not installed: it renders deploy/kubernetes (`kubectl kustomize`, offline)")
    return str(found)


def venv_tool(name: str) -> str:
    path = TOOLS / name
    if not path.exists():
        missing(f"{name} not installed in .ci/deploy-venv; install with: {INSTALL}")
    return str(path)


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each kustomization rendered to one file, by name (``base``, ``overlays/single``…)."""
    binary, folder = kubectl(), tmp_path_factory.mktemp("rendered")
    files = {}
    for name in KUSTOMIZATIONS:
        done = subprocess.run(
            [binary, "kustomize", str(KUBERNETES / name)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"kubectl kustomize {name}: {done.stderr}"
        files[name] = folder / f"{name.rsplit('/', 1)[-1]}.yaml"
        files[name].write_text(done.stdout)
    return files


@pytest.fixture(scope="module")
def rendered(manifests: dict[str, Path]) -> dict[str, Objects]:
    return {name: list(yaml.safe_load_all(path.read_text())) for name, path in manifests.items()}


def find(objects: Objects, kind: str, name: str) -> dict[str, Any] | None:
    """The object of that kind and name; a generated ConfigMap is found by its name before the hash."""
    for obj in objects:
        actual = obj["metadata"]["name"]
        if obj["kind"] == kind and (
            actual == name or (kind == "ConfigMap" and actual.startswith(name + "-"))
        ):
            return obj
    return None


def pod(objects: Objects, name: str) -> dict[str, Any]:
    deployment = find(objects, "Deployment", name)
    assert deployment is not None, f"no Deployment {name}"
    return deployment["spec"]["template"]


def all_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return spec.get("initContainers", []) + spec["containers"]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_every_object_matches_the_pinned_kubernetes_schema(manifests: dict[str, Path]) -> None:
    command = [venv_tool("kubernetes-validate"), "--strict", "-k", KUBERNETES_VERSION, "--quiet"]
    done = subprocess.run(
        command + [str(path) for path in manifests.values()], capture_output=True, text=True, timeout=120
    )
    # A kind without a schema is only a warning (exit 0): quiet output must be empty.
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), done.stdout + done.stderr


def test_checkov_passes_and_every_skip_is_justified(manifests: dict[str, Path]) -> None:
    checkov = venv_tool("checkov")
    folder = next(iter(manifests.values())).parent
    done = subprocess.run(
        [checkov, "-d", str(folder), "--framework", "kubernetes", "--skip-download", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout.lstrip().startswith("{"), done.stderr[-2000:]  # one framework: one report
    report = json.loads(done.stdout)
    results, summary = report["results"], report["summary"]
    failed = [(c["check_id"], c["file_path"], c["resource"]) for c in results["failed_checks"]]
    assert done.returncode == 0 and not failed, f"checkov failed: {failed}\n{done.stderr[-2000:]}"
    assert summary["parsing_errors"] == 0 and summary["passed"] > 100, summary
    for check in results["skipped_checks"]:
        deployment = check["resource"].rsplit(".", 1)[-1]
        assert deployment in JUSTIFIED_SKIPS.get(check["check_id"], ()), check["resource"]
        assert len(check["check_result"].get("suppress_comment", "")) > 40, check  # a reason, not a word


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_pod_runs_restricted(rendered: dict[str, Objects], name: str) -> None:
    namespace = find(rendered[name], "Namespace", "hatchway")
    assert namespace and namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    deployments = [obj for obj in rendered[name] if obj["kind"] == "Deployment"]
    assert deployments
    for deployment in deployments:
        spec = deployment["spec"]["template"]["spec"]
        assert spec["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "fsGroup": UID,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "hatchway"
        assert spec["enableServiceLinks"] is False  # no HATCHWAY_SERVICE_* variables
        assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in spec["volumes"]
        for container in all_containers(spec):
            security = container["securityContext"]
            assert (
                security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
            )
            assert security["capabilities"] == {"drop": ["ALL"]} and security["runAsUser"] == UID
            assert security["runAsNonRoot"] is True
            assert security["seccompProfile"] == {"type": "RuntimeDefault"}
            assert container["image"] == IMAGE
            assert set(container["resources"]) == {"requests", "limits"}
            assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
            # The image's two writable paths (its working directory is the state volume).
            assert {"name": "state", "mountPath": "/var/lib/hatchway"} in container["volumeMounts"]


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_the_gateway_probes_drains_and_is_served(rendered: dict[str, Objects], name: str) -> None:
    template = pod(rendered[name], "hatchway")
    spec = template["spec"]
    (gateway,) = spec["containers"]
    # The args replace the image's CMD: serve must be told to listen on every interface.
    assert gateway["args"] == ["serve", "--host", "0.0.0.0", "--port", "8080"]
    assert gateway["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    startup = gateway["startupProbe"]
    assert startup["httpGet"] == {"path": "/healthz", "port": "http"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60  # migrations at start fit
    assert gateway["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]
    service = find(rendered[name], "Service", "hatchway")
    assert service is not None
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    assert selects(service["spec"]["selector"], template["metadata"]["labels"])
    worker = find(rendered[name], "Deployment", "hatchway-worker")
    if worker is not None:  # the Service sends nothing to the worker, which serves no HTTP
        assert not selects(service["spec"]["selector"], worker["spec"]["template"]["metadata"]["labels"])
        (container,) = worker["spec"]["template"]["spec"]["containers"]
        assert container["args"] == ["worker"] and "ports" not in container


def pod_environment(objects: Objects, spec: dict[str, Any], secrets: Path) -> dict[str, str]:
    """The hatchway-env ConfigMap as the pod sees it, each ``*_FILE`` path in the secrets mount
    pointed at a file under ``secrets`` (the mount must project that file)."""
    env_map = find(objects, "ConfigMap", "hatchway-env")
    assert env_map is not None
    (container,) = spec["containers"]
    assert container["envFrom"] == [{"configMapRef": {"name": env_map["metadata"]["name"]}}]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "secrets")
    volume = next(v for v in spec["volumes"] if v["name"] == "secrets")
    projected = {
        item["path"] for source in volume["projected"]["sources"] for item in source["secret"]["items"]
    }
    environment = {}
    for key, value in env_map["data"].items():
        if key.endswith("_FILE"):
            assert value.startswith(mount + "/") and value[len(mount) + 1 :] in projected, (key, value)
            value = str(secrets / Path(value).name)
            Path(value).write_text("s3cret\n")
        environment[key] = value
    return environment


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_the_config_map_loads_with_the_pods_environment(
    rendered: dict[str, Objects], name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = rendered[name]
    spec = pod(objects, "hatchway")["spec"]
    config = find(objects, "ConfigMap", "hatchway-config")
    assert config is not None
    config_volume = next(v for v in spec["volumes"] if v["name"] == "config")
    assert config_volume["configMap"]["name"] == config["metadata"]["name"]
    (tmp_path / "hatchway.yaml").write_text(config["data"]["hatchway.yaml"])
    for variable in [v for v in os.environ if v.startswith(("HATCHWAY_", "OPENAI_API_KEY"))]:
        monkeypatch.delenv(variable)
    environment = pod_environment(objects, spec, tmp_path)
    assert environment.pop("HATCHWAY_CONFIG") == "/etc/hatchway/hatchway.yaml"
    assert {"name": "config", "mountPath": "/etc/hatchway", "readOnly": True} in spec["containers"][0][
        "volumeMounts"
    ]
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)

    settings = load_settings(tmp_path / "hatchway.yaml")

    grace = spec["terminationGracePeriodSeconds"]
    assert grace >= settings.drain_seconds + 5 + 5  # drain after the preStop pause, with room
    assert settings.providers[0].api_key == "env:OPENAI_API_KEY"
    # The provider key from the file OPENAI_API_KEY_FILE names, which the secrets mount projects
    # (pod_environment checks that and points the variable at a copy).
    assert "OPENAI_API_KEY_FILE" in environment and env_value("OPENAI_API_KEY") == "s3cret"
    if name == "overlays/single":
        assert settings.database_url == "sqlite+aiosqlite:////var/lib/hatchway/hatchway.db"
        assert settings.redis_url is None and settings.migrate_on_start
    else:
        assert settings.database_url.startswith("postgresql+asyncpg://") and settings.redis_url
        assert settings.migrate_on_start is False and settings.background.serve_concurrency == 0
        assert settings.background.shutdown_grace_seconds + 5 <= grace
    if name == "overlays/ha":  # the password comes from the Secret's file, not the ConfigMap
        assert ":s3cret@" in settings.database_url and "s3cret" not in config["data"]["hatchway.yaml"]


def test_single_is_one_pod_on_sqlite_with_a_claim(rendered: dict[str, Objects]) -> None:
    objects = rendered["overlays/single"]
    assert {obj["kind"] for obj in objects}.isdisjoint({"HorizontalPodAutoscaler", "PodDisruptionBudget"})
    assert find(objects, "Deployment", "hatchway-worker") is None  # jobs run in the gateway
    deployment = find(objects, "Deployment", "hatchway")
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = deployment["spec"]["template"]["spec"]
    assert not spec.get("initContainers")  # serve migrates as it starts
    assert {"name": "state", "mountPath": "/var/lib/hatchway"} in spec["containers"][0]["volumeMounts"]
    (state,) = [v for v in spec["volumes"] if v["name"] == "state"]
    assert set(state) == {"name", "persistentVolumeClaim"}  # the claim, not the base's scratch emptyDir
    claim = state["persistentVolumeClaim"]["claimName"]
    pvc = find(objects, "PersistentVolumeClaim", claim)
    assert pvc is not None and pvc["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_ha_migrates_before_starting_and_scales_the_gateway(rendered: dict[str, Objects]) -> None:
    objects = rendered["overlays/ha"]
    gateway = pod(objects, "hatchway")
    for deployment in ("hatchway", "hatchway-worker"):
        spec = pod(objects, deployment)["spec"]
        (migrate,) = spec["initContainers"]
        (container,) = spec["containers"]
        assert migrate["args"] == ["migrate"]
        for field in ("image", "envFrom", "env", "volumeMounts"):  # the same release, config and secrets
            assert migrate.get(field) == container.get(field), (deployment, field)
    hpa = find(objects, "HorizontalPodAutoscaler", "hatchway")
    assert hpa is not None and hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "hatchway",
    }
    assert hpa["spec"]["minReplicas"] == 2 < hpa["spec"]["maxReplicas"]
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    pdb = find(objects, "PodDisruptionBudget", "hatchway")
    assert pdb is not None and pdb["spec"]["minAvailable"] == 1
    assert selects(pdb["spec"]["selector"]["matchLabels"], gateway["metadata"]["labels"])


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_the_network_policy_admits_the_gateway_port_and_the_backends(
    rendered: dict[str, Objects], name: str
) -> None:
    objects = rendered[name]
    policy = find(objects, "NetworkPolicy", "hatchway")
    assert policy is not None and policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    for obj in objects:
        if obj["kind"] == "Deployment":
            assert selects(
                policy["spec"]["podSelector"]["matchLabels"], obj["spec"]["template"]["metadata"]["labels"]
            )
    assert policy["spec"]["ingress"] == [{"ports": [{"port": 8080, "protocol": "TCP"}]}]
    egress = {(p["port"], p["protocol"]) for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert all(set(rule) == {"ports"} for rule in policy["spec"]["egress"])
    backends = set() if name == "overlays/single" else {(5432, "TCP"), (6379, "TCP")}
    assert egress == {(53, "UDP"), (53, "TCP"), (443, "TCP")} | backends


def referenced_secrets(objects: Objects) -> set[tuple[str, str]]:
    """(Secret name, key) pairs the pods read, from env and from projected volumes."""
    found = set()
    for obj in objects:
        if obj["kind"] != "Deployment":
            continue
        spec = obj["spec"]["template"]["spec"]
        for container in all_containers(spec):
            for variable in container.get("env", []):
                ref = variable["valueFrom"]["secretKeyRef"]
                found.add((ref["name"], ref["key"]))
        for volume in spec["volumes"]:
            for source in volume.get("projected", {}).get("sources", []):
                found |= {(source["secret"]["name"], item["key"]) for item in source["secret"]["items"]}
    return found


def test_no_secret_is_committed_and_each_one_read_is_documented(rendered: dict[str, Objects]) -> None:
    readme = (KUBERNETES / "README.md").read_text()
    for name, objects in rendered.items():
        assert not [obj for obj in objects if obj["kind"] == "Secret"], name
        for obj in objects:  # secrets are files, never environment variables (checkov CKV_K8S_35)
            if obj["kind"] == "Deployment":
                for container in all_containers(obj["spec"]["template"]["spec"]):
                    assert "env" not in container, (name, container["name"])
                    assert all("configMapRef" in source for source in container["envFrom"]), name
        for secret, key in referenced_secrets(objects):
            assert f"create secret generic {secret} \\\n  --from-literal={key}=" in readme, (secret, key)
    assert ("hatchway-database", "password") in referenced_secrets(rendered["overlays/ha"])
    for name, objects in rendered.items():
        assert ("hatchway-provider-keys", "OPENAI_API_KEY") in referenced_secrets(objects), name
