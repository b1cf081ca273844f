"""The real kubectl against the emulator: discovery, tables, watch, label/annotate/patch/apply/create/
delete/cordon, custom resources and their validation.

kubectl comes from the machine (``/usr/bin/kubectl``, v1.32); without it these skip, unless
CONSOLE_REQUIRE_KUBECTL=1 (CI), where they fail.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import threading
import time

import pytest

from kubesim import KubeEmulator, make_node, make_pod
from kubesim.clock import ManualClock

QUEUE = """\
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: team-a
spec:
  displayName: Team A
  resources:
    gpu: {quota: %s, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
"""


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_get_prints_the_tables_kubectl_users_know(sim: KubeEmulator, kubectl) -> None:
    sim.add_node(make_node("gpu-1", gpus=4))
    sim.add_node(make_node("gpu-2", gpus=8, ready=False))
    sim.add_pod(make_pod("train", "ml", node="gpu-1"))
    nodes = rows(kubectl("get", "nodes").stdout)
    assert nodes[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [r[:3] for r in nodes[1:]] == [["gpu-1", "Ready", "<none>"], ["gpu-2", "NotReady", "<none>"]]
    pods = rows(kubectl("get", "pods", "-A", "-o", "wide").stdout)
    assert pods[0][:6] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"] and "NODE" in pods[0]
    assert pods[1][:4] == ["ml", "train", "1/1", "Running"] and "gpu-1" in pods[1]
    assert rows(kubectl("get", "ns").stdout)[1][:2] == ["ml", "Active"]
    node = json.loads(kubectl("get", "node", "gpu-1", "-o", "json").stdout)
    assert node["kind"] == "Node" and node["status"]["capacity"]["nvidia.com/gpu"] == "4"


def test_label_annotate_cordon_and_three_patch_formats(sim: KubeEmulator, kubectl) -> None:
    sim.add_node(make_node("gpu-1", gpus=4))
    kubectl("label", "node", "gpu-1", "pool=a100")
    kubectl("annotate", "node", "gpu-1", "owner=platform")
    assert "node/gpu-1 cordoned" in kubectl("cordon", "gpu-1").stdout
    node = sim.get_node("gpu-1")
    assert node["metadata"]["labels"]["pool"] == "a100" and node["metadata"]["annotations"]["owner"] == "platform"
    assert node["spec"]["unschedulable"] is True
    assert {t["key"] for t in node["spec"]["taints"]} == {"node.kubernetes.io/unschedulable"}
    assert rows(kubectl("get", "node", "gpu-1").stdout)[1][1] == "Ready,SchedulingDisabled"
    kubectl("uncordon", "gpu-1")
    assert "unschedulable" not in sim.get_node("gpu-1")["spec"]
    kubectl("patch", "node", "gpu-1", "--type=merge", "-p", '{"metadata":{"labels":{"pool":null,"m":"1"}}}')
    kubectl("patch", "node", "gpu-1", "--type=json", "-p", '[{"op":"add","path":"/metadata/labels/j","value":"2"}]')
    kubectl("patch", "node", "gpu-1", "-p", '{"metadata":{"labels":{"s":"3"}}}')  # strategic, kubectl's default
    labels = sim.get_node("gpu-1")["metadata"]["labels"]
    assert "pool" not in labels and (labels["m"], labels["j"], labels["s"]) == ("1", "2", "3")
    out = kubectl("label", "node", "gpu-1", "s=4", check=False)
    assert out.returncode != 0 and "already has a value" in out.stderr  # kubectl's own rule, from the GET


def test_get_watch_prints_changes_as_they_happen(sim: KubeEmulator, kubectl) -> None:
    sim.add_node(make_node("gpu-1"))
    proc = subprocess.Popen(
        ["kubectl", "get", "nodes", "-w", "--output-watch-events"], env=kubectl.env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        seen: list[str] = []
        changed = False
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                break
            seen.append(line)
            if line.split()[:2] == ["ADDED", "gpu-1"] and not changed:
                sim.set_node_condition("gpu-1", "Ready", False)
                changed = True
            if line.split()[:3] == ["MODIFIED", "gpu-1", "NotReady"]:
                break
        else:
            pytest.fail(f"no MODIFIED line within 30 s: {seen}")
        assert seen and seen[-1].split()[:3] == ["MODIFIED", "gpu-1", "NotReady"], seen
        assert seen[0].split() == ["EVENT", "NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    finally:
        proc.kill()
        proc.communicate()


def test_apply_creates_then_configures_a_custom_resource_with_generation(sim: KubeEmulator, kubectl, tmp_path) -> None:
    path = tmp_path / "queue.yaml"
    path.write_text(QUEUE % 8)
    assert "queue.scheduling.run.ai/team-a created" in kubectl("apply", "-f", str(path)).stdout
    assert "unchanged" in kubectl("apply", "-f", str(path)).stdout
    path.write_text(QUEUE % 12)
    assert "configured" in kubectl("apply", "-f", str(path)).stdout
    queue = sim.get("queues.scheduling.run.ai", "team-a")
    assert queue["spec"]["resources"]["gpu"]["quota"] == 12
    assert queue["metadata"]["generation"] == 2
    assert "kubectl.kubernetes.io/last-applied-configuration" in queue["metadata"]["annotations"]
    table = rows(kubectl("get", "queues.scheduling.run.ai").stdout)
    assert table[0][:2] == ["NAME", "PRIORITY"] and table[1][0] == "team-a"
    assert 'queue.scheduling.run.ai "team-a" deleted' in kubectl("delete", "queues.scheduling.run.ai", "team-a").stdout
    assert sim.get("queues.scheduling.run.ai", "team-a") is None


def test_invalid_custom_resource_is_refused_naming_the_field(sim: KubeEmulator, kubectl, tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(QUEUE.replace("team-a", "team-b") % '"lots"')
    out = kubectl("create", "-f", str(path), check=False)
    assert out.returncode != 0
    assert 'The Queue "team-b" is invalid: spec.resources.gpu.quota' in out.stderr
    assert "must be of type number" in out.stderr
    flavor = tmp_path / "cq.yaml"
    flavor.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\n"
        "spec: {queueingStrategy: Random}\n"
    )
    out = kubectl("apply", "-f", str(flavor), check=False)
    assert out.returncode != 0 and "spec.queueingStrategy" in out.stderr and '"StrictFIFO"' in out.stderr
    assert sim.list("clusterqueues") == []


def test_create_namespace_job_and_priorityclass_with_kubectls_generators(sim: KubeEmulator, kubectl) -> None:
    # These kubectl commands send protobuf, not JSON.
    kubectl("create", "namespace", "ml")
    kubectl("create", "job", "warmup", "--image=busybox", "-n", "ml", "--", "sleep", "5")
    kubectl("create", "priorityclass", "train", "--value=50", "--description=training")
    assert rows(kubectl("get", "ns", "ml").stdout)[1][:2] == ["ml", "Active"]
    job = sim.get("jobs.batch", "warmup", "ml")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["sleep", "5"]
    assert job["spec"]["backoffLimit"] == 6 and job["spec"]["completionMode"] == "NonIndexed"  # server defaults
    assert rows(kubectl("get", "jobs", "-n", "ml").stdout)[0][:3] == ["NAME", "STATUS", "COMPLETIONS"]
    pc = sim.get("priorityclasses", "train")
    assert pc["value"] == 50 and pc["preemptionPolicy"] == "PreemptLowerPriority"
    kubectl("delete", "namespace", "ml")
    assert sim.get("jobs.batch", "warmup", "ml") is None


def test_api_resources_lists_every_registered_resource(sim: KubeEmulator, kubectl) -> None:
    out = kubectl("api-resources").stdout
    for name, version in [
        ("nodes", "v1"), ("pods", "v1"), ("namespaces", "v1"), ("events", "v1"), ("jobs", "batch/v1"),
        ("priorityclasses", "scheduling.k8s.io/v1"), ("queues", "scheduling.run.ai/v2"),
        ("schedulingshards", "kai.scheduler/v1"), ("resourceflavors", "kueue.x-k8s.io/v1beta2"),
        ("clusterqueues", "kueue.x-k8s.io/v1beta2"), ("localqueues", "kueue.x-k8s.io/v1beta2"),
        ("cohorts", "kueue.x-k8s.io/v1beta2"), ("workloads", "kueue.x-k8s.io/v1beta2"),
        ("nodepools", "karpenter.sh/v1"), ("nodeclaims", "karpenter.sh/v1"),
        ("podgroups", "scheduling.run.ai/v2alpha2"), ("workloadpriorityclasses", "kueue.x-k8s.io/v1beta2"),
    ]:
        assert any(line.split()[0] == name and version in line.split() for line in out.splitlines()), name
    out = kubectl("get", "resourceflavors,clusterqueues,cohorts,nodepools.karpenter.sh,nodeclaims", check=False)
    assert out.returncode == 0, out.stderr
    assert "No resources found" in out.stderr


def test_patch_of_a_custom_resource_needs_merge_or_json_like_a_real_cluster(sim: KubeEmulator, kubectl, tmp_path) -> None:
    path = tmp_path / "queue.yaml"
    path.write_text(QUEUE % 8)
    kubectl("create", "-f", str(path))
    out = kubectl("patch", "queues.scheduling.run.ai", "team-a", "-p", '{"spec":{"priority":3}}', check=False)
    assert out.returncode != 0 and "application/strategic-merge-patch+json is not supported" in out.stderr
    kubectl("patch", "queues.scheduling.run.ai", "team-a", "--type=merge", "-p", '{"spec":{"priority":3}}')
    queue = sim.get("queues.scheduling.run.ai", "team-a")
    assert queue["spec"]["priority"] == 3 and queue["metadata"]["generation"] == 2
    out = kubectl("patch", "queues.scheduling.run.ai", "team-a", "--type=merge", "-p", '{"spec":{"priority":"high"}}',
                  check=False)
    assert out.returncode != 0 and "spec.priority" in out.stderr
    assert sim.get("queues.scheduling.run.ai", "team-a")["spec"]["priority"] == 3


H100_POOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "h100-prod"}, "spec": {
    "weight": 50, "limits": {"nvidia.com/gpu": "16"},
    "template": {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu-class"},
        "requirements": [{"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["h100"]},
                         {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                         {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1b"]}]}}}}


def columns(text: str, row: int) -> dict[str, str]:
    """One row of kubectl's table by header, cut at the headers' columns (an empty cell stays "")."""
    lines = text.rstrip("\n").splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    ends = [*starts[1:], None]
    return {lines[0][a:b].strip(): lines[row][a:b].strip() for a, b in zip(starts, ends)}


def test_get_nodeclaims_fills_karpenters_printer_columns(sim: KubeEmulator, kubectl) -> None:
    # Karpenter's CRD prints TYPE, CAPACITY and ZONE from the NodeClaim's labels, NODE and READY from its
    # status (a JSONPath filter on the Ready condition); -o wide adds IMAGEID, ID, NODEPOOL, NODECLASS, DRIFTED.
    sim.create("nodepools.karpenter.sh", H100_POOL)
    sim.add_pod(make_pod("train", "ml", phase="Pending", containers=[
        {"name": "main", "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 8}}]))
    sim.clock = ManualClock()  # the one clock of the emulator's steps and timestamps, moved by hand
    sim.karpenter_step()
    [claim] = sim.list("nodeclaims.karpenter.sh")
    name = claim["metadata"]["name"]
    table = kubectl("get", "nodeclaims").stdout
    assert rows(table)[0] == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    launching = columns(table, 1)
    assert (launching["NAME"], launching["TYPE"], launching["CAPACITY"], launching["ZONE"]) == (
        name, "p5.48xlarge", "on-demand", "us-east-1b")
    # Not registered yet: no node (the API server's cell is null, which kubectl leaves blank), Ready Unknown.
    assert (launching["NODE"], launching["READY"]) == ("", "Unknown")

    for _ in range(3):  # Launched after 1 s, Registered (the Node appears) after 3 s, Initialized after 5 s
        sim.clock.advance(2)
        sim.karpenter_step()
    node = sim.get("nodeclaims.karpenter.sh", name)["status"]["nodeName"]
    ready = columns(kubectl("get", "nodeclaims").stdout, 1)
    assert (ready["TYPE"], ready["CAPACITY"], ready["ZONE"], ready["NODE"], ready["READY"]) == (
        "p5.48xlarge", "on-demand", "us-east-1b", node, "True")
    wide = kubectl("get", "nodeclaims", "-o", "wide").stdout
    assert rows(wide)[0] == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE", "IMAGEID", "ID", "NODEPOOL",
                       "NODECLASS", "DRIFTED"]
    cells = columns(wide, 1)
    provider_id = sim.get("nodeclaims.karpenter.sh", name)["status"]["providerID"]
    assert (cells["ID"], cells["NODEPOOL"], cells["NODECLASS"], cells["DRIFTED"]) == (
        provider_id, "h100-prod", "gpu-class", "")
    assert cells["IMAGEID"] == sim.get("nodeclaims.karpenter.sh", name)["status"]["imageID"]

    pools = kubectl("get", "nodepools", "-o", "wide").stdout
    assert rows(pools)[0] == ["NAME", "NODECLASS", "NODES", "READY", "AGE", "WEIGHT", "CPU", "MEMORY"]
    pool = columns(pools, 1)
    assert (pool["NAME"], pool["NODECLASS"], pool["NODES"], pool["READY"], pool["WEIGHT"], pool["CPU"]) == (
        "h100-prod", "gpu-class", "1", "True", "50", "192")
