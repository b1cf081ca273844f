"""What installing an application needs from the emulator: the manifests' kinds stored as given, the
scale subresource `kubectl scale` uses, namespaces `kubectl apply` can re-apply, Secrets from
`kubectl create secret`, and in-cluster access over HTTPS (a pod's service-account files).

No Django needed: run with ``pytest tests/kubesim/test_install_kinds.py -p no:django``.
"""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes import client, config
from kubernetes.config import incluster_config

from kubesim import KubeEmulator, make_node

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
"""


def test_scale_patches_and_puts_the_scale_subresource(sim: KubeEmulator, kubectl) -> None:
    kubectl("create", "namespace", "shop")
    kubectl("apply", "-f", "-", input=DEPLOYMENT)
    assert "deployment.apps/web scaled" in kubectl("-n", "shop", "scale", "deployment/web", "--replicas=4").stdout
    assert sim.get("deployments", "web", "shop")["spec"]["replicas"] == 4
    # With a precondition kubectl reads the Scale, checks it and puts it back (GET, PUT).
    kubectl("-n", "shop", "scale", "deployment/web", "--current-replicas=4", "--replicas=6")
    assert sim.get("deployments", "web", "shop")["spec"]["replicas"] == 6
    refused = kubectl("-n", "shop", "scale", "deployment/web", "--current-replicas=2", "--replicas=1", check=False)
    assert refused.returncode != 0 and "Expected replicas to be 2, was 6" in refused.stderr
    assert sim.get("deployments", "web", "shop")["spec"]["replicas"] == 6
    assert {("patch", "apps", "deployments/scale"), ("get", "apps", "deployments/scale"),
            ("update", "apps", "deployments/scale")} <= sim.access_rules()
    shown = kubectl("-n", "shop", "get", "deployments").stdout.split()
    assert shown[:5] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"] and shown[5:7] == ["web", "0/6"]


def test_scale_refuses_a_negative_count_and_keeps_the_replicas(sim: KubeEmulator, kubectl) -> None:
    kubectl("apply", "-f", "-", input=DEPLOYMENT.replace("namespace: shop", "namespace: default"))
    import urllib3

    http = urllib3.PoolManager()
    url = f"{sim.url}/apis/apps/v1/namespaces/default/deployments/web/scale"
    scale = json.loads(http.request("GET", url).data)
    assert scale["kind"] == "Scale" and scale["spec"] == {"replicas": 2} and scale["status"]["selector"] == "app=web"
    answer = http.request("PATCH", url, body=json.dumps({"spec": {"replicas": -1}}),
                          headers={"Content-Type": "application/merge-patch+json"})
    assert answer.status == 422 and "spec.replicas" in json.loads(answer.data)["message"]
    stale = http.request("PUT", url, body=json.dumps({**scale, "metadata": {**scale["metadata"], "resourceVersion": "1"},
                                                      "spec": {"replicas": 3}}))
    assert stale.status == 409
    assert sim.get("deployments", "web", "default")["spec"]["replicas"] == 2


def test_a_namespace_created_then_applied_takes_the_labels_and_applies_again(sim: KubeEmulator, kubectl) -> None:
    namespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {team: a}\n"
    kubectl("create", "namespace", "shop")
    kubectl("apply", "-f", "-", input=namespace)
    assert "unchanged" in kubectl("apply", "-f", "-", input=namespace).stdout
    got = json.loads(kubectl("get", "namespace", "shop", "-o", "json").stdout)["metadata"]
    assert got["labels"]["team"] == "a" and "kubectl.kubernetes.io/last-applied-configuration" in got["annotations"]
    kubectl("label", "namespace", "shop", "team-")
    assert "team" not in json.loads(kubectl("get", "namespace", "shop", "-o", "json").stdout)["metadata"]["labels"]


def test_create_secret_generic_stores_base64_data(sim: KubeEmulator, kubectl, tmp_path) -> None:
    (tmp_path / "token").write_bytes(b"t0k\xe9n\n")
    kubectl("create", "namespace", "shop")
    kubectl("-n", "shop", "create", "secret", "generic", "s", "--from-literal=A=1", f"--from-file=token={tmp_path / 'token'}")
    data = sim.get("secrets", "s", "shop")["data"]
    assert {k: base64.b64decode(v) for k, v in data.items()} == {"A": b"1", "token": b"t0k\xe9n\n"}
    assert kubectl("-n", "shop", "get", "secrets").stdout.split()[4:7] == ["s", "Opaque", "2"]


def test_in_cluster_access_over_https_with_the_pods_service_account_files(tmp_path, monkeypatch, emulators) -> None:
    emu = emulators(bookmark_interval=1.0, tls=True)
    url = emu.url
    assert url.startswith("https://")
    emu.add_node(make_node("gpu-1", gpus=4))
    for name, value in emu.write_service_account(tmp_path, namespace="gpu-console").items():
        monkeypatch.setenv(name, value)
    assert (tmp_path / "namespace").read_text() == "gpu-console"
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    assert configuration.host == url and configuration.verify_ssl
    with client.ApiClient(configuration) as api:
        assert [n.metadata.name for n in client.CoreV1Api(api).list_node().items] == ["gpu-1"]
    # Without the CA certificate the emulator's certificate is not trusted.
    unverified = client.Configuration()
    unverified.host = url
    with client.ApiClient(unverified) as api, pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        client.CoreV1Api(api).list_node(_request_timeout=5)


def test_in_cluster_files_need_an_https_emulator(sim: KubeEmulator, tmp_path) -> None:
    with pytest.raises(RuntimeError, match="tls=True"):
        sim.write_service_account(tmp_path)
