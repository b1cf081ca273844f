"""The scheduler objects the console derives from pools and quotas (KAI Scheduler and Kueue)."""
from __future__ import annotations

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command

from enforcers import desired as d
from enforcers.diff import covers, merged, plan
from enforcers.selectors import org_state


def small_org(**project_kwargs) -> d.OrgState:
    pools = (d.PoolState("default", cpu_total_millis=64000, memory_total_bytes=512 * 2**30),
             d.PoolState("a100", gpu_placement="spread", cpu_placement="binpack",
                         taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},),
                         cpu_total_millis=128000, memory_total_bytes=1024 * 2**30))
    rnd = d.DepartmentState("rnd", quotas={"a100": d.QuotaState(gpu_deserved=Decimal(20), rank=6)})
    vision = d.ProjectState(
        "vision", "rnd", namespaces=("runai-vision",), pool_order=("a100",),
        quotas={"a100": d.QuotaState(gpu_deserved=Decimal("4.5"), gpu_limit=Decimal(8), cpu_deserved=Decimal("16"),
                                     memory_deserved_mib=1024, over_quota_weight=3, rank=7),
                "default": d.QuotaState(gpu_deserved=Decimal(2))},
        **project_kwargs)
    return d.OrgState(cluster="lab", pools=pools, departments=(rnd,), projects=(vision,))


