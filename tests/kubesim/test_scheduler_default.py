"""The emulator's default scheduler (kubesim.scheduling.default), seen through the official Kubernetes client:
pods are created over HTTP, the controller loop ticks on a manual clock, and what a user reads back — the
pod's node, its PodScheduled condition, the FailedScheduling event — is what kube-scheduler writes."""
from __future__ import annotations

import pytest
from kubernetes import client

from kubesim import KubeEmulator, make_node

POOL = "console.gpu-capacity.io/node-pool"


@pytest.fixture
def core(manual_api) -> client.CoreV1Api:
    return client.CoreV1Api(manual_api)


def pod(name: str, *, gpus: int = 0, cpu: str = "1", memory: str = "1Gi", selector: dict | None = None,
        tolerations: list | None = None, affinity: dict | None = None, priority: int | None = None) -> dict:
    requests = {"cpu": cpu, "memory": memory}
    limits = {}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    spec: dict = {"containers": [{"name": "main", "image": "busybox",
                                  "resources": {"requests": requests, **({"limits": limits} if limits else {})}}],
                  "restartPolicy": "Never"}
    if selector:
        spec["nodeSelector"] = selector
    if tolerations:
        spec["tolerations"] = tolerations
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def scheduled(core: client.CoreV1Api, name: str, namespace: str = "work") -> client.V1PodCondition | None:
    found = core.read_namespaced_pod(name, namespace)
    return next((c for c in found.status.conditions or [] if c.type == "PodScheduled"), None)


def events(core: client.CoreV1Api, name: str, reason: str, namespace: str = "work") -> list[client.CoreV1Event]:
    listed = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name},reason={reason}")
    return listed.items


def test_pods_land_on_nodes_that_fit_and_are_bound_as_the_binding_subresource_does(manual_sim, core):
    manual_sim.add_node(make_node("cpu-1", cpu="8", memory="32Gi"))
    manual_sim.add_node(make_node("gpu-1", gpus=4, cpu="32", memory="256Gi"))
    core.create_namespaced_pod("work", pod("trainer", gpus=2))
    core.create_namespaced_pod("work", pod("web"))
    manual_sim.tick()
    trainer = core.read_namespaced_pod("trainer", "work")
    assert trainer.spec.node_name == "gpu-1"
    # The kubelet of the same tick starts it.
    assert trainer.status.phase == "Running"
    assert scheduled(core, "trainer").status == "True"
    assert core.read_namespaced_pod("web", "work").spec.node_name in ("cpu-1", "gpu-1")
    event = events(core, "trainer", "Scheduled")[0]
    assert event.message == "Successfully assigned work/trainer to gpu-1" and event.type == "Normal"
    assert event.source.component == "default-scheduler" and event.reporting_component == "default-scheduler"


def test_a_pod_no_node_fits_gets_kube_schedulers_message_on_its_condition_and_one_counted_event(manual_sim, core):
    # 30 nodes: 20 of another pool, 10 of the pool whose GPUs are all taken.
    for i in range(20):
        manual_sim.add_node(make_node(f"cpu-{i:02d}", labels={POOL: "cpu"}))
    for i in range(10):
        manual_sim.add_node(make_node(f"a100-{i:02d}", gpus=8, labels={POOL: "a100"}))
        core.create_namespaced_pod("work", pod(f"hog-{i:02d}", gpus=8, selector={POOL: "a100"}))
    manual_sim.tick()
    assert all(p.spec.node_name for p in core.list_namespaced_pod("work").items)
    affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": POOL, "operator": "In", "values": ["a100"]}]}]}}
    core.create_namespaced_pod("work", pod("waits", gpus=1, affinity=affinity))
    manual_sim.tick()
    message = ("0/30 nodes are available: 10 Insufficient nvidia.com/gpu, 20 node(s) didn't match Pod's node "
               "affinity/selector. preemption: 0/30 nodes are available: 10 No preemption victims found for "
               "incoming pod, 20 Preemption is not helpful for scheduling.")
    condition = scheduled(core, "waits")
    assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", message)
    [event] = events(core, "waits", "FailedScheduling")
    assert (event.type, event.message, event.count) == ("Warning", message, 1)
    assert (event.involved_object.kind, event.involved_object.name) == ("Pod", "waits")
    assert event.source.component == "default-scheduler"
    assert (event.reporting_component, event.action) == ("default-scheduler", "Scheduling")
    # Nothing changed in the cluster: kube-scheduler leaves the pod in its unschedulable queue.
    manual_sim.clock.advance(10)
    manual_sim.tick()
    assert events(core, "waits", "FailedScheduling")[0].count == 1
    # A node changes: the pod is tried again, fails the same way, and the one event is counted.
    manual_sim.set_node_labels("cpu-00", {"spare": "yes"})
    manual_sim.clock.advance(10)
    manual_sim.tick()
    [event] = events(core, "waits", "FailedScheduling")
    assert event.count == 2 and event.series.count == 2
    # A GPU is freed: the pod lands there.
    core.delete_namespaced_pod("hog-03", "work")
    manual_sim.tick()
    manual_sim.tick()
    assert core.read_namespaced_pod("waits", "work").spec.node_name == "a100-03"


