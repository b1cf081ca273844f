"""Any registered resource through the official Python client: CoreV1Api, BatchV1Api, SchedulingV1Api,
CustomObjectsApi and the dynamic client; schemas, status subresources, generation, conflicts, paging,
watches and 410 as for nodes and pods."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest
from kubernetes import client, config, dynamic, watch

from kube.validation import SchemaValidator
from kubesim import KubeEmulator, Resource, register_resource

KAI = ("scheduling.run.ai", "v2", "queues")
KUEUE = "kueue.x-k8s.io"


@pytest.fixture
def api_client(sim_kubeconfig: str) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=sim_kubeconfig, context="emulator")
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def crd(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def queue(name: str, gpu_quota: object = 4, **spec: object) -> dict:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1}}, **spec},
    }


def status_of(exc: pytest.ExceptionInfo[client.ApiException]) -> dict:
    return orjson.loads(exc.value.body)


def test_custom_resource_create_get_list_with_identity_and_generation(crd: client.CustomObjectsApi) -> None:
    created = crd.create_cluster_custom_object(*KAI, queue("team-a"))
    md = created["metadata"]
    assert md["uid"] and md["creationTimestamp"] and md["generation"] == 1 and md["resourceVersion"]
    assert crd.get_cluster_custom_object(*KAI, "team-a")["spec"]["resources"]["gpu"]["quota"] == 4
    listed = crd.list_cluster_custom_object(*KAI)
    assert listed["kind"] == "QueueList" and [q["metadata"]["name"] for q in listed["items"]] == ["team-a"]
    with pytest.raises(client.ApiException) as exc:
        crd.create_cluster_custom_object(*KAI, queue("team-a"))
    assert exc.value.status == 409 and status_of(exc)["reason"] == "AlreadyExists"


def test_schema_violations_are_422_invalid_naming_each_field(crd: client.CustomObjectsApi, sim: KubeEmulator) -> None:
    with pytest.raises(client.ApiException) as exc:
        crd.create_cluster_custom_object(*KAI, queue("bad", gpu_quota="lots"))
    body = status_of(exc)
    assert exc.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "spec.resources.gpu.quota"
    assert body["details"]["group"] == "scheduling.run.ai" and body["details"]["kind"] == "Queue"
    # Kueue ClusterQueue: an enum, a required field and a minItems in one request.
    cq = {"apiVersion": f"{KUEUE}/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": {
        "queueingStrategy": "Random",
        "resourceGroups": [{"coveredResources": [], "flavors": [{"name": "default", "resources": [{"name": "gpu"}]}]}],
    }}
    with pytest.raises(client.ApiException) as exc:
        crd.create_cluster_custom_object(KUEUE, "v1beta2", "clusterqueues", cq)
    causes = {c["field"]: c for c in status_of(exc)["details"]["causes"]}
    assert causes["spec.queueingStrategy"]["reason"] == "FieldValueNotSupported"
    assert causes["spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"]["reason"] == "FieldValueRequired"
    assert "spec.resourceGroups[0].coveredResources" in causes
    assert sim.list("clusterqueues") == []  # nothing stored


def test_schema_defaults_and_pruning_as_the_api_server_does(crd: client.CustomObjectsApi) -> None:
    cq = {"apiVersion": f"{KUEUE}/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
          "spec": {"unknownField": 1, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
              {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16}]}]}]}}
    stored = crd.create_cluster_custom_object(KUEUE, "v1beta2", "clusterqueues", cq)
    assert stored["spec"]["queueingStrategy"] == "BestEffortFIFO"  # CRD default
    assert "unknownField" not in stored["spec"]  # pruned (kubectl's fieldValidation=Strict refuses it instead)


def test_status_subresource_and_generation(crd: client.CustomObjectsApi) -> None:
    crd.create_cluster_custom_object(*KAI, queue("team-a"))
    # Status through the main resource is ignored; through /status only the status changes.
    after = crd.patch_cluster_custom_object(*KAI, "team-a", {"status": {"allocated": {"gpu": "2"}}})
    assert "status" not in after and after["metadata"]["generation"] == 1
    after = crd.patch_cluster_custom_object_status(
        *KAI, "team-a", {"status": {"allocated": {"gpu": "2"}}, "spec": {"displayName": "ignored"}}
    )
    assert after["status"]["allocated"] == {"gpu": "2"} and "displayName" not in after["spec"]
    assert after["metadata"]["generation"] == 1  # status changes do not count
    after = crd.patch_cluster_custom_object(*KAI, "team-a", {"spec": {"displayName": "Team A"}})
    assert after["metadata"]["generation"] == 2 and after["status"]["allocated"] == {"gpu": "2"}
    # A metadata-only change is not a spec change either.
    after = crd.patch_cluster_custom_object(*KAI, "team-a", {"metadata": {"labels": {"x": "y"}}})
    assert after["metadata"]["generation"] == 2


def test_stale_resource_version_on_replace_is_409_conflict(crd: client.CustomObjectsApi) -> None:
    first = crd.create_cluster_custom_object(*KAI, queue("team-a"))
    crd.patch_cluster_custom_object(*KAI, "team-a", {"spec": {"displayName": "new"}})
    stale = {**first, "spec": {**first["spec"], "priority": 5}}
    with pytest.raises(client.ApiException) as exc:
        crd.replace_cluster_custom_object(*KAI, "team-a", stale)
    assert exc.value.status == 409 and status_of(exc)["reason"] == "Conflict"
    current = crd.get_cluster_custom_object(*KAI, "team-a")
    current["spec"]["priority"] = 5
    assert crd.replace_cluster_custom_object(*KAI, "team-a", current)["spec"]["priority"] == 5


def test_namespaced_custom_resources_page_and_watch_like_pods(crd: client.CustomObjectsApi, sim: KubeEmulator) -> None:
    for ns in ("team-a", "team-b"):
        for i in range(3):
            crd.create_namespaced_custom_object(KUEUE, "v1beta2", ns, "localqueues", {
                "apiVersion": f"{KUEUE}/v1beta2", "kind": "LocalQueue",
                "metadata": {"name": f"lq-{i}", "labels": {"i": str(i)}}, "spec": {"clusterQueue": "cq"}})
    names, token = [], None
    while True:
        page = crd.list_cluster_custom_object(KUEUE, "v1beta2", "localqueues", limit=4, _continue=token)
        names += [(q["metadata"]["namespace"], q["metadata"]["name"]) for q in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert len(names) == 6 and names == sorted(names)
    only = crd.list_namespaced_custom_object(KUEUE, "v1beta2", "team-b", "localqueues", label_selector="i in (0,2)")
    assert [q["metadata"]["name"] for q in only["items"]] == ["lq-0", "lq-2"]
    rv = page["metadata"]["resourceVersion"]
    crd.delete_namespaced_custom_object(KUEUE, "v1beta2", "team-a", "localqueues", "lq-1")
    events = list(watch.Watch().stream(crd.list_cluster_custom_object, KUEUE, "v1beta2", "localqueues",
                                       resource_version=rv, timeout_seconds=1))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("DELETED", "lq-1")]
    sim.compact()
    with pytest.raises(client.ApiException) as exc:
        list(watch.Watch().stream(crd.list_cluster_custom_object, KUEUE, "v1beta2", "localqueues",
                                  resource_version=rv, timeout_seconds=1))
    assert exc.value.status == 410


def test_builtin_batch_scheduling_and_events_through_typed_clients(api_client: client.ApiClient) -> None:
    batch, sched, core = client.BatchV1Api(api_client), client.SchedulingV1Api(api_client), client.CoreV1Api(api_client)
    job = client.V1Job(metadata=client.V1ObjectMeta(name="train"), spec=client.V1JobSpec(
        template=client.V1PodTemplateSpec(spec=client.V1PodSpec(
            restart_policy="Never", containers=[client.V1Container(name="main", image="trainer:1")]))))
    created = batch.create_namespaced_job("ml", job)
    assert created.spec.backoff_limit == 6 and created.metadata.generation == 1
    assert [j.metadata.name for j in batch.list_job_for_all_namespaces().items] == ["train"]
    pc = sched.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name="inference"), value=125))
    assert pc.preemption_policy == "PreemptLowerPriority"
    with pytest.raises(client.ApiException) as exc:
        sched.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                     "metadata": {"name": "nope"}})
    assert exc.value.status == 422 and status_of(exc)["details"]["causes"][0]["field"] == "value"
    core.create_namespaced_event("ml", client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="train.1"), involved_object=client.V1ObjectReference(kind="Job", name="train"),
        reason="Created", message="job created", type="Normal"))
    events = core.list_namespaced_event("ml", field_selector="involvedObject.name=train").items
    assert [e.reason for e in events] == ["Created"]


def test_dynamic_client_discovers_and_uses_custom_resources(api_client: client.ApiClient) -> None:
    dyn = dynamic.DynamicClient(api_client)
    flavors = dyn.resources.get(api_version=f"{KUEUE}/v1beta2", kind="ResourceFlavor")
    assert flavors.namespaced is False
    flavors.create(body={"apiVersion": f"{KUEUE}/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "a100"},
                         "spec": {"nodeLabels": {"gpu-type": "a100"}}})
    assert [f.metadata.name for f in flavors.get().items] == ["a100"]
    pools = dyn.resources.get(api_version="karpenter.sh/v1", kind="NodePool")
    with pytest.raises(dynamic.exceptions.UnprocessibleEntityError) as exc:
        pools.create(body={"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
                           "spec": {"template": {"spec": {"requirements": []}}}})
    fields = {c["field"] for c in orjson.loads(exc.value.body)["details"]["causes"]}
    assert "spec.template.spec.nodeClassRef" in fields


def test_a_newly_registered_resource_is_served_at_once(sim: KubeEmulator, crd: client.CustomObjectsApi) -> None:
    register_resource(Resource(
        "example.com", "v1alpha1", "gpuleases", "GpuLease", namespaced=True,
        schema={"type": "object", "properties": {"spec": {"type": "object", "required": ["gpus"], "properties": {
            "gpus": {"type": "integer", "minimum": 1, "maximum": 8}}}}},
    ))
    body = {"apiVersion": "example.com/v1alpha1", "kind": "GpuLease", "metadata": {"name": "l1"}, "spec": {"gpus": 9}}
    with pytest.raises(client.ApiException) as exc:
        crd.create_namespaced_custom_object("example.com", "v1alpha1", "ml", "gpuleases", body)
    assert "spec.gpus" in status_of(exc)["message"] and "less than or equal to 8" in status_of(exc)["message"]
    body["spec"]["gpus"] = 2
    crd.create_namespaced_custom_object("example.com", "v1alpha1", "ml", "gpuleases", body)
    assert sim.get("gpuleases.example.com", "l1", "ml")["spec"]["gpus"] == 2


def test_schema_helpers() -> None:
    schema = {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "string", "pattern": "^x", "maxLength": 3},
        "n": {"type": "number", "minimum": 0, "default": 1},
        "q": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        "m": {"type": "object", "additionalProperties": {"type": "integer"}},
    }}
    obj = {"a": "yyyy", "q": [1], "m": {"k": "v"}, "extra": 1}
    validator = SchemaValidator(schema)
    assert validator.prune(obj) == ["extra"] and "extra" not in obj
    validator.default(obj)
    assert obj["n"] == 1
    causes = sorted((c.field, c.reason) for c in validator.validate(obj))
    assert causes == [("a", "FieldValueInvalid"), ("a", "FieldValueTooLong"), ("m.k", "FieldValueTypeInvalid"),
                      ("q", "FieldValueTypeInvalid")]  # "a": too long and not matching ^x
    assert validator.validate({"n": -1})[0].field == "a"
