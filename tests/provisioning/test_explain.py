"""Why a GPU workload is not getting a node: each NodePool's verdict with its first reason (pure)."""
from __future__ import annotations

import datetime as dt

import pytest

from provisioning.explain import allowed_disruptions, cron_matches, explain, judge
from tests.provisioning.karpenter_objects import GPU_TAINT, gpu_pod, nodepool, req

H100 = req("karpenter.k8s.aws/instance-gpu-name", "In", "h100")
ON_DEMAND = req("karpenter.sh/capacity-type", "In", "on-demand", "reserved")
NOON = dt.datetime(2026, 3, 4, 12, 0, tzinfo=dt.UTC)  # a Wednesday


def verdict(pool, pod):
    return judge(pool, pod, now=NOON)


def test_a_pool_that_admits_the_pod_can_provision():
    pool = nodepool("h100-prod", requirements=[H100, ON_DEMAND], taints=[GPU_TAINT], limits={"nvidia.com/gpu": "32"},
                    resources={"nvidia.com/gpu": "16"}, nodes=2)
    v = verdict(pool, gpu_pod(gpus=8, selector={"karpenter.k8s.aws/instance-gpu-name": "h100"}))
    assert v.can_provision and v.reason == ""


def test_requirements_exclude_the_node_selector():
    pool = nodepool("t4-best-effort", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "t4")])
    v = verdict(pool, gpu_pod(selector={"karpenter.k8s.aws/instance-gpu-name": "h100"}))
    assert v.reason == "requirements"
    assert "karpenter.k8s.aws/instance-gpu-name In [h100]" in v.text
    assert "karpenter.k8s.aws/instance-gpu-name In [t4]" in v.text


def test_a_selector_on_the_other_pools_name_excludes_it():
    v = verdict(nodepool("a100-standard"), gpu_pod(selector={"karpenter.sh/nodepool": "h100-prod"}))
    assert v.reason == "requirements" and "karpenter.sh/nodepool In [a100-standard]" in v.text


def test_undefined_well_known_labels_are_allowed_custom_labels_are_not():
    pool = nodepool("open")
    # The pool leaves zone and instance type open: it may launch one in us-east-1b.
    assert verdict(pool, gpu_pod(selector={"topology.kubernetes.io/zone": "us-east-1b",
                                           "node.kubernetes.io/instance-type": "p5.48xlarge"})).can_provision
    v = verdict(pool, gpu_pod(selector={"workload-type": "inference"}))
    assert v.reason == "requirements" and "workload-type has no known values" in v.text
    # A template label gives the key its value.
    assert verdict(nodepool("inf", labels={"workload-type": "inference"}),
                   gpu_pod(selector={"workload-type": "inference"})).can_provision
    # NotIn / DoesNotExist on an undefined custom label are satisfied by its absence.
    assert verdict(pool, gpu_pod(affinity=[[req("workload-type", "NotIn", "batch")]])).can_provision


