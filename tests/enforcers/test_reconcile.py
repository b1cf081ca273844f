"""The console brings a cluster in step with its quotas, over HTTP against the Kubernetes API emulator
(which checks every custom resource against its CRD's schema, as the API server does)."""
from __future__ import annotations

from decimal import Decimal

import pytest
from kubernetes import client as k8s

from audit.models import AuditEvent
from enforcers import desired as d
from enforcers import services
from enforcers.models import RefusedWrite


QUEUES = ("scheduling.run.ai", "v2", "queues")


@pytest.fixture
def lab(org, sim, tmp_path):
    """The test organisation's cluster reached through the emulator, holding the org's nodes."""
    from nodepools import services as pool_services

    path = sim.write_kubeconfig(tmp_path / "kubeconfig")
    pool_services.cluster_update(actor=None, cluster=org.cluster, kubeconfig_path=str(path))
    org.cluster.refresh_from_db()
    sim.load(org.nodes, [])
    for namespace in ("runai-rnd-a", "runai-rnd-b", "runai-ops-a"):
        sim.add_namespace(namespace)
    return org


def mirror(org, sim):
    """What the sync does: the database takes the cluster's nodes as they are now."""
    from nodepools import services as pool_services

    pool_services.cluster_objects_replace(cluster=org.cluster, nodes=sim.list("nodes"), pods=org.pods)


def api_client(cluster):
    from nodepools.sync import api_client_for

    return api_client_for(cluster)


def reconcile(cluster):
    with api_client(cluster) as api:
        return services.enforcement_reconcile(cluster=cluster, api_client=api)


def cluster_objects(cluster, group, version, plural):
    with api_client(cluster) as api:
        return {o["metadata"]["name"]: o for o in
                k8s.CustomObjectsApi(api).list_cluster_custom_object(group, version, plural)["items"]}


@pytest.mark.django_db
def test_kai_enforcement_creates_the_whole_object_set_and_stamps_the_pool_label(lab, sim):
    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="kai")
    result = reconcile(lab.cluster)
    assert not result.refused, result.refused
    queues = cluster_objects(lab.cluster, *QUEUES)
    # 2 pools × (2 departments + 3 projects)
    assert len(queues) == 10
    assert queues["rnd-a.a100"]["spec"]["parentQueue"] == "department.rnd.a100"
    assert set(cluster_objects(lab.cluster, "kai.scheduler", "v1", "schedulingshards")) == {"default", "a100"}
    assert {n: o["value"] for n, o in cluster_objects(lab.cluster, "scheduling.k8s.io", "v1", "priorityclasses").items()
            } == {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
    # Every node carries the console's pool label, and keeps its own labels.
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in sim.list("nodes")}
    assert nodes["a100-1"][d.POOL_LABEL] == "a100" and nodes["a100-1"]["gpu-type"] == "A100"
    assert nodes["v100-1"][d.POOL_LABEL] == "default"
    # Once the sync has mirrored the labelled nodes, a second round finds nothing to do.
    mirror(lab, sim)
    again = reconcile(lab.cluster)
    assert not again.changed and not again.drift


@pytest.mark.django_db
def test_a_quota_change_reaches_the_clusters_queue(lab):
    from projects import services as project_services

    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="kai")
    reconcile(lab.cluster)
    quota = lab.quota(lab.rnd_a, lab.a100)
    project_services.quota_update(actor=None, quota=quota, expected_version=quota.version, gpu_deserved=Decimal(3),
                                  gpu_limit=Decimal(6), over_quota_weight=5)
    result = reconcile(lab.cluster)
    assert result.updated == ["Queue rnd-a.a100"] and not result.drift
    gpu = cluster_objects(lab.cluster, *QUEUES)["rnd-a.a100"]["spec"]["resources"]["gpu"]
    assert gpu == {"quota": 3, "limit": 6, "overQuotaWeight": 5}


@pytest.mark.django_db
def test_drift_is_put_back_and_recorded_with_who_changed_it(lab, sim, kubectl_env):
    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="kai")
    reconcile(lab.cluster)
    # Someone edits an owned queue with kubectl and deletes another.
    kubectl_env("patch", "queues.scheduling.run.ai", "rnd-a.a100", "--type=merge",
                "-p", '{"spec":{"resources":{"gpu":{"quota":40}}}}')
    kubectl_env("delete", "queues.scheduling.run.ai", "rnd-b.default")
    result = reconcile(lab.cluster)
    assert sorted(result.drift) == ["Queue rnd-a.a100", "Queue rnd-b.default"]
    queues = cluster_objects(lab.cluster, *QUEUES)
    assert queues["rnd-a.a100"]["spec"]["resources"]["gpu"]["quota"] == 0
    assert "rnd-b.default" in queues
    events = list(AuditEvent.objects.filter(object_type="appliedobject").order_by("pk"))
    changed = next(e for e in events if "rnd-a.a100" in e.after["drift"])
    assert "kubectl" in changed.before["changed_by"]
    assert changed.before["spec.resources.gpu.quota"] == 40 and changed.after["spec.resources.gpu.quota"] == 0
    assert any("deleted in the cluster" in e.after["drift"] for e in events)


