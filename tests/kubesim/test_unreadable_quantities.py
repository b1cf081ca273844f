"""The emulator's controllers count a pod's requests as Kubernetes does (kube.requests: init containers,
sidecars, overhead), and a quantity that is none is reported — a Warning Event `InvalidQuantity` on the
object, once — never read as 0 and never a crash of the step (issue 20: kubesim/schedulers.py used to read a
bad value as 0). Such pods cannot reach a real API server; the emulator's Python API stores them as given."""
from __future__ import annotations

from enforcers import desired
from kubesim import KubeEmulator, make_node, make_pod
from tests.kubesim.test_scheduler_kai import NS, apply_org, nodes, queue_status, quota, settle

POOL_LABEL = "console.gpu-capacity.io/node-pool"


def kai_pod(name: str, requests: dict, *, init: list | None = None) -> dict:
    """A pending pod of KAI Scheduler in project vision's queue of pool a100."""
    pod = make_pod(name, NS, phase="Pending", labels={"kai.scheduler/queue": desired.kai_project_queue("vision", "a100"),
                                                     POOL_LABEL: "a100"},
                   containers=[{"name": "main", "requests": requests}])
    pod["spec"]["schedulerName"] = "kai-scheduler"
    if init is not None:
        pod["spec"]["initContainers"] = init
    return pod


def kai_cluster(emu: KubeEmulator, api) -> None:
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(8)}, projects={"vision": {"a100": quota(4)}})
    nodes(emu, "a100", 1)


def warnings(sim: KubeEmulator) -> list[dict]:
    return [e for e in sim.list("events") if e.get("reason") == "InvalidQuantity"]


def test_kai_leaves_a_pod_whose_quantity_is_none_pending_and_says_why(manual_sim: KubeEmulator, manual_api) -> None:
    kai_cluster(manual_sim, manual_api)
    manual_sim.add_pod(kai_pod("good", {"nvidia.com/gpu": "2", "cpu": "1"}))
    manual_sim.add_pod(kai_pod("typo", {"nvidia.com/gpu": "two", "cpu": "1"}))
    settle(manual_sim, 4)
    good, typo = manual_sim.get_pod(NS, "good"), manual_sim.get_pod(NS, "typo")
    assert good["spec"]["nodeName"] == "a100-0" and not typo["spec"].get("nodeName")
    scheduled = next(c for c in typo["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "False"
    assert 'spec.containers[0] ("main").resources.requests[nvidia.com/gpu]' in scheduled["message"]
    assert "'two'" in scheduled["message"]
    # Never read as 0: the queue counts the good pod only.
    status = queue_status(manual_api, desired.kai_project_queue("vision", "a100"))
    assert status["allocated"]["nvidia.com/gpu"] == "2" and status["requested"]["nvidia.com/gpu"] == "2"


def test_kai_counts_init_containers_sidecars_and_overhead_as_the_scheduler_does(manual_sim: KubeEmulator,
                                                                               manual_api) -> None:
    kai_cluster(manual_sim, manual_api)
    setup = {"name": "setup", "resources": {"requests": {"cpu": "6"}}}
    proxy = {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}
    sidecar = kai_pod("sidecar", {"nvidia.com/gpu": "1", "cpu": "2"}, init=[proxy])
    sidecar["spec"]["overhead"] = {"cpu": "250m"}
    manual_sim.add_pod(kai_pod("big-init", {"nvidia.com/gpu": "1", "cpu": "2"}, init=[setup]))
    manual_sim.add_pod(sidecar)
    settle(manual_sim, 4)
    status = queue_status(manual_api, desired.kai_project_queue("vision", "a100"))
    # max(6 init, 2 app) + (2 app + 0.5 sidecar + 0.25 overhead) = 8.75 cores, in millicores.
    assert status["allocated"]["cpu"] == "8750" and status["allocated"]["nvidia.com/gpu"] == "2"


def karpenter_pool() -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"}, "spec": {"template": {
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [{"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["a100"]}]}},
        "limits": {"nvidia.com/gpu": "32"}}}


def test_karpenter_launches_for_the_readable_pod_and_reports_the_other(sim: KubeEmulator) -> None:
    sim.create("nodepools.karpenter.sh", karpenter_pool())
    sim.add_pod(make_pod("ok", "ml", phase="Pending", containers=[{"name": "main", "requests": {"nvidia.com/gpu": "8"}}]))
    sim.add_pod(make_pod("typo", "ml", phase="Pending", containers=[{"name": "main", "requests": {"nvidia.com/gpu": "8x"}}]))
    done = sim.karpenter_step()
    assert [line for line in done if "created for pod" in line] and all("ml/typo" not in line for line in done)
    [warning] = warnings(sim)
    assert warning["involvedObject"]["name"] == "typo" and warning["message"].startswith("karpenter leaves Pod ml/typo")
    sim.karpenter_step()  # the next step: the warning is not written again
    assert len(warnings(sim)) == 1


def test_the_dcgm_exporter_gives_no_device_to_a_pod_whose_gpus_cannot_be_read(sim: KubeEmulator) -> None:
    sim.load([make_node("n1", gpus=4)], [
        make_pod("ok", "ml", node="n1", containers=[{"name": "main", "requests": {"nvidia.com/gpu": "1"}}]),
        make_pod("typo", "ml", node="n1", containers=[{"name": "main", "requests": {"nvidia.com/gpu": "one"}}]),
    ])
    held = [d["pod"] for d in sim.dcgm_devices()]
    assert held.count("ok") == 1 and "typo" not in held and len(held) == 4
    [warning] = warnings(sim)
    assert warning["involvedObject"]["name"] == "typo"
    assert warning["message"].startswith("dcgm-exporter leaves Pod ml/typo out: ")