def test_taints_cordons_and_not_ready_nodes_keep_pods_off_in_their_own_words(manual_sim, core):
    manual_sim.add_node(make_node("tainted", gpus=8, taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]))
    manual_sim.add_node(make_node("cordoned", gpus=8, unschedulable=True))
    manual_sim.add_node(make_node("down", gpus=8, ready=False))
    manual_sim.add_node(make_node("soft", gpus=8, taints=[{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]))
    manual_sim.cordon("soft")
    core.create_namespaced_pod("work", pod("plain", gpus=1))
    manual_sim.tick()
    message = scheduled(core, "plain").message
    assert message.startswith(
        "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}, 1 node(s) had untolerated "
        "taint {node.kubernetes.io/not-ready: }, 2 node(s) were unschedulable.")
    # Tolerating the dedicated taint lets it in; PreferNoSchedule never keeps a pod out.
    core.create_namespaced_pod("work", pod("tolerant", gpus=1, tolerations=[
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]))
    manual_sim.cordon("soft", False)
    manual_sim.tick()
    assert core.read_namespaced_pod("tolerant", "work").spec.node_name == "tainted"
    assert core.read_namespaced_pod("plain", "work").spec.node_name == "soft"


def test_resources_count_the_active_pods_bound_to_a_node_and_not_the_finished_ones(manual_sim, core):
    manual_sim.add_node(make_node("small", cpu="4", memory="8Gi", allocatable={"pods": "3"}))
    core.create_namespaced_pod("work", pod("one", cpu="3", memory="2Gi"))
    manual_sim.tick()
    core.create_namespaced_pod("work", pod("two", cpu="2", memory="7Gi"))
    core.create_namespaced_pod("work", pod("tiny", cpu="100m", memory="10Mi"))
    manual_sim.tick()
    assert scheduled(core, "two").message.startswith(
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. preemption:")
    assert core.read_namespaced_pod("tiny", "work").spec.node_name == "small"
    core.create_namespaced_pod("work", pod("third", cpu="100m", memory="10Mi"))
    manual_sim.clock.advance(1)  # queued later: tried after "third"
    core.create_namespaced_pod("work", pod("fourth", cpu="100m", memory="10Mi"))
    manual_sim.tick()
    assert core.read_namespaced_pod("third", "work").spec.node_name == "small"
    assert scheduled(core, "fourth").message.startswith("0/1 nodes are available: 1 Too many pods. preemption:")
    # "one" finishes: its requests and its slot are free again, for "two", the pod waiting longest.
    manual_sim.set_pod_phase("work", "one", "Succeeded")
    manual_sim.tick()
    assert core.read_namespaced_pod("two", "work").spec.node_name == "small"
    assert core.read_namespaced_pod("fourth", "work").spec.node_name is None


def test_preferred_node_affinity_weights_choose_among_nodes_that_fit(manual_sim, core):
    manual_sim.add_node(make_node("a100-1", gpus=8, labels={POOL: "a100"}))
    manual_sim.add_node(make_node("l4-1", gpus=8, labels={POOL: "l4"}))
    term = {"matchExpressions": [{"key": POOL, "operator": "In", "values": ["a100", "l4"]}]}
    preferred = [{"weight": 100, "preference": {"matchExpressions": [{"key": POOL, "operator": "In",
                                                                      "values": ["l4"]}]}},
                 {"weight": 1, "preference": {"matchExpressions": [{"key": POOL, "operator": "In",
                                                                    "values": ["a100"]}]}}]
    for i in range(3):
        core.create_namespaced_pod("work", pod(f"p{i}", gpus=2, affinity={
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]},
            "preferredDuringSchedulingIgnoredDuringExecution": preferred}))
    manual_sim.tick()
    assert {core.read_namespaced_pod(f"p{i}", "work").spec.node_name for i in range(3)} == {"l4-1"}


