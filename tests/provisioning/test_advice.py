"""Best-practice advice for a pool (docs/using/platform-admin.md#node-pools): each piece present when its condition holds, absent otherwise."""
from __future__ import annotations

from kubesim import make_node
from nodepools.kube import node_facts
from provisioning.advice import NodeInfo, PodInfo, pool_advice
from tests.provisioning.karpenter_objects import GPU_TAINT, nodepool, req

FEATURE_LABELS = ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory")


def info(node: dict) -> NodeInfo:
    facts = node_facts(node)
    return NodeInfo(node["metadata"]["name"], node["metadata"].get("labels") or {}, node["spec"].get("taints") or [],
                    facts.is_gpu_node, facts.gpu_product)


def gpu_node(name, *, product="NVIDIA-H100-80GB-HBM3", taint=True, capacity_type="on-demand", drop_labels=()):
    node = make_node(name, gpus=8, gpu_product=product, capacity_type=capacity_type,
                     taints=[GPU_TAINT] if taint else None)
    for label in drop_labels:
        node["metadata"]["labels"].pop(label)
    return info(node)


PRIORITY_CLASSES = [{"metadata": {"name": "system-node-critical"}, "value": 2000001000},
                    {"metadata": {"name": "inference"}, "value": 125}]


def codes(**kwargs):
    kwargs.setdefault("pods", [])
    kwargs.setdefault("priority_classes", PRIORITY_CLASSES)
    return {a.code: a for a in pool_advice(**kwargs)}


def test_a_well_kept_pool_gets_no_advice():
    nodes = [gpu_node("h1"), gpu_node("h2"), info(make_node("cpu-1"))]
    assert codes(nodes=nodes, pods=[PodInfo("ml", "serve", 125, "h1")]) == {}


def test_gpu_nodes_without_the_noschedule_gpu_taint():
    found = codes(nodes=[gpu_node("h1"), gpu_node("h2", taint=False)])
    advice = found["untainted_gpu_nodes"]
    assert "1 GPU node (h2)" in advice.problem and advice.subjects == ("h2",)
    assert "nvidia.com/gpu=true:NoSchedule" in advice.fix
    # A PreferNoSchedule GPU taint is not enough; a CPU node needs none.
    soft = make_node("h3", gpus=8, taints=[{**GPU_TAINT, "effect": "PreferNoSchedule"}])
    assert "untainted_gpu_nodes" in codes(nodes=[info(soft)])
    assert "untainted_gpu_nodes" not in codes(nodes=[info(make_node("cpu-1"))])


def test_a_karpenter_pool_whose_template_has_no_gpu_taint():
    pool = nodepool("h100-prod", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "h100")])
    advice = codes(nodes=[], nodepool=pool)["untainted_gpu_nodes"]
    assert "the nodes NodePool h100-prod launches" in advice.problem
    tainted = nodepool("h100-prod", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "h100")],
                       taints=[GPU_TAINT])
    assert "untainted_gpu_nodes" not in codes(nodes=[], nodepool=tainted)


def test_a_pool_whose_nodes_mix_gpu_types():
    advice = codes(nodes=[gpu_node("h1"), gpu_node("a1", product="NVIDIA-A100-SXM4-80GB")])["mixed_gpu_types"]
    assert "NVIDIA-A100-SXM4-80GB (1 node)" in advice.problem and "NVIDIA-H100-80GB-HBM3 (1 node)" in advice.problem
    assert "one GPU type" in advice.fix
    assert "mixed_gpu_types" not in codes(nodes=[gpu_node("h1"), gpu_node("h2")])


def test_gpu_nodes_missing_feature_discovery_labels():
    advice = codes(nodes=[gpu_node("h1"), gpu_node("h2", drop_labels=FEATURE_LABELS)])["missing_feature_labels"]
    assert "(h2)" in advice.problem and "nvidia.com/gpu.product" in advice.problem
    assert "feature discovery" in advice.fix
    assert "missing_feature_labels" not in codes(nodes=[gpu_node("h1")])


def test_a_spot_pool_serving_non_preemptible_workloads():
    nodes = [gpu_node("s1", capacity_type="spot"), gpu_node("o1")]
    advice = codes(nodes=nodes, pods=[PodInfo("ml", "serve", 125, "s1"), PodInfo("ml", "train", 50, "s1")])[
        "spot_non_preemptible"]
    assert "1 non-preemptible workload" in advice.problem and "ml/serve" in advice.problem
    assert "ml/train" not in advice.problem
    assert "on-demand or reserved" in advice.fix
    # Preemptible work on spot, or non-preemptible work on the on-demand node: nothing to say.
    assert "spot_non_preemptible" not in codes(nodes=nodes, pods=[PodInfo("ml", "train", 75, "s1")])
    assert "spot_non_preemptible" not in codes(nodes=nodes, pods=[PodInfo("ml", "serve", 100, "o1")])
    # A NodePool that may launch spot: any of its nodes may become spot.
    spot_pool = nodepool("t4-best-effort", requirements=[req("karpenter.sh/capacity-type", "In", "spot")],
                         taints=[GPU_TAINT])
    found = codes(nodes=[gpu_node("o1")], pods=[PodInfo("ml", "serve", 100, "o1")], nodepool=spot_pool)
    assert "spot_non_preemptible" in found
    on_demand = nodepool("h100", requirements=[req("karpenter.sh/capacity-type", "In", "on-demand")], taints=[GPU_TAINT])
    assert "spot_non_preemptible" not in codes(nodes=[gpu_node("o1")], pods=[PodInfo("ml", "serve", 100, "o1")],
                                               nodepool=on_demand)


def test_a_cluster_without_priority_classes():
    system_only = [{"metadata": {"name": "system-cluster-critical"}}, {"metadata": {"name": "system-node-critical"}}]
    advice = codes(nodes=[gpu_node("h1")], priority_classes=system_only)["no_priority_classes"]
    assert "no PriorityClasses" in advice.problem and "priorityClassName" in advice.fix
    assert "no_priority_classes" in codes(nodes=[], priority_classes=[])
    assert "no_priority_classes" not in codes(nodes=[], priority_classes=PRIORITY_CLASSES)
    # Unreadable (None): no claim either way.
    assert "no_priority_classes" not in codes(nodes=[], priority_classes=None)