def test_required_affinity_operators():
    spot = nodepool("spot-only", requirements=[req("karpenter.sh/capacity-type", "In", "spot")])
    # NotIn excluding the pool's only value.
    v = verdict(spot, gpu_pod(affinity=[[req("karpenter.sh/capacity-type", "NotIn", "spot")]]))
    assert v.reason == "requirements" and "karpenter.sh/capacity-type NotIn [spot]" in v.text
    # DoesNotExist on a key the pool defines.
    assert verdict(spot, gpu_pod(affinity=[[req("karpenter.sh/capacity-type", "DoesNotExist")]])).reason == "requirements"
    assert verdict(spot, gpu_pod(affinity=[[req("karpenter.sh/capacity-type", "Exists")]])).can_provision
    # Gt / Lt on the GPU count.
    eight = nodepool("big", requirements=[req("karpenter.k8s.aws/instance-gpu-count", "In", "8")])
    assert verdict(eight, gpu_pod(affinity=[[req("karpenter.k8s.aws/instance-gpu-count", "Gt", "4")]])).can_provision
    v = verdict(eight, gpu_pod(affinity=[[req("karpenter.k8s.aws/instance-gpu-count", "Lt", "8")]]))
    assert v.reason == "requirements" and "Lt [8]" in v.text
    ranged = nodepool("mid", requirements=[req("karpenter.k8s.aws/instance-gpu-count", "Gt", "1"),
                                           req("karpenter.k8s.aws/instance-gpu-count", "Lt", "5")])
    assert verdict(ranged, gpu_pod(gpus=4, affinity=[[req("karpenter.k8s.aws/instance-gpu-count", "In", "4")]])).can_provision
    assert verdict(ranged, gpu_pod(affinity=[[req("karpenter.k8s.aws/instance-gpu-count", "In", "8")]])).reason == "requirements"
    # One affinity term that fits is enough (terms are ORed).
    assert verdict(spot, gpu_pod(affinity=[[req("karpenter.sh/capacity-type", "In", "on-demand")],
                                           [req("kubernetes.io/arch", "In", "amd64")]])).can_provision


def test_a_pool_whose_instances_have_too_few_gpus_cannot_take_the_pod():
    small = nodepool("t4", requirements=[req("karpenter.k8s.aws/instance-gpu-count", "In", "1", "4")])
    v = verdict(small, gpu_pod(gpus=8))
    assert v.reason == "requirements" and "at most 4 GPUs" in v.text and "asks 8" in v.text
    assert verdict(small, gpu_pod(gpus=4)).can_provision


def test_an_untolerated_taint():
    pool = nodepool("inference-only", taints=[{"key": "workload", "value": "inference", "effect": "NoSchedule"}])
    v = verdict(pool, gpu_pod())
    assert v.reason == "taint" and "workload=inference:NoSchedule" in v.text
    tolerant = gpu_pod(tolerations=[{"key": "workload", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}])
    assert verdict(pool, tolerant).can_provision
    # The GPU taint: the pod without the toleration cannot land.
    gpu_tainted = nodepool("h100", taints=[GPU_TAINT])
    assert verdict(gpu_tainted, gpu_pod(tolerate_gpu=False)).reason == "taint"
    # PreferNoSchedule does not keep a pod away.
    soft = nodepool("soft", taints=[{"key": "workload", "value": "x", "effect": "PreferNoSchedule"}])
    assert verdict(soft, gpu_pod()).can_provision


def test_startup_taints_do_not_count():
    pool = nodepool("h100", startup_taints=[{"key": "node.example.com/initializing", "effect": "NoSchedule"}])
    assert verdict(pool, gpu_pod()).can_provision


def test_requirements_come_before_taints():
    pool = nodepool("inference-only", requirements=[req("karpenter.sh/capacity-type", "In", "spot")],
                    taints=[{"key": "workload", "value": "inference", "effect": "NoSchedule"}])
    assert verdict(pool, gpu_pod(selector={"karpenter.sh/capacity-type": "on-demand"})).reason == "requirements"


def test_limit_reached_says_how_much_of_how_much():
    pool = nodepool("h100-prod", limits={"nvidia.com/gpu": "32", "cpu": "1000"},
                    resources={"nvidia.com/gpu": "32", "cpu": "384"}, nodes=4)
    v = verdict(pool, gpu_pod(gpus=1))
    assert v.reason == "limit"
    assert "nvidia.com/gpu 32 of 32" in v.text
    assert v.figures == ("nvidia.com/gpu", 32, 32)
    # Room for 4 more GPUs but the pod asks 8.
    pool = nodepool("h100-prod", limits={"nvidia.com/gpu": "32"}, resources={"nvidia.com/gpu": "28"}, nodes=4)
    v = verdict(pool, gpu_pod(gpus=8))
    assert v.reason == "limit" and "nvidia.com/gpu 28 of 32" in v.text and "needs 8 more" in v.text
    assert verdict(pool, gpu_pod(gpus=4)).can_provision
    # The node count limit.
    pool = nodepool("few", limits={"nodes": "3"}, resources={"nodes": "3"}, nodes=3)
    v = verdict(pool, gpu_pod())
    assert v.reason == "limit" and "nodes 3 of 3" in v.text


