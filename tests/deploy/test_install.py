"""The install steps of the production page (docs/administration/production.md), run for real: the real kubectl creates the namespace and
the Secrets, applies the example overlay (`kubectl apply -k`) and scales the web Deployment against the
Kubernetes API emulator; the sync reaches a cluster through a kubeconfig file and through in-cluster
access (the service account files and environment a pod gets, over HTTPS). Skips without kubectl unless
CONSOLE_REQUIRE_KUBECTL=1."""
from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from kubesim import KubeEmulator, make_node, make_pod
from tests.deploy.test_manifests import OVERLAY, REPO, pod_spec, render

NAMESPACE = "gpu-console"


@pytest.fixture
def kubectl(sim, tmp_path):
    """Run the real kubectl against the emulator, in a folder holding the files the steps read."""
    binary = shutil.which("kubectl")
    if binary is None:
        if os.environ.get("CONSOLE_REQUIRE_KUBECTL") == "1":
            pytest.fail("CONSOLE_REQUIRE_KUBECTL=1 but kubectl is not installed")
        pytest.skip("needs kubectl (v1.32) to run the install steps (set CONSOLE_REQUIRE_KUBECTL=1 to make this a failure)")
    env = {**os.environ, "KUBECONFIG": sim.write_kubeconfig(tmp_path / "admin.kubeconfig"), "HOME": str(tmp_path),
           "KUBECACHEDIR": str(tmp_path / "cache")}

    def run(*args: str) -> str:
        proc = subprocess.run([binary, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}"
        return proc.stdout

    return run


def install_steps() -> str:
    """The section "Install, step by step" of docs/administration/production.md."""
    text = (REPO / "docs" / "administration" / "production.md").read_text()
    section = text[text.index("\n## Install, step by step\n") + 1:]
    return section[:section.find("\n## ", 5)]


SECRET_KEY_COMMAND = "$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')"


def step_commands() -> list[list[str]]:
    """The shell commands of the install steps as argument lists (continuation lines joined, comments
    dropped, the SECRET_KEY generator run)."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", install_steps(), re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(shlex.split(line.replace(SECRET_KEY_COMMAND, secrets.token_urlsafe(50))))
    return commands


def manage_py_step(*words: str) -> list[str]:
    """The `python manage.py ...` arguments of the install step run with `kubectl exec` that has `words`."""
    for command in step_commands():
        if command[0] == "kubectl" and "exec" in command and all(w in command for w in words):
            return command[command.index("manage.py") + 1:]
    raise AssertionError(f"the install steps have no `kubectl exec ... manage.py` step with {words}")


def test_install_apply_k_creates_every_object_and_the_web_scales(sim, kubectl, tmp_path):
    # The files the install steps' commands read.
    (tmp_path / "client-secret").write_text("oidc-client-secret\n")
    (tmp_path / "metrics-token").write_text("metrics-token-value\n")
    (tmp_path / "prod-east.kubeconfig").write_text(Path(sim.write_kubeconfig(tmp_path / "k")).read_text())
    kubectl_steps = [c[1:] for c in step_commands() if c[0] == "kubectl" and "exec" not in c]
    assert ["apply", "-k", "deploy/overlays/prod"] in kubectl_steps
    assert ["-n", NAMESPACE, "scale", "deployment/gpu-console-web", "--replicas=5"] in kubectl_steps
    for args in kubectl_steps:
        # The steps' overlay is your copy of the example one (step 1).
        kubectl(*[str(OVERLAY) if a == "deploy/overlays/prod" else a for a in args])

    # Every object of the overlay is in the cluster as rendered.
    for doc in render(OVERLAY):
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "Namespace":
            listed = kubectl("get", "namespace", name, "-o", "jsonpath={.metadata.labels}")
            assert "restricted" in listed
            continue
        stored = sim.get(kind, name, doc["metadata"].get("namespace", ""))
        assert stored is not None, f"{kind} {name} was not created"
        for field in ("spec", "rules", "data", "subjects", "roleRef"):
            if field in doc and not (kind == "Deployment" and name == "gpu-console-web"):
                assert holds(stored[field], doc[field]), (kind, name, field)  # plus the API's defaults

    # The web Deployment runs 5 replicas now, as `kubectl get` shows.
    assert sim.get("deployments", "gpu-console-web", NAMESPACE)["spec"]["replicas"] == 5
    shown = kubectl("-n", NAMESPACE, "get", "deployments")
    assert re.search(r"^gpu-console-web\s+0/5\s", shown, re.M), shown  # no pods: the emulator runs no controller
    assert re.search(r"^gpu-console-sync\s+0/2\s", shown, re.M), shown

    # The Secrets the steps created hold every key the pods read.
    secrets = {s["metadata"]["name"]: s for s in sim.list("secrets", NAMESPACE)}
    for doc in render(OVERLAY):
        if doc["kind"] not in ("Deployment", "Job", "CronJob"):
            continue
        spec = pod_spec(doc)
        for container in spec["containers"]:
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secrets[ref["name"]]["data"], (doc["metadata"]["name"], ref)
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets, (doc["metadata"]["name"], volume)
    files = {k: base64.b64decode(v).decode() for k, v in secrets["gpu-console-kubeconfigs"]["data"].items()}
    assert "prod-east" in files and sim.url in files["prod-east"]
    assert base64.b64decode(secrets["gpu-console-metrics"]["data"]["token"]).decode().strip() == "metrics-token-value"

    # Applying again keeps the overlay's word: the replicas go back to what it says (3).
    kubectl("apply", "-k", str(OVERLAY))
    assert sim.get("deployments", "gpu-console-web", NAMESPACE)["spec"]["replicas"] == 3


def holds(stored, wanted) -> bool:
    """`stored` has every value of `wanted` (and maybe more: the defaults the API server fills in)."""
    if isinstance(wanted, dict):
        return isinstance(stored, dict) and all(k in stored and holds(stored[k], v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return isinstance(stored, list) and len(stored) == len(wanted) and all(map(holds, stored, wanted))
    return stored == wanted


def lab_cluster(emu: KubeEmulator) -> None:
    emu.load(nodes=[make_node("a100-1", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960)],
             pods=[make_pod("train-1", "runai-rnd-a", node="a100-1",
                            containers=[{"name": "main", "requests": {"cpu": "1", "nvidia.com/gpu": "2"}}])])


def sync_until_mirrored(name: str) -> None:
    from nodepools.models import Cluster, Node, Pod
    from nodepools.sync import ClusterSync, SyncOptions

    cluster = Cluster.objects.get(name=name)
    sync = ClusterSync(cluster, SyncOptions(backoff_base=0.05, backoff_max=0.3, read_timeout=5, tick=0.05,
                                            batch_delay=0.02, lock_poll=0.3, hint_interval=0.05), run_tasks=False)
    sync.start()
    try:
        assert sync.run_until(lambda: Node.objects.filter(cluster=cluster).exists()
                              and Pod.objects.filter(cluster=cluster).exists(), 20), sync.last_error
    finally:
        sync.stop()
    assert list(Node.objects.filter(cluster=cluster).values_list("name", "gpu_allocatable")) == [("a100-1", 4)]


@pytest.mark.django_db
def test_the_sync_reaches_a_cluster_through_its_kubeconfig_file(sim, tmp_path):
    """The Secret gpu-console-kubeconfigs mounted at /etc/console/kubeconfigs: one file per cluster."""
    lab_cluster(sim)
    mounted = tmp_path / "etc" / "console" / "kubeconfigs"  # the pod's /etc/console/kubeconfigs
    sim.write_kubeconfig(mounted / "prod-east")
    args = [a.replace("/etc/console/kubeconfigs", str(mounted)) for a in manage_py_step("--kubeconfig")]
    assert args[:2] == ["cluster_add", "prod-east"]
    out = StringIO()
    call_command(*args, stdout=out)
    assert "registered" in out.getvalue()
    sync_until_mirrored("prod-east")


@pytest.mark.django_db
def test_the_sync_reaches_its_own_cluster_in_cluster_with_the_pods_service_account(tmp_path, monkeypatch, emulators):
    """`cluster_add local --in-cluster`: the official client's in-cluster loader, given what Kubernetes
    gives a pod (token and CA certificate files, KUBERNETES_SERVICE_HOST/PORT), speaks HTTPS to the API
    and verifies its certificate; the sync mirrors through it."""
    from kubernetes.config import incluster_config

    emu = emulators(bookmark_interval=0.2, tls=True)
    lab_cluster(emu)
    # The pod's /var/run/secrets/kubernetes.io/serviceaccount, here in a temporary folder.
    account = tmp_path / "serviceaccount"
    for name, value in emu.write_service_account(account).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))
    args = manage_py_step("--in-cluster")
    assert args == ["cluster_add", "local", "--in-cluster"]
    call_command(*args, stdout=StringIO())
    sync_until_mirrored("local")
    assert ("watch", "", "nodes") in emu.access_rules()


@pytest.mark.django_db
def test_in_cluster_access_refuses_a_server_whose_certificate_it_cannot_verify(tmp_path, monkeypatch, emulators):
    """The CA certificate is checked: another server's certificate makes the sync fail, naming TLS."""
    from kubernetes.config import incluster_config

    from nodepools.models import Cluster
    from kube.client import api_error_message
    from nodepools.sync import api_client_for

    emu, other = emulators(bookmark_interval=1.0, tls=True), emulators(bookmark_interval=1.0, tls=True)
    account = tmp_path / "serviceaccount"
    for name, value in emu.write_service_account(account).items():
        monkeypatch.setenv(name, value)
    (account / "ca.crt").write_text(Path(other.ca_cert_path).read_text())
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))
    call_command("cluster_add", "local", "--in-cluster", stdout=StringIO())
    from kubernetes import client

    with api_client_for(Cluster.objects.get(name="local")) as api, pytest.raises(Exception) as refused:
        client.CoreV1Api(api).list_node(_request_timeout=5)
    assert "CERTIFICATE_VERIFY_FAILED" in api_error_message(refused.value)


