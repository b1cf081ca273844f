"""The Kubernetes manifests (deploy/): rendered by `kubectl kustomize` in a subprocess, valid for
Kubernetes 1.32 (kubernetes-validate, strict), and safe and complete: non-root pods with a read-only
root filesystem, resources, probes on /healthz and /readyz, the replicas, and every environment
variable the settings read. Skips without kubectl unless CONSOLE_REQUIRE_KUBECTL=1."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent.parent
OVERLAY = REPO / "deploy" / "overlays" / "example"
KUBERNETES_VERSION = "1.32.0"


def render(path: Path) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("CONSOLE_REQUIRE_KUBECTL") == "1":
            pytest.fail("CONSOLE_REQUIRE_KUBECTL=1 but kubectl is not installed")
        pytest.skip("needs kubectl (v1.32, with kustomize built in) to render deploy/")
    result = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    return render(OVERLAY)


def find(docs, kind, name):
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert matches, f"no {kind} {name} in the rendered manifests"
    return matches[0]


def pod_spec(doc) -> dict:
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return doc["spec"]["template"]["spec"]


WORKLOADS = [("Deployment", "gpu-console-web"), ("Deployment", "gpu-console-sync"),
             ("CronJob", "gpu-console-snapshot"), ("Job", "gpu-console-migrate")]


def test_base_and_example_overlay_render_and_are_valid_for_kubernetes_1_32(rendered):
    import kubernetes_validate

    assert render(REPO / "deploy" / "base")
    for doc in rendered:
        # Strict: an unknown or misspelt field fails too.
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    kinds = {d["kind"] for d in rendered}
    assert {"Deployment", "CronJob", "Job", "Service", "Ingress", "ConfigMap", "NetworkPolicy", "ServiceAccount",
            "ClusterRole", "ClusterRoleBinding", "Namespace", "PodDisruptionBudget"} <= kinds


def test_a_manifest_kubernetes_would_refuse_is_caught():
    import kubernetes_validate
    from kubernetes_validate.utils import ValidationError

    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
           "spec": {"replicas": "three", "selector": {}, "template": {"spec": {"containers": []}}}}
    with pytest.raises(ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("kind,name", WORKLOADS)
def test_every_pod_runs_as_non_root_with_a_read_only_root_and_limits(rendered, kind, name):
    spec = pod_spec(find(rendered, kind, name))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 10001  # the Containerfile's USER
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    tmp_volumes = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    for container in spec["containers"]:
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert {m["mountPath"]: m["name"] for m in container["volumeMounts"]}["/tmp"] in tmp_volumes
        for bound in ("requests", "limits"):
            assert set(container["resources"][bound]) == {"cpu", "memory"}, (name, bound)
        assert container["image"] == "registry.example.com/platform/gpu-console:0.1.0"


def test_web_runs_daphne_on_several_replicas_with_health_probes(rendered):
    web = find(rendered, "Deployment", "gpu-console-web")
    assert web["spec"]["replicas"] == 3
    container = pod_spec(web)["containers"][0]
    assert container["command"][0] == "daphne" and container["command"][-1] == "console.asgi:application"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Moving a node and the enforcer's dry run call the cluster from the web pods: its own service
    # account (rules: tests/deploy/test_rbac.py), and the sync's kubeconfig files at the same paths.
    assert pod_spec(web)["serviceAccountName"] == "gpu-console-web"
    assert pod_spec(web).get("automountServiceAccountToken", True) is True
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volume = {v["name"]: v for v in pod_spec(web)["volumes"]}[mounts["/etc/console/kubeconfigs"]]
    assert volume["secret"]["secretName"] == "gpu-console-kubeconfigs"
    service = find(rendered, "Service", "gpu-console-web")
    labels = web["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in service["spec"]["selector"].items())


def test_sync_has_two_replicas_leader_and_standby_with_its_own_probes(rendered):
    from django.core.management import load_command_class

    sync = find(rendered, "Deployment", "gpu-console-sync")
    assert sync["spec"]["replicas"] == 2
    container = pod_spec(sync)["containers"][0]
    assert container["command"][:3] == ["python", "manage.py", "sync_clusters"]
    # The command accepts exactly the arguments the manifest gives it.
    parser = load_command_class("nodepools", "sync_clusters").create_parser("manage.py", "sync_clusters")
    assert parser.parse_args(container["command"][3:]).metrics_port == 9100
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"]
    assert port == 9100
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert pod_spec(sync)["serviceAccountName"] == "gpu-console-sync"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volume = {v["name"]: v for v in pod_spec(sync)["volumes"]}[mounts["/etc/console/kubeconfigs"]]
    assert volume["secret"]["secretName"] == "gpu-console-kubeconfigs"


def test_usage_snapshot_and_migrate_commands(rendered):
    snapshot = pod_spec(find(rendered, "CronJob", "gpu-console-snapshot"))["containers"][0]
    assert snapshot["command"] == ["python", "manage.py", "snapshot_usage", "--once"]
    assert find(rendered, "CronJob", "gpu-console-snapshot")["spec"]["concurrencyPolicy"] == "Forbid"
    migrate = pod_spec(find(rendered, "Job", "gpu-console-migrate"))["containers"][0]
    assert migrate["command"] == ["python", "manage.py", "migrate", "--noinput"]


def settings_environment_variables() -> set[str]:
    source = (REPO / "console" / "settings.py").read_text()
    pattern = r'(?:os\.environ\.get|os\.environ\[|env_bool|env_list|os\.getenv)\(?\s*"([A-Z][A-Z0-9_]*)"'
    names = set(re.findall(pattern, source)) | set(re.findall(r'"([A-Z][A-Z0-9_]*)" (?:not )?in os\.environ', source))
    assert {"SECRET_KEY", "DATABASE_URL", "OIDC_ISSUER", "METRICS_TOKEN_FILE"} <= names  # the pattern works
    return names


@pytest.mark.parametrize("kind,name", WORKLOADS)
def test_every_environment_variable_the_settings_read_is_provided(rendered, kind, name):
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in rendered if d["kind"] == "ConfigMap"}
    container = pod_spec(find(rendered, kind, name))["containers"][0]
    provided = {e["name"] for e in container.get("env", [])}
    for source in container.get("envFrom", []):
        provided |= set(configmaps[source["configMapRef"]["name"]])
    missing = settings_environment_variables() - provided
    assert not missing, f"{name} lacks {sorted(missing)}: add them to deploy/base/configmap.yaml or its env"
    secrets = {e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"] if "valueFrom" in e}
    assert secrets == {"gpu-console-secrets"}


def test_secret_files_named_by_the_settings_are_mounted_in_the_web_pods(rendered):
    config = find(rendered, "ConfigMap", "gpu-console-config")["data"]
    web = pod_spec(find(rendered, "Deployment", "gpu-console-web"))
    mounts = {m["mountPath"]: m["name"] for m in web["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in web["volumes"]}
    for variable, secret in (("OIDC_CLIENT_SECRET_FILE", "gpu-console-oidc"), ("METRICS_TOKEN_FILE", "gpu-console-metrics")):
        folder = str(Path(config[variable]).parent)
        assert volumes[mounts[folder]]["secret"]["secretName"] == secret
    assert config["OIDC_ISSUER"].startswith("https://") and config["OIDC_CLIENT_ID"]  # the example uses SSO
    assert config["LOG_FORMAT"] == "json" and config["DEBUG"] == "0"


def test_ingress_sends_the_host_to_the_web_service_with_websocket_timeouts(rendered):
    ingress = find(rendered, "Ingress", "gpu-console")
    config = find(rendered, "ConfigMap", "gpu-console-config")["data"]
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] in config["ALLOWED_HOSTS"].split(",")
    assert f"https://{rule['host']}" in config["CSRF_TRUSTED_ORIGINS"].split(",")
    backend = rule["http"]["paths"][0]["backend"]["service"]
    service = find(rendered, "Service", backend["name"])
    assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
    assert int(ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 60
    assert ingress["spec"]["tls"][0]["hosts"] == [rule["host"]]


def test_network_policies_admit_only_the_ingress_controller_and_monitoring(rendered):
    web = find(rendered, "NetworkPolicy", "gpu-console-web")
    assert web["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "web"
    assert [p["port"] for p in web["spec"]["ingress"][0]["ports"]] == [8000]
    sync = find(rendered, "NetworkPolicy", "gpu-console-sync")
    [rule] = sync["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9100}]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


def test_only_the_pods_that_call_clusters_get_a_token_each_bound_in_the_namespace(rendered):
    """The migrate and snapshot pods never call the Kubernetes API: no token. The sync and the web have
    their own service accounts, each bound to its ClusterRole (whose rules tests/deploy/test_rbac.py proves
    minimal) in the namespace the overlay installs to."""
    for kind, name in (("CronJob", "gpu-console-snapshot"), ("Job", "gpu-console-migrate")):
        spec = pod_spec(find(rendered, kind, name))
        assert spec["serviceAccountName"] == "gpu-console" and spec["automountServiceAccountToken"] is False
    assert find(rendered, "ServiceAccount", "gpu-console")["automountServiceAccountToken"] is False
    for component in ("sync", "web"):
        account = pod_spec(find(rendered, "Deployment", f"gpu-console-{component}"))["serviceAccountName"]
        assert account == f"gpu-console-{component}"
        binding = find(rendered, "ClusterRoleBinding", f"gpu-console-{component}")
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "gpu-console"}]
        assert binding["roleRef"]["name"] == f"gpu-console-{component}"
