"""The demo: a heterogeneous default pool (V100 16GB and 32GB nodes) with two platforms, and a few workloads
submitted by the demo's logins, listed in the workloads table."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from nodepools.models import Node, NodePool
from workloads.models import Platform, Workload

pytestmark = pytest.mark.django_db


def test_demo_has_a_heterogeneous_pool_with_two_platforms_and_submitted_workloads(api):
    from django.contrib.auth import get_user_model

    call_command("demo", stdout=StringIO())
    pool = NodePool.objects.get(cluster__name="demo", is_default=True)
    assert set(Node.objects.filter(pool=pool).values_list("gpu_product", flat=True)) == {
        "Tesla-V100-SXM2-16GB", "Tesla-V100-SXM2-32GB"}
    platforms = {p.name: p for p in Platform.objects.filter(pool=pool)}
    assert set(platforms) == {"v100-16gb", "v100-32gb"}
    assert pool.workload_settings.default_platform == platforms["v100-16gb"]
    rows = {w.name: w for w in Workload.objects.filter(cluster=pool.cluster, by_console=True)}
    assert set(rows) == {"vision-32gb-train", "vision-finetune", "chat-canary"}
    assert rows["vision-32gb-train"].platform == "v100-32gb" and rows["vision-32gb-train"].gpus == 2
    assert rows["vision-finetune"].pools_tried == ["a100-80gb", "default"]
    assert rows["chat-canary"].priority_class == "inference" and rows["chat-canary"].namespace == "runai-serve-chat"
    # The demo researcher (team-vision) sees its two, not ML-Ops' canary.
    researcher = get_user_model().objects.get(username="researcher")
    listed = {w["name"]: w for w in api(researcher).get("/api/v1/workloads/", {"page_size": 200}).json()["results"]}
    assert {n for n, w in listed.items() if w["by_console"]} == {"vision-32gb-train", "vision-finetune"}
    # and team-vision's own pods the console did not submit (the demo cluster's bare pods), none of ML-Ops'.
    assert {"vision-train-1", "vision-train-pending"} <= set(listed) and "chat-1" not in listed
    # Loading the demo again adds nothing.
    before = Workload.objects.filter(cluster=pool.cluster).count()
    call_command("demo", stdout=StringIO())
    assert Workload.objects.filter(cluster=pool.cluster).count() == before
    assert Workload.objects.filter(cluster=pool.cluster, by_console=True).count() == 3


@pytest.mark.django_db(transaction=True)
def test_run_demo_submits_the_demo_workloads_to_the_emulator_once_synced(tmp_path, emulators):
    """What `make run` does after the sync's first full list: the three Jobs are created in the cluster."""
    from nodepools.demo_cluster import demo_objects
    from nodepools.models import Cluster
    from nodepools.sync import ClusterSync, SyncOptions, api_client_for
    from workloads.demo import demo_submissions

    emu = emulators()
    sync = None
    try:
        nodes, pods = demo_objects()
        emu.load(nodes=nodes, pods=pods)
        call_command("demo", kubeconfig=str(emu.write_kubeconfig(tmp_path / "kubeconfig")), stdout=StringIO())
        cluster = Cluster.objects.get(name="demo")
        assert not Workload.objects.filter(cluster=cluster).exists()  # nothing mirrored before the sync
        sync = ClusterSync(cluster, SyncOptions(backoff_base=0.05, backoff_max=0.3, batch_delay=0.02, tick=0.05))
        sync.start()
        assert sync.run_until(lambda: Cluster.objects.get(pk=cluster.pk).last_full_sync is not None)
        with api_client_for(cluster) as api_client:
            assert demo_submissions(cluster=cluster, api_client=api_client) == [
                "vision-32gb-train", "vision-finetune", "chat-canary"]
        jobs = {j["metadata"]["name"]: j for j in emu.list("jobs.batch")}
        assert set(jobs) == {"vision-32gb-train", "vision-finetune", "chat-canary"}
        # The demo runs KAI: the Jobs name their queue and the scheduler.
        assert jobs["chat-canary"]["metadata"]["labels"]["kai.scheduler/queue"] == "serve-chat.a100-40gb"
        terms = jobs["vision-32gb-train"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-V100-SXM2-32GB"]} in \
            terms[0]["matchExpressions"]
        assert sync.run_until(lambda: Workload.objects.filter(cluster=cluster, kind="Job").count() == 3)
    finally:
        if sync is not None:
            sync.stop()
