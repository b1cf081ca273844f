"""The emulator's access record: every request it serves, as Kubernetes RBAC names it (verb, API group,
resource[/subresource]), read and reset through the Python API and the control surface.

No Django needed: run with ``pytest tests/kubesim/test_access.py -p no:django``.
"""

from __future__ import annotations

import json

import orjson
import pytest
import urllib3
from kubernetes import client

from kubesim import KubeEmulator, make_node, make_pod
from kubesim.access import access_of


@pytest.fixture
def api(sim: KubeEmulator, sim_kubeconfig: str):
    from kubernetes import config

    configuration = client.Configuration()
    config.load_kube_config(config_file=sim_kubeconfig, client_configuration=configuration)
    with client.ApiClient(configuration) as api_client:
        yield api_client


@pytest.mark.parametrize("method,path,query,expected", [
    ("GET", "/api/v1/nodes", {}, ("list", "", "nodes", "")),
    ("GET", "/api/v1/pods", {"watch": "true"}, ("watch", "", "pods", "")),
    ("GET", "/api/v1/namespaces/a/pods", {"watch": "1"}, ("watch", "", "pods", "a")),
    ("GET", "/api/v1/nodes/n-1", {}, ("get", "", "nodes", "")),
    ("PATCH", "/api/v1/nodes/n-1", {}, ("patch", "", "nodes", "")),
    ("PUT", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/q/status", {}, ("update", "kueue.x-k8s.io", "clusterqueues/status", "")),
    ("POST", "/apis/batch/v1/namespaces/a/jobs", {}, ("create", "batch", "jobs", "a")),
    ("DELETE", "/apis/batch/v1/namespaces/a/jobs/j", {}, ("delete", "batch", "jobs", "a")),
    ("DELETE", "/apis/batch/v1/namespaces/a/jobs", {}, ("deletecollection", "batch", "jobs", "a")),
    ("PATCH", "/apis/apps/v1/namespaces/a/deployments/web/scale", {}, ("patch", "apps", "deployments/scale", "a")),
    ("GET", "/api/v1/namespaces", {}, ("list", "", "namespaces", "")),
    ("GET", "/api/v1/namespaces/a", {}, ("get", "", "namespaces", "")),
    ("PUT", "/api/v1/namespaces/a/finalize", {}, ("update", "", "namespaces/finalize", "")),
])
def test_requests_are_named_as_rbac_names_them(method, path, query, expected):
    assert tuple(access_of(method, path, query)) == expected


@pytest.mark.parametrize("path", ["/api", "/apis", "/apis/kueue.x-k8s.io/v1beta2", "/version", "/openapi/v3", "/healthz"])
def test_discovery_and_other_non_resource_urls_are_not_recorded(path):
    assert access_of("GET", path, {}) is None


def test_what_a_client_did_is_recorded_and_reset(sim: KubeEmulator, api) -> None:
    sim.add_node(make_node("gpu-1", gpus=4))
    sim.add_pod(make_pod("p", "team", node="gpu-1"))
    sim.reset_access_log()  # the emulator's own writes above are no requests
    core = client.CoreV1Api(api)
    core.list_pod_for_all_namespaces()
    core.list_node(watch=False, limit=10)
    core.read_node("gpu-1")
    core.patch_node("gpu-1", {"metadata": {"labels": {"a": "b"}}})
    core.patch_node("gpu-1", {"metadata": {"labels": {"a": "c"}}})
    with pytest.raises(client.ApiException):  # refused requests needed the permission too
        core.read_namespaced_pod("missing", "team")
    queues = client.CustomObjectsApi(api)
    queues.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", {
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
        "spec": {"resources": {"gpu": {"quota": 1, "limit": -1, "overQuotaWeight": 1}}}})
    queues.patch_cluster_custom_object_status("scheduling.run.ai", "v2", "queues", "q", {"status": {}})
    assert sim.access_rules() == {
        ("list", "", "pods"), ("list", "", "nodes"), ("get", "", "nodes"), ("patch", "", "nodes"), ("get", "", "pods"),
        ("create", "scheduling.run.ai", "queues"), ("patch", "scheduling.run.ai", "queues/status")}
    log = {(e["verb"], e["resource"], e["namespace"]): e["count"] for e in sim.access_log()}
    assert log[("patch", "nodes", "")] == 2 and log[("get", "pods", "team")] == 1
    sim.reset_access_log()
    assert sim.access_log() == [] and sim.access_rules() == set()


def test_a_watch_is_recorded_as_watch(sim: KubeEmulator, api) -> None:
    core = client.CoreV1Api(api)
    response = core.list_node(watch=True, timeout_seconds=1, _preload_content=False)
    response.read()
    assert sim.access_rules() == {("watch", "", "nodes")}


def test_the_control_surface_reads_and_resets_the_record(sim: KubeEmulator, api) -> None:
    client.CoreV1Api(api).list_namespace()
    http = urllib3.PoolManager()
    got = orjson.loads(http.request("GET", f"{sim.url}/_emulator/access_log").data)
    assert got == [{"verb": "list", "group": "", "resource": "namespaces", "namespace": "", "count": 1}]
    posted = orjson.loads(http.request("POST", f"{sim.url}/_emulator/access_log", body=b"{}").data)
    assert posted == {"ok": True, "result": got}  # control calls themselves are not recorded
    http.request("POST", f"{sim.url}/_emulator/reset_access_log", body=json.dumps({}))
    assert orjson.loads(http.request("GET", f"{sim.url}/_emulator/access_log").data) == []