def test_taint_comes_before_limit():
    pool = nodepool("inference-only", taints=[{"key": "workload", "value": "inference", "effect": "NoSchedule"}],
                    limits={"nvidia.com/gpu": "8"}, resources={"nvidia.com/gpu": "8"}, nodes=1)
    assert verdict(pool, gpu_pod()).reason == "taint"


def test_budget_that_blocks_consolidation_at_the_limit():
    blocked = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "0"}]}
    pool = nodepool("h100-prod", limits={"nvidia.com/gpu": "16"}, resources={"nvidia.com/gpu": "16"}, nodes=2,
                    disruption=blocked)
    v = verdict(pool, gpu_pod())
    assert v.reason == "budget"
    assert "nvidia.com/gpu 16 of 16" in v.text and "nodes: 0" in v.text
    # A budget active only during business hours (weekdays 09:00 for 8 h) blocks at noon, not at night.
    scheduled = {"budgets": [{"nodes": "0", "schedule": "0 9 * * 1-5", "duration": "8h"}, {"nodes": "20%"}]}
    pool = nodepool("h100-prod", limits={"nvidia.com/gpu": "16"}, resources={"nvidia.com/gpu": "16"}, nodes=2,
                    disruption=scheduled)
    v = verdict(pool, gpu_pod())
    assert v.reason == "budget" and "0 9 * * 1-5" in v.text
    at_night = judge(pool, gpu_pod(), now=NOON.replace(hour=22))
    assert at_night.reason == "limit"
    # consolidateAfter: Never.
    pool = nodepool("h100-prod", limits={"nvidia.com/gpu": "16"}, resources={"nvidia.com/gpu": "16"}, nodes=2,
                    disruption={"consolidateAfter": "Never"})
    v = verdict(pool, gpu_pod())
    assert v.reason == "budget" and "consolidateAfter: Never" in v.text
    # Below the limit a budget does not matter.
    pool = nodepool("h100-prod", limits={"nvidia.com/gpu": "32"}, resources={"nvidia.com/gpu": "16"}, nodes=2,
                    disruption=blocked)
    assert verdict(pool, gpu_pod()).can_provision


def test_budget_arithmetic_and_cron():
    pool = nodepool("p", disruption={"budgets": [{"nodes": "10%"}]})
    assert allowed_disruptions(pool, 3, NOON)[0] == 1  # 10 % of 3, rounded up
    pool = nodepool("p", disruption={"budgets": [{"nodes": "5"}, {"nodes": "0", "reasons": ["Drifted"]}]})
    assert allowed_disruptions(pool, 20, NOON)[0] == 5  # the Drifted-only budget does not apply
    assert cron_matches("@daily", NOON.replace(hour=0)) and not cron_matches("@daily", NOON)
    assert cron_matches("*/15 12 * * 3", NOON) and not cron_matches("0 12 * * 0", NOON)
    assert cron_matches("0 12 * * mon-fri", NOON) and not cron_matches("0 12 * * sat,sun", NOON)
    assert cron_matches("0 12 4 mar *", NOON) and cron_matches("bogus", NOON) is None


