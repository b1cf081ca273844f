"""The KAI stand-in writes the queue status KAI Scheduler would report (Kueue's: test_scheduler_kueue.py)."""
from __future__ import annotations

from kubesim import make_node, make_pod


def kai_queue(name, parent=None, pool="a100"):
    spec = {"resources": {"gpu": {"quota": 4, "limit": -1, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"metadata": {"name": name, "labels": {"console.gpu-capacity.io/node-pool": pool}}, "spec": spec}


def gpu_pod(name, namespace, *, node=None, gpus=1, priority=50, labels=None, phase="Running"):
    return make_pod(name, namespace, node=node, priority=priority, labels=labels, phase=phase,
                    containers=[{"name": "main", "requests": {"nvidia.com/gpu": str(gpus), "cpu": "2", "memory": "4Gi"}}])


def kai_pod(name, namespace, *, priority_class="train", **kwargs):
    pod = gpu_pod(name, namespace, **kwargs)
    pod["spec"].update(schedulerName="kai-scheduler", priorityClassName=priority_class)
    return pod


def test_kai_queue_status_sums_its_podgroups_and_rolls_up_to_the_parent(sim):
    """KAI's queue controller: a queue sums the PodGroups naming it (pods of kai-scheduler, grouped by
    KAI's pod grouper), a parent its children; non-preemptible = a PriorityClass of 100 or more."""
    for name, value in (("train", 50), ("inference", 125)):
        sim.create("priorityclasses", {"metadata": {"name": name}, "value": value})
    queue = {"kai.scheduler/queue": "vision.a100"}
    sim.load([make_node("n1", gpus=8, labels={"console.gpu-capacity.io/node-pool": "a100"})], [
        kai_pod("train", "runai-vision", node="n1", gpus=2, labels=queue),
        kai_pod("serve", "runai-vision", node="n1", gpus=1, priority=125, priority_class="inference", labels=queue),
        kai_pod("waits", "runai-vision", gpus=4, labels=queue, phase="Pending"),
        kai_pod("done", "runai-vision", node="n1", gpus=3, labels=queue, phase="Succeeded"),
        # Not KAI's: bound by another scheduler, in no PodGroup, counted by no queue.
        gpu_pod("other", "runai-vision", node="n1", gpus=1, labels=queue),
    ])
    sim.create("queues.scheduling.run.ai", kai_queue("department.rnd.a100"))
    sim.create("queues.scheduling.run.ai", kai_queue("vision.a100", parent="department.rnd.a100"))
    sim.kai_pod_grouper_step()
    assert sim.report_queue_status() > 0
    leaf = sim.get("queues.scheduling.run.ai", "vision.a100")["status"]
    assert leaf["allocated"] == {"nvidia.com/gpu": "3", "cpu": "4000", "memory": "8589.935"}
    assert leaf["allocatedNonPreemptible"]["nvidia.com/gpu"] == "1"
    assert leaf["requested"]["nvidia.com/gpu"] == "7"
    parent = sim.get("queues.scheduling.run.ai", "department.rnd.a100")["status"]
    assert parent["allocated"]["nvidia.com/gpu"] == "3" and parent["childQueues"] == ["vision.a100"]
    group = next(g for g in sim.list("podgroups.scheduling.run.ai") if g["metadata"]["annotations"][
        "kai.scheduler/top-owner-metadata"].startswith("name: serve\n"))
    assert group["status"]["resourcesStatus"]["allocatedNonPreemptible"]["nvidia.com/gpu"] == "1"
    # Nothing changed: nothing is written again.
    assert sim.report_queue_status() == 0
