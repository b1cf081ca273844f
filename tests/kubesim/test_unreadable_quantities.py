"""The emulator's controllers count a pod's requests as Kubernetes does (kube.requests: init containers,
sidecars, overhead), and a quantity that is none is reported — a Warning Event `InvalidQuantity` on the
object, once — never read as 0 and never a crash of the step (issue 20: kubesim/schedulers.py used to read a
bad value as 0). Such pods cannot reach a real API server; the emulator's Python API stores them as given."""
from __future__ import annotations

from kubesim import KubeEmulator, make_node, make_pod

POOL_LABEL = "console.gpu-capacity.io/node-pool"


def queue_pod(name: str, requests: dict, *, node: str | None = "n1", init: list | None = None) -> dict:
    pod = make_pod(name, "runai-vision", node=node, phase="Running" if node else "Pending",
                   labels={"kai.scheduler/queue": "vision.a100"},
                   containers=[{"name": "main", "requests": requests}])
    if init is not None:
        pod["spec"]["initContainers"] = init
    return pod


def kai_queue(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {POOL_LABEL: "a100"}},
            "spec": {"resources": {"gpu": {"quota": 4, "limit": -1, "overQuotaWeight": 1}}}}


def warnings(sim: KubeEmulator) -> list[dict]:
    return [e for e in sim.list("events") if e.get("reason") == "InvalidQuantity"]


def test_kai_status_leaves_out_a_pod_whose_quantity_is_none_and_says_so_once(sim: KubeEmulator) -> None:
    sim.load([make_node("n1", gpus=8, labels={POOL_LABEL: "a100"})], [
        queue_pod("good", {"nvidia.com/gpu": "2", "cpu": "1", "memory": "1Gi"}),
        queue_pod("typo", {"nvidia.com/gpu": "two", "cpu": "1"}),
    ])
    sim.create("queues.scheduling.run.ai", kai_queue("vision.a100"))
    assert sim.report_queue_status() == 1
    status = sim.get("queues.scheduling.run.ai", "vision.a100")["status"]
    assert status["allocated"]["nvidia.com/gpu"] == "2" and status["requested"]["nvidia.com/gpu"] == "2"
    [warning] = warnings(sim)
    assert warning["type"] == "Warning" and warning["involvedObject"]["name"] == "typo"
    assert warning["metadata"]["namespace"] == "runai-vision"
    assert warning["message"].startswith("kai-scheduler leaves Pod runai-vision/typo out: ")
    assert 'spec.containers[0] ("main").resources.requests[nvidia.com/gpu]' in warning["message"]
    assert "'two'" in warning["message"]
    sim.report_queue_status()
    assert len(warnings(sim)) == 1  # said once, not at every round


def test_kai_status_counts_init_containers_sidecars_and_overhead_as_the_scheduler_does(sim: KubeEmulator) -> None:
    setup = {"name": "setup", "resources": {"requests": {"cpu": "6"}}}
    proxy = {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}
    big_init = queue_pod("big-init", {"nvidia.com/gpu": "1", "cpu": "2"}, init=[setup])
    sidecar = queue_pod("sidecar", {"nvidia.com/gpu": "1", "cpu": "2"}, init=[proxy])
    sidecar["spec"]["overhead"] = {"cpu": "250m"}
    sim.load([make_node("n1", gpus=8, labels={POOL_LABEL: "a100"})], [big_init, sidecar])
    sim.create("queues.scheduling.run.ai", kai_queue("vision.a100"))
    sim.report_queue_status()
    status = sim.get("queues.scheduling.run.ai", "vision.a100")["status"]
    # max(6 init, 2 app) + (2 app + 0.5 sidecar + 0.25 overhead) = 8.75 cores, in millicores.
    assert status["allocated"]["cpu"] == "8750" and status["allocated"]["nvidia.com/gpu"] == "2"
    assert warnings(sim) == []


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