@pytest.mark.django_db
def test_objects_the_console_does_not_own_are_never_touched(lab, sim):
    theirs = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "team-x"},
              "spec": {"resources": {"gpu": {"quota": 1, "limit": -1, "overQuotaWeight": 1}}}}
    with api_client(lab.cluster) as api:
        k8s.CustomObjectsApi(api).create_cluster_custom_object(*QUEUES, theirs)
    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="kai")
    reconcile(lab.cluster)
    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="none")
    result = reconcile(lab.cluster)
    assert len(result.deleted) == 10 + 2 + 4  # queues, shards, priority classes
    assert set(cluster_objects(lab.cluster, *QUEUES)) == {"team-x"}
    assert cluster_objects(lab.cluster, "kai.scheduler", "v1", "schedulingshards") == {}


@pytest.mark.django_db
def test_switching_to_kueue_replaces_the_kai_objects(lab):
    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="kai")
    reconcile(lab.cluster)
    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="kueue")
    with api_client(lab.cluster) as api:
        preview = services.enforcement_preview(cluster=lab.cluster, enforcer="kueue", api_client=api)
    # The KAI queues and shards go; the PriorityClasses stay (the Jobs of both name them).
    assert len(preview.delete) == 10 + 2 and {o["kind"] for o in preview.create} == {
        "WorkloadPriorityClass", "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue"}
    assert {o["kind"] for o in preview.delete} == {"Queue", "SchedulingShard"}
    result = reconcile(lab.cluster)
    assert not result.refused, result.refused
    assert cluster_objects(lab.cluster, *QUEUES) == {}
    queues = cluster_objects(lab.cluster, "kueue.x-k8s.io", "v1beta2", "clusterqueues")
    assert set(queues) == {"rnd-a", "rnd-b", "ops-a"}
    assert queues["rnd-a"]["spec"]["cohortName"] == "rnd"
    flavors = cluster_objects(lab.cluster, "kueue.x-k8s.io", "v1beta2", "resourceflavors")
    assert flavors["a100"]["spec"]["nodeLabels"] == {d.POOL_LABEL: "a100"}


@pytest.mark.django_db
def test_a_write_the_api_server_refuses_is_kept_and_shown_with_its_field(lab, client, users):
    """Kueue allows at most 64 flavors in a resource group: with 65 pools every ClusterQueue is refused
    (422 naming the field); the other objects are still written, and the page says what was refused."""
    from nodepools import services as pool_services

    for i in range(63):
        pool_services.pool_create(actor=None, cluster=lab.cluster, name=f"p{i}", label_key="pool", label_value=f"p{i}")
    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="kueue")
    result = reconcile(lab.cluster)
    assert sorted(r.split(":")[0] for r in result.refused) == [
        "ClusterQueue ops-a", "ClusterQueue rnd-a", "ClusterQueue rnd-b"]
    refused = RefusedWrite.objects.get(kind="ClusterQueue", name="rnd-a")
    assert refused.status == 422
    assert refused.field == "spec.resourceGroups[0].flavors"
    assert refused.owner == "project.rnd-a"
    assert len(cluster_objects(lab.cluster, "kueue.x-k8s.io", "v1beta2", "resourceflavors")) == 65
    client.force_login(users["sysadmin"])
    page = client.get(f"/clusters/{lab.cluster.pk}/enforcement/").content.decode()
    assert "Writes the cluster refused" in page and "ClusterQueue rnd-a" in page
    assert "spec.resourceGroups[0].flavors" in page
    # The quota grid shows it in the project's cells.
    grid = client.get(f"/clusters/{lab.cluster.pk}/quota/").content.decode()
    assert "The cluster refused ClusterQueue rnd-a (spec.resourceGroups[0].flavors)" in grid
    # Back under the limit, the next round writes it and the refusal is gone.
    from nodepools.models import NodePool

    for pool in NodePool.objects.filter(name__in=["p0", "p1"]):
        pool_services.pool_delete(actor=None, pool=pool)
    again = reconcile(lab.cluster)
    assert not again.refused and not RefusedWrite.objects.exists()
    assert set(cluster_objects(lab.cluster, "kueue.x-k8s.io", "v1beta2", "clusterqueues")) == {"rnd-a", "rnd-b", "ops-a"}