def test_higher_priority_pods_are_placed_first(manual_sim, core):
    manual_sim.add_node(make_node("gpu-1", gpus=2))
    core.create_namespaced_pod("work", pod("low", gpus=2, priority=50))
    core.create_namespaced_pod("work", pod("high", gpus=2, priority=125))
    manual_sim.tick()
    assert core.read_namespaced_pod("high", "work").spec.node_name == "gpu-1"
    assert scheduled(core, "low").reason == "Unschedulable"


def test_the_binding_subresource_binds_once(manual_sim, core):
    manual_sim.add_node(make_node("gpu-1", gpus=2))
    core.create_namespaced_pod("work", pod("manual", gpus=1) | {"spec": {
        **pod("manual", gpus=1)["spec"], "schedulerName": "my-scheduler"}})
    body = client.V1Binding(metadata=client.V1ObjectMeta(name="manual"),
                            target=client.V1ObjectReference(api_version="v1", kind="Node", name="gpu-1"))
    core.create_namespaced_pod_binding("manual", "work", body, _preload_content=False)
    assert core.read_namespaced_pod("manual", "work").spec.node_name == "gpu-1"
    assert scheduled(core, "manual").status == "True"
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_binding("work", body, _preload_content=False)  # the older path, same rule
    assert refused.value.status == 409 and "already assigned to node" in refused.value.body.decode()
    # Another scheduler's pod is none of the default scheduler's business.
    core.create_namespaced_pod("work", pod("other", gpus=1) | {"spec": {
        **pod("other", gpus=1)["spec"], "schedulerName": "my-scheduler"}})
    manual_sim.tick()
    assert core.read_namespaced_pod("other", "work").spec.node_name is None


def test_a_job_without_enforcer_runs_through_the_job_controller_and_the_scheduler(manual_sim, core, tmp_path):
    """The Job the console submits when no enforcer is set: its pods are created, placed by the default
    scheduler on the pool its affinity requires, and run."""
    from workloads import render

    manual_sim.add_node(make_node("a100-1", gpus=8, labels={"gpu-type": "A100"}))
    manual_sim.add_node(make_node("l4-1", gpus=8, labels={"gpu-type": "L4"}))
    job = render.job(render.JobSpec(
        name="train-1", namespace="work", project="rnd", image="busybox", pods=2, gpus=2,
        pools=(render.PoolTarget(name="a100", label_key="gpu-type", label_value="A100"),)))
    batch = client.BatchV1Api(core.api_client)
    batch.create_namespaced_job("work", job)
    manual_sim.tick()
    manual_sim.tick()
    pods = core.list_namespaced_pod("work", label_selector="batch.kubernetes.io/job-name=train-1").items
    assert len(pods) == 2
    assert {p.spec.node_name for p in pods} == {"a100-1"}
    assert {p.status.phase for p in pods} == {"Running"}


def test_kubectl_describe_shows_the_schedulers_event(sim, kubectl):
    """What a user runs first when a pod waits: `kubectl describe pod` lists the scheduler's event."""
    from kubesim import make_pod

    sim.add_node(make_node("gpu-1", gpus=2))
    sim.add_pod(make_pod("big", "work", phase="Pending",
                         containers=[{"name": "main", "requests": {"nvidia.com/gpu": "4"}}]))
    assert sim.default_scheduler_step() == {"bound": 0, "unschedulable": 1}
    described = kubectl("describe", "pod", "big", "-n", "work").stdout
    assert "FailedScheduling" in described and "default-scheduler" in described
    assert "0/1 nodes are available: 1 Insufficient nvidia.com/gpu." in described