def test_explain_orders_pools_by_weight_and_names_candidates():
    pools = [
        nodepool("a100-standard", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "a100")], weight=10),
        nodepool("h100-prod", requirements=[H100], weight=100, limits={"nvidia.com/gpu": "8"},
                 resources={"nvidia.com/gpu": "8"}, nodes=1),
        nodepool("t4-best-effort", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "t4")]),
    ]
    e = explain(gpu_pod(gpus=4), pools, now=NOON)
    assert [v.nodepool for v in e.verdicts] == ["h100-prod", "a100-standard", "t4-best-effort"]
    assert e.candidates == ["a100-standard", "t4-best-effort"]
    assert "can provision a node for it from a100-standard, t4-best-effort" in e.summary
    d = e.as_dict()
    assert d["nodepools"][0]["reason"] == "limit" and d["nodepools"][0]["limit"] == {
        "resource": "nvidia.com/gpu", "provisioned": "8", "limit": "8"}


def nodeclaim(name, pool, *, gpus=8, conditions=(), labels=None):
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "creationTimestamp": "2026-03-04T11:59:00Z",
                         "labels": {"karpenter.sh/nodepool": pool, **(labels or {})}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": [req("karpenter.k8s.aws/instance-gpu-name", "In", "h100")],
                     "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}},
            "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def nominated(pod, claim):
    return {"reason": "Nominated", "message": f"Pod should schedule on: nodeclaim/{claim}",
            "involvedObject": {"kind": "Pod", "name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"]}}


def test_the_nodeclaim_launched_for_the_pod():
    pools = [nodepool("h100-prod", requirements=[H100])]
    pod = gpu_pod(gpus=8)
    claims = [nodeclaim("h100-prod-abcde", "h100-prod", conditions=["Launched"]),
              nodeclaim("h100-prod-fghij", "h100-prod", conditions=["Launched", "Registered"])]
    e = explain(pod, pools, claims, [nominated(pod, "h100-prod-fghij")], now=NOON)
    assert (e.nodeclaim, e.nodeclaim_phase, e.nodeclaim_pool) == ("h100-prod-fghij", "Registered", "h100-prod")
    assert "NodeClaim h100-prod-fghij (Registered) of NodePool h100-prod is being launched for it" in e.summary
    # Without events: a claim in flight that admits the pod; one nominated for another pod does not count.
    other = gpu_pod("other", gpus=8)
    e = explain(pod, pools, claims, [nominated(other, "h100-prod-abcde")], now=NOON)
    assert e.nodeclaim == "h100-prod-fghij"
    # Initialized claims are done launching; one too small does not take it; one excluded by the selector neither.
    assert explain(pod, pools, [nodeclaim("x", "h100-prod", conditions=["Launched", "Initialized"])]).nodeclaim == ""
    assert explain(pod, pools, [nodeclaim("y", "h100-prod", gpus=4)]).nodeclaim == ""
    picky = gpu_pod(gpus=8, selector={"karpenter.sh/nodepool": "a100-standard"})
    assert explain(picky, pools, [nodeclaim("z", "h100-prod")]).nodeclaim == ""
    assert explain(pod, pools, [nodeclaim("z", "h100-prod")]).nodeclaim == "z"


@pytest.mark.parametrize("bad, reason", [
    ({"key": "x", "operator": "Bogus", "values": ["1"]}, "requirements"),  # an unknown operator admits nothing
    ({"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["many"]}, ""),  # no bound
])
def test_unreadable_requirements_do_not_crash(bad, reason):
    v = verdict(nodepool("odd", requirements=[bad]), gpu_pod(affinity=[[req(bad["key"], "Exists")]]))
    assert v.reason == reason


def test_a_pod_whose_requests_cannot_be_read_is_said_so_not_judged_as_asking_nothing():
    pod = gpu_pod(gpus="eight")
    pools = [nodepool("h100-prod", requirements=[H100], limits={"nvidia.com/gpu": "8"}, resources={"nvidia.com/gpu": "8"})]
    e = explain(pod, pools, now=NOON)
    assert e.verdicts == () and e.candidates == []
    assert e.summary.startswith("Its requests cannot be read, so no NodePool can be judged: ")
    assert "resources.requests[nvidia.com/gpu]" in e.summary and "'eight'" in e.summary
    assert e.as_dict()["summary"] == e.summary