def test_sso_is_configured_by_the_environment(tmp_path):
    """The variables of install step 3, as the ConfigMap sets them, turn single sign-on on in a fresh
    process, with the client secret read from the mounted file; LOCAL_LOGIN=0 turns passwords off. The
    table names exactly the OIDC_* variables the settings read."""
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", install_steps().split("### 3.")[1].split("### 4.")[0], re.M))
    source = (REPO / "console" / "settings.py").read_text()
    assert documented == set(re.findall(r'"(OIDC_[A-Z_]+)"', source)) | {"LOCAL_LOGIN"}
    (tmp_path / "client-secret").write_text("s3cret\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings", "OIDC_ISSUER": "https://sso.example.com/realms/lab",
           "OIDC_CLIENT_ID": "gpu-console", "OIDC_CLIENT_SECRET_FILE": str(tmp_path / "client-secret"),
           "OIDC_GROUPS_CLAIM": "roles", "OIDC_USERNAME_CLAIM": "email", "OIDC_PROVIDER_NAME": "Lab SSO",
           "LOCAL_LOGIN": "0"}
    script = (
        "import django, json; django.setup(); from django.conf import settings; from accounts import oidc;"
        "c = oidc.config(); print(json.dumps({'enabled': oidc.enabled(), 'secret': c.client_secret,"
        "'local': oidc.local_login_enabled(), 'claims': [c.groups_claim, c.username_claim],"
        "'name': settings.OIDC_PROVIDER_NAME, 'issuer': c.issuer, 'client': c.client_id}))"
    )
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "enabled": True, "secret": "s3cret", "local": False, "claims": ["roles", "email"], "name": "Lab SSO",
        "issuer": "https://sso.example.com/realms/lab", "client": "gpu-console"}