@pytest.fixture
def kubectl_env(lab, tmp_path):
    import os
    import shutil
    import subprocess

    binary = shutil.which("kubectl")
    if binary is None:
        if os.environ.get("CONSOLE_REQUIRE_KUBECTL") == "1":
            pytest.fail("CONSOLE_REQUIRE_KUBECTL=1 but kubectl is missing")
        pytest.skip("kubectl is not installed")
    env = {**os.environ, "KUBECONFIG": lab.cluster.kubeconfig_path, "HOME": str(tmp_path)}

    def run(*args):
        proc = subprocess.run([binary, *args], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    return run


@pytest.mark.django_db
def test_what_the_scheduler_reports_is_mirrored_beside_the_consoles_allocation(lab, sim, client, users):
    """KAI's Queue status (here from the emulator's stand-in of KAI's status updater) comes back into the
    console and is shown beside the console's own count; a difference is flagged."""
    from kubesim import make_pod

    from enforcers.models import SchedulerQueue

    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="kai")
    reconcile(lab.cluster)
    mirror(lab, sim)
    # rnd-a runs 4 GPUs on a100-1 (the console counts it); KAI also counts a pod the console cannot see
    # yet (written to the cluster after the console's last mirror).
    pod = make_pod("train", "runai-rnd-a", node="a100-1", priority=50, priority_class="train",
                   labels={"kai.scheduler/queue": "rnd-a.a100"},
                   containers=[{"name": "main", "requests": {"nvidia.com/gpu": "4"}}])
    pod["spec"]["schedulerName"] = "kai-scheduler"
    lab.pods.append(pod)
    # A notebook kube-scheduler placed (no schedulerName): the console counts its GPU, KAI's queue does not.
    bare = make_pod("notebook", "runai-rnd-a", node="a100-2", priority=50, priority_class="train",
                    containers=[{"name": "main", "requests": {"nvidia.com/gpu": "1"}}])
    lab.pods.append(bare)
    mirror(lab, sim)
    sim.add_pod(pod)
    extra = make_pod("extra", "runai-rnd-a", node="a100-2", priority=125, priority_class="inference",
                     labels={"kai.scheduler/queue": "rnd-a.a100"},
                     containers=[{"name": "main", "requests": {"nvidia.com/gpu": "2"}}])
    extra["spec"]["schedulerName"] = "kai-scheduler"
    sim.add_pod(extra)
    # KAI's pod grouper makes their PodGroups; its queue controller sums them.
    sim.kai_pod_grouper_step()
    assert sim.report_queue_status() > 0
    reconcile(lab.cluster)
    row = SchedulerQueue.objects.get(kind="Queue", name="rnd-a.a100")
    assert (row.gpu_allocated, row.gpu_allocated_non_preemptible, row.pool.name, row.owner) == (
        Decimal(6), Decimal(2), "a100", "project.rnd-a")
    parent = SchedulerQueue.objects.get(name="department.rnd.a100")
    assert parent.gpu_allocated == Decimal(6)
    client.force_login(users["sysadmin"])
    page = client.get(f"/clusters/{lab.cluster.pk}/enforcement/").content.decode()
    assert "Queue rnd-a.a100" in page and "differs" in page
    # Each difference says why: the pod kube-scheduler placed (the console counts it, KAI's queue does not),
    # and the pod KAI counts that the console has not mirrored yet.
    from enforcers.selectors import queue_status_rows

    why = next(r for r in queue_status_rows(user=users["sysadmin"], cluster=lab.cluster)
               if r.queue.name == "rnd-a.a100").explanation
    assert why.startswith("1 GPU held by pods that KAI did not schedule (scheduler: default-scheduler): the console "
                          "counts them, KAI does not; 2 GPUs more in the scheduler's count"), why
    assert f"Why they differ: {why}" in page.replace("&#x27;", "'")
    api = client.get(f"/api/v1/clusters/{lab.cluster.pk}/scheduler-queues").json()
    assert {"name": "rnd-a.a100", "gpu_allocated": "6.000"}.items() <= next(
        q for q in api if q["name"] == "rnd-a.a100").items()
    # A researcher of rnd-a sees its own queue, not ops-a's.
    client.force_login(users["researcher"])
    page = client.get(f"/clusters/{lab.cluster.pk}/enforcement/").content.decode()
    assert "Queue rnd-a.a100" in page and "ops-a.a100" not in page


@pytest.mark.django_db(transaction=True)
def test_the_sync_leader_brings_the_cluster_in_step_by_itself(lab, sim):
    """The enforcement round runs as a leader task of the sync: set the enforcer, and within seconds the
    queues exist in the cluster without anyone calling reconcile."""
    import time

    from nodepools.sync import ClusterSync, SyncOptions

    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="kai")
    sync = ClusterSync(lab.cluster, SyncOptions(backoff_base=0.05, backoff_max=0.3, batch_delay=0.02, tick=0.05))
    sync.start()
    try:
        deadline = time.monotonic() + 20
        queues = {}
        while time.monotonic() < deadline and len(queues) < 10:
            sync.step(timeout=0.1)
            queues = cluster_objects(lab.cluster, *QUEUES)
        assert len(queues) == 10
    finally:
        sync.stop()