def by_kind(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_kai_objects_follow_pools_departments_and_projects():
    objects = d.kai_objects(small_org())
    classes = by_kind(objects, "PriorityClass")
    assert {name: o["value"] for name, o in classes.items()} == {
        "train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
    shards = by_kind(objects, "SchedulingShard")
    assert shards["a100"]["apiVersion"] == "kai.scheduler/v1"
    # The scheduler flag that puts DisruptionTarget on the pods KAI evicts (the Jobs' podFailurePolicy reads it).
    assert shards["a100"]["spec"] == {"partitionLabelValue": "a100",
                                      "placementStrategy": {"gpu": "spread", "cpu": "binpack"},
                                      "args": {"update-pod-eviction-condition": "true"}}
    queues = by_kind(objects, "Queue")
    assert set(queues) == {"department.rnd.default", "department.rnd.a100", "vision.default", "vision.a100"}
    project = queues["vision.a100"]
    assert project["apiVersion"] == "scheduling.run.ai/v2"
    assert project["metadata"]["labels"][d.POOL_LABEL] == "a100"
    assert project["metadata"]["labels"][d.MANAGED_BY_LABEL] == d.MANAGED_BY
    assert project["spec"]["parentQueue"] == "department.rnd.a100"
    assert project["spec"]["priority"] == 140  # Highest
    # GPU in devices, CPU in millicores, memory in megabytes (1024 MiB = 1073 MB); -1 is unlimited.
    assert project["spec"]["resources"] == {
        "gpu": {"quota": 4.5, "limit": 8, "overQuotaWeight": 3},
        "cpu": {"quota": 16000, "limit": -1, "overQuotaWeight": 3},
        "memory": {"quota": 1073, "limit": -1, "overQuotaWeight": 3},
    }
    department = queues["department.rnd.a100"]
    assert "parentQueue" not in department["spec"]
    assert department["spec"]["resources"]["gpu"] == {"quota": 20, "limit": -1, "overQuotaWeight": 2}
    assert department["spec"]["resources"]["cpu"]["quota"] == -1


def test_kai_over_quota_off_sets_the_limit_to_the_quota():
    queues = by_kind(d.kai_objects(small_org(allow_over_quota=False)), "Queue")
    resources = queues["vision.a100"]["spec"]["resources"]
    assert resources["gpu"] == {"quota": 4.5, "limit": 4.5, "overQuotaWeight": 3}
    assert resources["cpu"]["limit"] == resources["cpu"]["quota"] == 16000
    # Unlimited deserved memory with over-quota off stays unlimited (-1 both).
    assert queues["vision.default"]["spec"]["resources"]["memory"] == {"quota": -1, "limit": -1, "overQuotaWeight": 2}


def test_kueue_objects_follow_pools_departments_and_projects():
    objects = d.kueue_objects(small_org())
    assert {n: o["value"] for n, o in by_kind(objects, "WorkloadPriorityClass").items()} == {
        "train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
    flavors = by_kind(objects, "ResourceFlavor")
    assert flavors["a100"]["spec"] == {
        "nodeLabels": {d.POOL_LABEL: "a100"},
        "nodeTaints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    assert flavors["default"]["spec"] == {"nodeLabels": {d.POOL_LABEL: "default"}}
    assert set(by_kind(objects, "Cohort")) == {"rnd"}
    queue = by_kind(objects, "ClusterQueue")["vision"]
    spec = queue["spec"]
    assert spec["cohortName"] == "rnd"
    assert spec["fairSharing"] == {"weight": "3"}
    assert spec["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["runai-vision"]}]
    group, = spec["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory", "ephemeral-storage"]
    # Borrowed quota is taken back for its owner; a higher priority preempts a lower one in the queue.
    assert spec["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    # The PriorityClasses the Jobs name are written in Kueue mode too.
    assert {n: o["value"] for n, o in by_kind(objects, "PriorityClass").items()} == {
        "train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
    # Flavors follow the project's priority list, then the remaining pools.
    assert [f["name"] for f in group["flavors"]] == ["a100", "default"]
    a100 = {r["name"]: r for r in group["flavors"][0]["resources"]}
    assert a100["nvidia.com/gpu"] == {"name": "nvidia.com/gpu", "nominalQuota": "4.5", "borrowingLimit": "3.5"}
    assert a100["cpu"] == {"name": "cpu", "nominalQuota": "16"}  # unlimited limit: no borrowingLimit
    assert a100["memory"] == {"name": "memory", "nominalQuota": str(1024 * 2**20)}
    default = {r["name"]: r for r in group["flavors"][1]["resources"]}
    # Unlimited deserved CPU / memory is the whole pool's allocatable.
    assert default["cpu"]["nominalQuota"] == "64"
    assert default["memory"]["nominalQuota"] == str(512 * 2**30)
    local = [o for o in objects if o["kind"] == "LocalQueue"]
    assert [(o["metadata"]["namespace"], o["metadata"]["name"], o["spec"]) for o in local] == [
        ("runai-vision", "vision", {"clusterQueue": "vision"})]


def test_kueue_over_quota_off_borrows_nothing():
    queue = by_kind(d.kueue_objects(small_org(allow_over_quota=False)), "ClusterQueue")["vision"]
    for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
        assert {r["borrowingLimit"] for r in flavor["resources"]} == {"0"}


def test_a_long_project_queue_name_still_fits_a_label_value():
    name = d.kai_project_queue("p" * 63, "q" * 63)
    assert len(name) <= 63
    assert name != d.kai_project_queue("p" * 63, "q" * 62 + "r")


@pytest.mark.django_db
def test_the_demo_organisation_gives_the_full_object_set_for_each_enforcer():
    call_command("demo", stdout=StringIO())
    from nodepools.models import Cluster

    state = org_state(cluster=Cluster.objects.get(name="demo"))
    kai = d.kai_objects(state)
    pools = ["default", "a100-40gb", "a100-80gb", "a100-mig", "l4-shared", "a10g"]
    queues = by_kind(kai, "Queue")
    # 6 pools (3 of them of shared GPUs) × (2 department queues + 8 project queues)
    assert len(queues) == 60
    # Quota of shared GPUs in GPU-equivalents, decimals where natural (a KAI queue takes fractions of devices).
    assert queues["serve-vision.a10g"]["spec"]["resources"]["gpu"]["quota"] == 2.5
    # A MIG pool's Queue is written in KAI's unit, compute slices: team-nlp's 1.5 GPU-equivalents of A100s
    # (7 slices each) are 10.5 slices.
    assert queues["team-nlp.a100-mig"]["spec"]["resources"]["gpu"]["quota"] == 10.5
    assert set(by_kind(kai, "SchedulingShard")) == set(pools)
    assert queues["team-vision.a100-80gb"]["spec"]["parentQueue"] == "department.rnd.a100-80gb"
    assert queues["department.rnd.default"]["spec"]["resources"]["gpu"]["quota"] == 20
    kueue = d.kueue_objects(state)
    assert set(by_kind(kueue, "ResourceFlavor")) == set(pools)
    assert set(by_kind(kueue, "Cohort")) == {"rnd", "ml-ops"}
    assert len(by_kind(kueue, "ClusterQueue")) == 8
    assert {o["metadata"]["namespace"] for o in kueue if o["kind"] == "LocalQueue"} == {
        f"runai-{p}" for p in ("team-nlp", "team-robotics", "team-speech", "team-vision", "batch-scoring",
                                "serve-chat", "serve-search", "serve-vision")}


def test_plan_creates_what_is_missing_and_leaves_matching_objects():
    wanted = d.kai_objects(small_org())
    first = plan(wanted, [])
    assert len(first.create) == len(wanted) and not first.update and not first.delete
    # The API server adds defaults, status and metadata; quantities may come back normalised.
    actual = []
    for obj in wanted:
        copy = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "7", "uid": "u"}, "status": {}}
        if obj["kind"] == "Queue":
            copy["spec"] = {**obj["spec"], "preemptMinRuntime": None}
        actual.append(copy)
    again = plan(wanted, actual)
    assert again.empty and again.unchanged == len(wanted)


def test_plan_puts_back_a_changed_owned_object_and_deletes_owned_leftovers():
    wanted = d.kai_objects(small_org())
    actual = [dict(o) for o in wanted]
    queue = next(o for o in actual if o["metadata"]["name"] == "vision.a100")
    queue["spec"] = {**queue["spec"], "resources": {**queue["spec"]["resources"],
                                                    "gpu": {"quota": 40, "limit": -1, "overQuotaWeight": 3}}}
    leftover = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                "metadata": {"name": "old.a100", "labels": {d.MANAGED_BY_LABEL: d.MANAGED_BY}}, "spec": {}}
    foreign = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "theirs"}, "spec": {}}
    result = plan(wanted, actual + [leftover, foreign])
    assert [(o["metadata"]["name"], fields) for o, _, fields in result.update] == [
        ("vision.a100", ["spec.resources.gpu.quota", "spec.resources.gpu.limit"])]
    assert [o["metadata"]["name"] for o in result.delete] == ["old.a100"]  # never "theirs"


def test_plan_never_touches_a_same_named_object_someone_else_owns():
    wanted = d.kai_objects(small_org())
    theirs = dict(next(o for o in wanted if o["kind"] == "SchedulingShard"))
    theirs["metadata"] = {"name": theirs["metadata"]["name"], "labels": {}}
    result = plan(wanted, [theirs])
    assert [o["metadata"]["name"] for o in result.conflicts] == [theirs["metadata"]["name"]]
    assert theirs["metadata"]["name"] not in [o["metadata"]["name"] for o in result.create]


def test_quantities_compare_by_value():
    assert covers("500m", "0.5") and covers("1Gi", str(2**30)) and covers(4, "4")
    assert not covers("4", "5") and not covers(True, 1)


def test_merged_keeps_the_clusters_metadata_and_puts_the_console_fields_back():
    wanted = by_kind(d.kai_objects(small_org()), "Queue")["vision.a100"]
    actual = {**wanted, "metadata": {**wanted["metadata"], "resourceVersion": "9",
                                     "labels": {"team": "x"}, "annotations": {"note": "y"}},
              "spec": {"resources": {}}, "status": {"allocated": {}}}
    out = merged(actual, wanted)
    assert out["metadata"]["resourceVersion"] == "9"
    assert out["metadata"]["annotations"] == {"note": "y"}
    assert out["metadata"]["labels"]["team"] == "x"
    assert out["metadata"]["labels"][d.MANAGED_BY_LABEL] == d.MANAGED_BY
    assert out["spec"] == wanted["spec"] and "status" not in out


# ---------------------------------------------------------------------------------------------------
# GPU-equivalents written in each scheduler's units (MIG pools)

def _a100_mig(layout: str, gpus: int = 1, strategy: str | None = None):
    """The inventory of an A100 80GB node cut by the MIG manager's `layout`, as the emulator publishes it."""
    from kube import gpu as kube_gpu
    from kubesim import make_node

    return kube_gpu.node_gpus_of(make_node("n", gpus=gpus, gpu_product="NVIDIA-A100-SXM4-80GB", mig_config=layout,
                                           mig_strategy=strategy))


def _mig_org(pool_gpus, *, deserved="0.429", limit=None, over_quota=True) -> d.OrgState:
    pools = (d.PoolState("mig", gpus=pool_gpus), d.PoolState("whole"))
    quota = d.QuotaState(gpu_deserved=Decimal(deserved), gpu_limit=None if limit is None else Decimal(limit))
    return d.OrgState(cluster="lab", pools=pools,
                      departments=(d.DepartmentState("rnd", quotas={"mig": d.QuotaState(gpu_deserved=Decimal(2))}),),
                      projects=(d.ProjectState("vision", "rnd", namespaces=("runai-vision",), pool_order=("mig",),
                                               allow_over_quota=over_quota,
                                               quotas={"mig": quota, "whole": d.QuotaState(gpu_deserved=Decimal("0.5"))}),))


def test_a_mig_pools_kai_queue_counts_compute_slices():
    """KAI counts a MIG device by its slices: 3/7 of an A100 (0.429 GPU-equivalents) is a quota of 3, a
    department's 2 GPUs 14; a pool of whole GPUs keeps its GPU-equivalents (0.5)."""
    from kube import gpu as kube_gpu

    pool = kube_gpu.pool_gpus([_a100_mig("all-1g.10gb", gpus=2)])
    assert (pool.equivalents, pool.kai, pool.units) == (2, 14, {"nvidia.com/mig-1g.10gb": 14})
    queues = by_kind(d.kai_objects(_mig_org(pool, limit="1")), "Queue")
    assert queues["vision.mig"]["spec"]["resources"]["gpu"] == {"quota": 3, "limit": 7, "overQuotaWeight": 2}
    assert queues["department.rnd.mig"]["spec"]["resources"]["gpu"]["quota"] == 14
    assert queues["vision.whole"]["spec"]["resources"]["gpu"]["quota"] == 0.5
    # all-balanced: 2 × 1g.10gb, 1 × 2g.20gb, 1 × 3g.40gb per GPU, 7 slices to KAI, still 7 per GPU-equivalent.
    balanced = kube_gpu.pool_gpus([_a100_mig("all-balanced")])
    assert (balanced.equivalents, balanced.kai) == (1, 7)
    # The single strategy publishes 3g.40gb devices as nvidia.com/gpu, one each to KAI: 7/3 per GPU-equivalent.
    single = kube_gpu.pool_gpus([_a100_mig("all-3g.40gb", strategy="single")])
    assert single.kai_per_equivalent() == kube_gpu.Fraction(7, 3)
    assert by_kind(d.kai_objects(_mig_org(single)), "Queue")["vision.mig"]["spec"]["resources"]["gpu"]["quota"] == 1


def test_a_mig_pools_cluster_queue_covers_each_profile_with_the_owners_share_of_its_slices():
    """Each MIG resource of the flavor is covered, its nominal quota the owner's share of the pool's slices of
    that profile rounded down, its borrowing limit the same share of the limit less that."""
    from kube import gpu as kube_gpu

    pool = kube_gpu.pool_gpus([_a100_mig("all-balanced", gpus=2)])  # 4 × 1g, 2 × 2g, 2 × 3g; 2 GPU-equivalents
    objects = d.kueue_objects(_mig_org(pool, deserved="1", limit="1.5"))
    spec = by_kind(objects, "ClusterQueue")["vision"]["spec"]
    group = spec["resourceGroups"][0]
    assert group["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory", "ephemeral-storage",
                                         "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"]
    resources = {r["name"]: r for r in group["flavors"][0]["resources"]}
    assert [r["name"] for r in group["flavors"][0]["resources"]] == group["coveredResources"]
    assert resources["nvidia.com/gpu"] == {"name": "nvidia.com/gpu", "nominalQuota": "0", "borrowingLimit": "0"}
    assert resources["nvidia.com/mig-1g.10gb"] == {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": "2",
                                                    "borrowingLimit": "1"}  # 4 × 1/2, 4 × 3/4 = 3
    assert resources["nvidia.com/mig-3g.40gb"]["nominalQuota"] == "1"
    # Rounded down: 0.429 of 2 GPU-equivalents is 0.86 of the 4 1g slices and 0.43 of the 2 3g ones.
    small = by_kind(d.kueue_objects(_mig_org(pool, deserved="0.429")), "ClusterQueue")["vision"]["spec"]
    assert {r["name"]: r["nominalQuota"] for r in small["resourceGroups"][0]["flavors"][0]["resources"]
            if "mig" in r["name"]} == {"nvidia.com/mig-1g.10gb": "0", "nvidia.com/mig-2g.20gb": "0",
                                       "nvidia.com/mig-3g.40gb": "0"}
    # Over-quota off: nothing to borrow of any profile.
    off = by_kind(d.kueue_objects(_mig_org(pool, deserved="1", limit="2", over_quota=False)), "ClusterQueue")
    assert {r["borrowingLimit"] for r in off["vision"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]} == {"0"}


def test_a_quota_of_whole_slices_stored_to_the_thousandth_is_whole_slices_again():
    """k slices of 7 typed as GPU-equivalents to the thousandth (k/7 rounded) are k slices in both schedulers."""
    from fractions import Fraction

    from kube import gpu as kube_gpu

    pool = kube_gpu.pool_gpus([_a100_mig("all-1g.10gb", gpus=8)])  # 56 slices
    for k in range(57):
        typed = str(kube_gpu.to_decimal(Fraction(k, 7)))
        kai = by_kind(d.kai_objects(_mig_org(pool, deserved=typed)), "Queue")["vision.mig"]["spec"]["resources"]
        assert kai["gpu"]["quota"] == k, typed
        cq = by_kind(d.kueue_objects(_mig_org(pool, deserved=typed)), "ClusterQueue")["vision"]["spec"]
        assert cq["resourceGroups"][0]["flavors"][0]["resources"][4]["nominalQuota"] == str(k), typed
