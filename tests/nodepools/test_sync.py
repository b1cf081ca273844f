"""The live mirror (the nodepools/sync/ package) against the Kubernetes API emulator, over real HTTP.

The writer runs in the test's thread (`ClusterSync.run_until`), the informers in their own threads, so
the test database is only ever touched from one thread. Intervals are shrunk so the suite runs fast.
"""
from __future__ import annotations

import logging
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from audit.models import AuditEvent
from nodepools import services
from kubesim import make_node, make_pod
from nodepools.models import Cluster, ConnectionState, Node, NodePool, NodeStatus, Pod
from nodepools.sync import ClusterSync, SyncOptions
from projects import services as project_services
from projects.models import Quota

FAST = dict(backoff_base=0.05, backoff_max=0.3, read_timeout=5, unreachable_after=0.4, batch_delay=0.02,
            tick=0.05, lock_poll=0.3, watch_timeout_min=30, watch_timeout_max=40, hint_interval=0.05)
OPERANDS = ("nvidia-container-toolkit-daemonset", "nvidia-dcgm-exporter")


def gpu_node(name, **kw):
    kw.setdefault("gpus", 4)
    kw.setdefault("gpu_product", "NVIDIA-A100-SXM4-40GB")
    kw.setdefault("gpu_memory_mib", 40960)
    return make_node(name, **kw)


def operands(node, apps=OPERANDS, ready=True):
    return [make_pod(f"{app}-{node}", "gpu-operator", node=node, labels={"app": app}, ready=ready,
                     containers=[{"name": "main", "requests": {"cpu": "100m", "memory": "128Mi"}}]) for app in apps]


def workload(name, project, node, *, gpus=1, priority=50, phase="Running", **kw):
    requests = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    kw.setdefault("containers", [{"name": "main", "requests": requests}])
    return make_pod(name, f"runai-{project}", node=node, phase=phase, priority=priority, **kw)


class Lab:
    """Cluster `lab` reached through the emulator's kubeconfig; pools default and a100 (gpu-type=A100);
    department rnd with project rnd-a (namespace runai-rnd-a)."""

    def __init__(self, emu, tmp_path, **options):
        self.emu = emu
        kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig")
        self.cluster = services.cluster_create(actor=None, name="lab", kubeconfig_path=str(kubeconfig),
                                               kube_context="emulator")
        self.a100 = services.pool_create(actor=None, cluster=self.cluster, name="a100", label_key="gpu-type",
                                         label_value="A100")
        self.rnd = project_services.department_create(actor=None, cluster=self.cluster, name="rnd")
        self.rnd_a = project_services.project_create(actor=None, department=self.rnd, name="rnd-a")
        self.options = SyncOptions(**{**FAST, **options})
        self.sync: ClusterSync | None = None

    def start(self):
        self.cluster.refresh_from_db()
        self.sync = ClusterSync(self.cluster, self.options)
        self.sync.start()
        return self

    def stop(self):
        if self.sync:
            self.sync.stop()
            self.sync = None

    def until(self, condition, timeout=30):  # an event awaited: long only when the machine is busy
        assert self.sync.run_until(condition, timeout), "the mirror did not reach the expected state in time"

    def synced(self):
        self.until(lambda: Cluster.objects.get(pk=self.cluster.pk).last_full_sync is not None)

    def node(self, name):
        return Node.objects.filter(cluster=self.cluster, name=name).first()

    def state(self):
        return Cluster.objects.get(pk=self.cluster.pk)


@pytest.fixture
def lab(db, sim, tmp_path):
    lab = Lab(sim, tmp_path)
    yield lab
    lab.stop()


def load_small_cluster(emu):
    emu.load(
        nodes=[gpu_node("a100-1", labels={"gpu-type": "A100"}), gpu_node("a100-2", labels={"gpu-type": "A100"}),
               gpu_node("v100-1", gpu_product="Tesla-V100-SXM2-16GB", gpu_memory_mib=16384), make_node("cpu-1")],
        pods=operands("a100-1") + operands("a100-2") + operands("v100-1")
        + [workload("train-1", "rnd-a", "a100-1", gpus=2), workload("serve-1", "rnd-a", "v100-1", gpus=1, priority=125)],
    )


# ------------------------------------------------------------------------------------------- initial sync

def test_initial_sync_mirrors_nodes_pods_gpu_facts_and_pools(lab):
    load_small_cluster(lab.emu)
    lab.start().synced()
    state = lab.state()
    assert state.connection_state == ConnectionState.CONNECTED and state.last_full_sync is not None
    assert dict(Node.objects.values_list("name", "pool__name")) == {
        "a100-1": "a100", "a100-2": "a100", "v100-1": "default", "cpu-1": "default"}
    a100 = lab.node("a100-1")
    assert (a100.gpu_product, a100.gpu_memory_mib, a100.gpu_allocatable, a100.gpu_count_label, a100.gpu_family) == (
        "NVIDIA-A100-SXM4-40GB", 40960, 4, 4, "ampere")
    assert a100.status == NodeStatus.READY and a100.status_reasons == []
    assert not lab.node("cpu-1").is_gpu_node and lab.node("cpu-1").status == NodeStatus.READY
    assert Pod.objects.count() == 8
    train = Pod.objects.get(name="train-1")
    assert (train.node.name, train.project, train.gpus) == ("a100-1", lab.rnd_a, Decimal(2))


def test_list_is_paginated_with_limit_500(lab):
    lab.emu.load(nodes=[make_node("n-1")],
                 pods=[make_pod(f"p-{i:04d}", "batch", node="n-1", containers=[{"name": "c", "requests": {"cpu": "1m"}}])
                       for i in range(1201)])
    lab.start().synced()
    assert Pod.objects.count() == 1201
    assert lab.emu.stats()["list_pages"] >= 3 + 1  # pods in pages of 500, and the nodes


def test_a_second_full_list_writes_nothing_when_nothing_changed(lab):
    load_small_cluster(lab.emu)
    lab.start().synced()
    before = dict(Pod.objects.values_list("name", "updated"))
    written = (lab.sync.mirror.stats["pods"], lab.sync.mirror.stats["nodes"])
    lab.emu.compact()  # the next watch gets 410: relist
    lab.emu.drop_watches()
    first_sync = lab.state().last_full_sync
    # Both resources relist (each informer on its own 410): 4 nodes + 8 pods seen again, none rewritten.
    lab.until(lambda: lab.state().last_full_sync != first_sync and lab.sync.mirror.stats["unchanged"] >= 12)
    assert dict(Pod.objects.values_list("name", "updated")) == before
    assert (lab.sync.mirror.stats["pods"], lab.sync.mirror.stats["nodes"]) == written


# ------------------------------------------------------------------------------------ node status reasons

REASON_CASES = {
    "Disk pressure": lambda emu: emu.set_node_condition("g-1", "DiskPressure", True),
    "Memory pressure": lambda emu: emu.set_node_condition("g-1", "MemoryPressure", True),
    "PID pressure": lambda emu: emu.set_node_condition("g-1", "PIDPressure", True),
    "Network unavailable": lambda emu: emu.set_node_condition("g-1", "NetworkUnavailable", True),
    "Kubelet not ready": lambda emu: emu.set_node_condition("g-1", "Ready", False),
    "Node unreachable": lambda emu: emu.set_node_condition("g-1", "Ready", "Unknown"),
    "Scheduling disabled": lambda emu: emu.cordon("g-1"),
    "Missing NVIDIA container toolkit": lambda emu: emu.delete_pod("gpu-operator", f"{OPERANDS[0]}-g-1"),
    "Missing NVIDIA DCGM exporter": lambda emu: emu.set_pod_phase("gpu-operator", f"{OPERANDS[1]}-g-1", "Running",
                                                                  ready=False),
}


@pytest.mark.parametrize("reason", list(REASON_CASES))
def test_each_not_ready_reason_is_detected_live_and_cleared(lab, reason):
    lab.emu.load(nodes=[gpu_node("g-1")], pods=operands("g-1"))
    lab.start().synced()
    assert lab.node("g-1").status == NodeStatus.READY
    REASON_CASES[reason](lab.emu)
    lab.until(lambda: lab.node("g-1").status_reasons == [reason])
    node = lab.node("g-1")
    assert node.status == NodeStatus.NOT_READY and node.status_text == f"Not ready ({reason})"


def test_operand_disabled_on_purpose_is_not_missing(lab):
    lab.emu.load(nodes=[gpu_node("g-1", labels={"nvidia.com/gpu.deploy.dcgm-exporter": "false"})],
                 pods=operands("g-1", apps=OPERANDS[:1]))
    lab.start().synced()
    assert lab.node("g-1").status == NodeStatus.READY
    lab.emu.set_node_labels("g-1", {"nvidia.com/gpu.deploy.dcgm-exporter": None})
    lab.until(lambda: lab.node("g-1").status_reasons == ["Missing NVIDIA DCGM exporter"])


def test_undrained_migrated_node_until_the_old_pools_pod_ends(lab):
    lab.emu.load(
        nodes=[gpu_node("g-1", labels={"gpu-type": "A100"})],
        pods=operands("g-1") + [workload("serve", "rnd-a", "g-1", priority=125)],
    )
    lab.emu.update_pod("runai-rnd-a", "serve", lambda pod: pod["spec"].update(nodeSelector={"gpu-type": "A100"}))
    lab.start().synced()
    assert lab.node("g-1").status == NodeStatus.READY
    lab.emu.set_node_labels("g-1", {"gpu-type": None})  # moved to the default pool, its pod still runs
    lab.until(lambda: lab.node("g-1").status_reasons == ["Undrained migrated node"])
    assert lab.node("g-1").pool == lab.cluster.default_pool
    lab.emu.set_pod_phase("runai-rnd-a", "serve", "Succeeded")
    lab.until(lambda: lab.node("g-1").status == NodeStatus.READY)


# --------------------------------------------------------------------------------------- pool membership

def test_relabelled_node_changes_pool_and_a_double_match_is_a_conflict(lab):
    load_small_cluster(lab.emu)
    lab.start().synced()
    fast = services.pool_create(actor=None, cluster=lab.cluster, name="fast", label_key="fast", label_value="yes")
    lab.emu.set_node_labels("a100-1", {"fast": "yes"})
    lab.emu.set_node_labels("v100-1", {"fast": "yes"})
    lab.until(lambda: lab.node("v100-1").pool_id == fast.pk and lab.node("a100-1").pool_conflicts)
    a100 = lab.node("a100-1")
    assert a100.pool == lab.a100 and a100.pool_conflicts == ["a100", "fast"]
    lab.emu.set_node_labels("a100-1", {"gpu-type": None})
    lab.until(lambda: lab.node("a100-1").pool_id == fast.pk and lab.node("a100-1").pool_conflicts == [])


def test_pool_created_while_syncing_is_applied_to_the_mirror(lab):
    load_small_cluster(lab.emu)
    lab.start().synced()
    services.pool_delete(actor=None, pool=lab.a100)
    lab.emu.set_node_condition("a100-1", "DiskPressure", True)
    lab.until(lambda: lab.node("a100-1").status_reasons == ["Disk pressure"])
    assert set(Node.objects.values_list("pool__name", flat=True)) == {"default"}


# -------------------------------------------------------------------------------------------- allocation

def test_allocation_counts_effective_requests_of_running_pods_only(lab):
    lab.emu.load(
        nodes=[gpu_node("a100-1", labels={"gpu-type": "A100"}, cpu="96", memory="1Ti")],
        pods=operands("a100-1") + [
            # max(init 4 CPU, app 1+2 CPU) + overhead 250m; memory max(8Gi, 3Gi) + 1Gi
            make_pod("init-heavy", "runai-rnd-a", node="a100-1", priority=50,
                     init_containers=[{"name": "fetch", "requests": {"cpu": "4", "memory": "8Gi"}}],
                     containers=[{"name": "a", "requests": {"cpu": "1", "memory": "1Gi"}},
                                 {"name": "b", "requests": {"cpu": "2", "memory": "2Gi"}}],
                     overhead={"cpu": "250m", "memory": "1Gi"}),
            # a GPU limit without a request counts as the request
            make_pod("limit-only", "runai-rnd-a", node="a100-1", priority=125,
                     containers=[{"name": "main", "limits": {"nvidia.com/gpu": "2"}}]),
            workload("done", "rnd-a", "a100-1", gpus=4, phase="Succeeded"),
            workload("failed", "rnd-a", "a100-1", gpus=4, phase="Failed"),
            workload("waiting", "rnd-a", None, gpus=4, phase="Pending"),
        ],
    )
    lab.start().synced()
    heavy = Pod.objects.get(name="init-heavy")
    assert (heavy.cpu_millis, heavy.memory_bytes) == (4250, 9 * 2**30)
    assert Pod.objects.get(name="limit-only").gpus == Decimal(2)
    pool = NodePool.objects.with_capacity().get(pk=lab.a100.pk)
    assert pool.gpu_allocated == Decimal(2) and pool.workload_count == 2
    assert pool.cpu_allocated_millis == 4250 + 1000 * 0 + 2 * 100  # limit-only requests no CPU; operands 100m each
    project = Quota.objects.with_allocation().get(project=lab.rnd_a, pool=lab.a100)
    department = Quota.objects.with_allocation().get(department=lab.rnd, pool=lab.a100)
    assert project.gpu_allocated == department.gpu_allocated == Decimal(2)
    assert project.gpu_non_preemptible == Decimal(2)  # limit-only runs at priority 125; init-heavy has no GPU
    # The pending pod is scheduled: it starts counting.
    lab.emu.update_pod("runai-rnd-a", "waiting", lambda p: p["spec"].update(nodeName="a100-1"))
    lab.emu.set_pod_phase("runai-rnd-a", "waiting", "Running")
    lab.until(lambda: NodePool.objects.with_capacity().get(pk=lab.a100.pk).gpu_allocated == Decimal(6))


# ------------------------------------------------------------------------------- watch, relist, sweeping

def test_watch_resumes_after_the_stream_ends_without_relisting(lab):
    load_small_cluster(lab.emu)
    lab.start().synced()
    pages = lab.emu.stats()["list_pages"]
    watched = len(lab.sync.informers)  # nodes, pods and every other registered resource (Karpenter's)
    for _ in range(3):
        lab.emu.drop_watches()
        lab.emu.add_pod(workload(f"after-drop-{_}", "rnd-a", "a100-2"))
        lab.until(lambda: Pod.objects.filter(name=f"after-drop-{_}").exists()
                  and lab.emu.stats()["watch_streams_active"] == watched)
    assert lab.emu.stats()["list_pages"] == pages
    assert lab.emu.stats()["watch_streams_opened"] == watched + 3 * watched
    lab.until(lambda: lab.state().connection_state == ConnectionState.CONNECTED)


def test_410_on_watch_relists_and_sweeps_what_was_deleted(lab):
    load_small_cluster(lab.emu)
    lab.start().synced()
    lab.emu.set_offline(True)
    lab.emu.delete_pod("runai-rnd-a", "train-1")
    lab.emu.delete_node("cpu-1")
    lab.emu.add_pod(workload("new-1", "rnd-a", "a100-2"))
    lab.emu.compact()  # the deletions' events are gone: only a relist can see them
    lab.emu.set_offline(False)
    lab.until(lambda: not Pod.objects.filter(name="train-1").exists() and lab.node("cpu-1") is None
              and Pod.objects.filter(name="new-1").exists())
    # Every informer (nodes, pods and the other registered resources) recovers: connected again.
    lab.until(lambda: lab.state().connection_state == ConnectionState.CONNECTED)


def test_expired_continue_in_the_middle_of_a_list_restarts_the_list(sim, tmp_path, db, caplog):
    lab = Lab(sim, tmp_path, page_limit=5, queue_pages=4)
    try:
        lab.emu.load(nodes=[make_node("n-1")],
                     pods=[make_pod(f"p-{i:03d}", "batch", node="n-1") for i in range(100)])
        lab.start()
        # The writer has not taken anything yet, so the pods informer blocks after a few pages.
        import time

        deadline = time.monotonic() + 10
        while not lab.sync.queue.full() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lab.sync.queue.full()
        lab.emu.delete_pod("batch", "p-000")  # already listed: only the restarted list can drop it
        # The log is captured from before the compaction: the informer may meet the 410 at once.
        with caplog.at_level(logging.INFO, logger="nodepools.sync"):
            lab.emu.compact()  # the informer's next continue token is now too old: 410 Expired
            lab.synced()
        assert Pod.objects.count() == 99 and not Pod.objects.filter(name="p-000").exists()
        assert "pods: list continue token expired; relisting" in caplog.text
        assert lab.emu.stats()["list_pages"] > 100 // 5 + 1  # the pods' list started over
    finally:
        lab.stop()


def test_outage_turns_nodes_unknown_deletes_nothing_then_recovers(lab):
    load_small_cluster(lab.emu)
    lab.start().synced()
    lab.emu.set_offline(True)
    lab.until(lambda: lab.state().connection_state == ConnectionState.UNREACHABLE)
    assert set(Node.objects.values_list("status", flat=True)) == {NodeStatus.UNKNOWN}
    assert Node.objects.count() == 4 and Pod.objects.count() == 8
    assert lab.state().last_error
    lab.emu.set_offline(False)
    lab.until(lambda: lab.state().connection_state == ConnectionState.CONNECTED
              and lab.node("a100-1").status == NodeStatus.READY)
    assert Node.objects.count() == 4 and Pod.objects.count() == 8


def test_one_resource_failing_is_degraded_while_the_other_keeps_syncing(lab):
    load_small_cluster(lab.emu)
    lab.start().synced()
    lab.emu.fail_next(8, status=503, path_prefix="/api/v1/pods")
    lab.emu.drop_watches()
    lab.until(lambda: lab.state().connection_state == ConnectionState.DEGRADED)
    lab.emu.cordon("cpu-1")
    lab.emu.add_pod(workload("while-degraded", "rnd-a", "a100-2"))
    lab.until(lambda: lab.node("cpu-1").unschedulable)
    assert lab.node("a100-1").status == NodeStatus.READY  # the API answers: nothing turns Unknown
    lab.until(lambda: lab.state().connection_state == ConnectionState.CONNECTED
              and Pod.objects.filter(name="while-degraded").exists())
    assert "503" in lab.state().last_error


@pytest.mark.parametrize("status", [429, 500, 503])
def test_api_errors_back_off_and_the_sync_recovers(lab, status):
    load_small_cluster(lab.emu)
    lab.emu.fail_next(4, status=status, path_prefix="/api/v1/pods", retry_after=0 if status == 429 else None)
    lab.start().synced()
    assert Pod.objects.count() == 8
    state = lab.state()
    assert state.connection_state == ConnectionState.CONNECTED and str(status) in state.last_error
    assert lab.emu.stats()["faults_injected"] == 4


def test_backoff_grows_from_base_to_cap_with_jitter():
    from nodepools.sync import Backoff

    backoff = Backoff(0.8, 30)
    delays = [backoff.next() for _ in range(10)]
    assert 0.6 <= delays[0] <= 1.0 and 1.2 <= delays[1] <= 2.0
    assert all(24 <= d <= 36 for d in delays[7:])
    backoff.reset()
    assert backoff.next() <= 1.0


def test_malformed_objects_are_logged_by_name_and_skipped(lab, caplog):
    load_small_cluster(lab.emu)
    lab.emu.add_pod(make_pod("bad-quantity", "runai-rnd-a", node="a100-1",
                             containers=[{"name": "main", "requests": {"cpu": "12x"}}]))
    lab.emu.add_node(make_node("bad-node", allocatable={"memory": "lots"}))
    with caplog.at_level(logging.WARNING, logger="nodepools.sync"):
        lab.start().synced()
    assert "runai-rnd-a/bad-quantity" in caplog.text and "bad-node" in caplog.text
    assert Pod.objects.count() == 8 and Node.objects.count() == 4
    # The sync went on: a later valid version is stored.
    lab.emu.update_pod("runai-rnd-a", "bad-quantity",
                       lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="12"))
    lab.until(lambda: Pod.objects.filter(name="bad-quantity", cpu_millis=12000).exists())


# ------------------------------------------------------------------------------------------ moving nodes

@pytest.fixture
def sysadmin(db):
    from django.contrib.auth import get_user_model

    from access.rules import Role

    user = get_user_model().objects.create_user("root", password="pw")
    project_services.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=user)
    return user


def test_moving_a_node_patches_its_label_and_the_watch_brings_it_back(lab, sysadmin):
    load_small_cluster(lab.emu)
    lab.start().synced()
    node = lab.node("v100-1")
    services.node_move_to_pool(actor=sysadmin, node=node, pool=lab.a100)
    assert lab.emu.get_node("v100-1")["metadata"]["labels"]["gpu-type"] == "A100"
    lab.until(lambda: lab.node("v100-1").pool_id == lab.a100.pk)
    event = AuditEvent.objects.get(action=AuditEvent.Action.MOVE)
    assert (event.object_repr, event.after["pool"], event.before["pool"]) == ("v100-1", "a100", "default")
    # Back to default: every other pool's label goes.
    services.node_move_to_pool(actor=sysadmin, node=lab.node("v100-1"), pool=lab.cluster.default_pool)
    assert "gpu-type" not in lab.emu.get_node("v100-1")["metadata"]["labels"]
    lab.until(lambda: lab.node("v100-1").pool_id == lab.cluster.default_pool.pk)


def test_a_refused_patch_names_the_node_and_changes_nothing(lab, sysadmin):
    load_small_cluster(lab.emu)
    lab.start().synced()
    lab.emu.fail_next(1, status=500, path_prefix="/api/v1/nodes/v100-1")
    with pytest.raises(ValidationError) as exc:
        services.node_move_to_pool(actor=sysadmin, node=lab.node("v100-1"), pool=lab.a100)
    message = " ".join(exc.value.message_dict["pool"])
    assert "v100-1" in message and "a100" in message and "500" in message
    assert lab.node("v100-1").pool == lab.cluster.default_pool
    assert "gpu-type" not in lab.emu.get_node("v100-1")["metadata"]["labels"]
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.MOVE).exists()


def test_only_system_administrators_move_nodes(lab):
    from django.contrib.auth import get_user_model

    load_small_cluster(lab.emu)
    lab.start().synced()
    user = get_user_model().objects.create_user("someone", password="pw")
    with pytest.raises(PermissionDenied):
        services.node_move_to_pool(actor=user, node=lab.node("v100-1"), pool=lab.a100)
    assert "gpu-type" not in lab.emu.get_node("v100-1")["metadata"]["labels"]


# ------------------------------------------------------------------------------------------ change hints

class HintListener:
    """A page's end of the channel layer, as a consumer has it: one channel, subscribed to the cluster's
    group, on one event loop of its own (Redis' pub/sub layer keeps channels per event loop, so every call
    must come from the same loop, as in a web process)."""

    def __init__(self, cluster_id: int) -> None:
        import asyncio
        import threading

        from channels.layers import get_channel_layer

        from nodepools import hints

        self.asyncio = asyncio
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        # The in-memory layer is meant for one process and one loop: the sync's hint, put from its own
        # loop's thread, wakes this loop's waiting `receive` without waking the loop itself. A beat every
        # 20 ms lets the loop see it (the Redis layers wake it themselves; the beat costs them nothing).
        self.beat = asyncio.run_coroutine_threadsafe(self._beat(), self.loop)
        self.layer = get_channel_layer()
        self.group = hints.group_name(cluster_id)
        self.channel = self.call(self.layer.new_channel())
        self.call(self.layer.group_add(self.group, self.channel))

    async def _beat(self) -> None:
        while True:
            await self.asyncio.sleep(0.02)

    def call(self, coroutine, timeout: float = 15):
        return self.asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def receive(self) -> dict:
        return self.call(self.layer.receive(self.channel))

    def close(self) -> None:
        self.call(self.layer.group_discard(self.group, self.channel))
        self.beat.cancel()
        self.call(self.asyncio.sleep(0))  # the beat's cancellation runs before the loop stops
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def hint_listener(lab):
    listener = HintListener(lab.cluster.pk)
    yield listener
    listener.close()


def test_a_committed_batch_publishes_a_coalesced_change_hint(lab, hint_listener):
    from nodepools import hints

    load_small_cluster(lab.emu)
    lab.start().synced()
    message = hint_listener.receive()
    assert message["type"] == hints.MESSAGE_TYPE and message["cluster"] == lab.cluster.pk
    assert {"nodes", "pods"} & set(message["kinds"])
    sent = lab.sync.hinter.sent
    for i in range(20):  # a burst of changes: a few hints, not one per event
        lab.emu.add_pod(workload(f"burst-{i}", "rnd-a", "a100-2"))
    lab.until(lambda: Pod.objects.filter(name__startswith="burst-").count() == 20)
    assert 1 <= lab.sync.hinter.sent - sent <= 10


def test_a_change_just_after_a_hint_reaches_the_pages_when_the_interval_ends_not_at_the_writers_next_tick(
        db, sim, tmp_path):
    # Production's coalescing (one hint per 0.3 s) with a writer that would otherwise sleep 2 s between
    # ticks: the change coming right after a hint is still announced about 0.3 s later.
    import time

    lab = Lab(sim, tmp_path, tick=2.0, hint_interval=0.3)
    try:
        load_small_cluster(lab.emu)
        lab.start().synced()
        lab.sync.hinter.flush(force=True)
        lab.sync.hinter.last = time.monotonic()  # a hint has just left
        sent = lab.sync.hinter.sent
        changed = time.monotonic()
        lab.emu.cordon("a100-1")
        while lab.sync.hinter.sent == sent and time.monotonic() - changed < 5:
            lab.sync.step()  # as `run` does: waits up to a tick, or until a waiting hint is due
        took = time.monotonic() - changed
        assert lab.node("a100-1").unschedulable
        assert lab.sync.hinter.sent == sent + 1 and took < 1.0, took
    finally:
        lab.stop()


def test_the_syncs_hint_says_until_when_its_writes_are_committed(lab):
    # A watcher (bench/load.py's open pages) tells by it which change a hint announces.
    load_small_cluster(lab.emu)
    lab.start().synced()
    import time

    listener = HintListener(lab.cluster.pk)
    try:
        lab.emu.cordon("a100-2")
        lab.until(lambda: lab.node("a100-2").unschedulable)
        # The cordon may reach the node in more than one write (the spec, then the taint the cluster adds),
        # each announced by its own hint: hints come until one covers the node's last committed write.
        messages, deadline = [], time.monotonic() + 10
        while time.monotonic() < deadline:
            messages.append(listener.receive())
            committed = lab.node("a100-2").updated.timestamp()
            if messages[-1]["written"] >= committed - 1e-6:
                break
    finally:
        listener.close()
    assert any("nodes" in message["kinds"] for message in messages), messages
    assert messages[-1]["written"] >= committed - 1e-6, (committed, messages)


def test_a_deleted_node_leaves_its_pods_unbound_not_an_error(lab):
    load_small_cluster(lab.emu)
    lab.start().synced()
    lab.emu.delete_node("v100-1")  # its pods (serve-1, operands) stay until the cluster removes them
    lab.until(lambda: lab.node("v100-1") is None)
    assert Pod.objects.get(name="serve-1").node is None
    assert Pod.objects.get(name="serve-1").node_name == "v100-1"


# ------------------------------------------------------------------- ephemeral storage, scheduler's words

UNSCHEDULABLE = ("0/4 nodes are available: 1 Insufficient ephemeral-storage, 3 node(s) didn't match Pod's node "
                 "affinity/selector. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.")


def load_storage_cluster(emu):
    """A node with 1 TiB of ephemeral storage (944 GiB allocatable), a pod asking for storage in an init
    container, two app containers and its overhead, and a pod the scheduler could not place."""
    emu.load(
        nodes=[gpu_node("a100-1", labels={"gpu-type": "A100"},
                        allocatable={"ephemeral-storage": "944Gi"})],
        pods=operands("a100-1") + [
            make_pod("scratch", "runai-rnd-a", node="a100-1",
                     init_containers=[{"name": "fetch", "requests": {"ephemeral-storage": "100Gi"}}],
                     containers=[{"name": "a", "requests": {"cpu": "1", "ephemeral-storage": "20Gi"}},
                                 {"name": "b", "limits": {"ephemeral-storage": "30Gi"}}],
                     overhead={"ephemeral-storage": "1Gi"}),
            make_pod("stuck", "runai-rnd-a", phase="Pending", scheduling_message=UNSCHEDULABLE,
                     containers=[{"name": "main", "requests": {"ephemeral-storage": "2Ti"}}]),
        ],
    )


def assert_storage_mirrored():
    node = Node.objects.get(name="a100-1")
    assert (node.storage_capacity_bytes, node.storage_allocatable_bytes) == (1073741824 * 1024, 944 * 2**30)
    scratch = Pod.objects.get(name="scratch")
    # max(init 100Gi, app 20Gi + 30Gi limit-as-request) + 1Gi overhead, as CPU and memory are computed
    assert (scratch.storage_bytes, scratch.scheduling_message) == (101 * 2**30, "")
    stuck = Pod.objects.get(name="stuck")
    assert (stuck.storage_bytes, stuck.scheduling_message) == (2 * 2**40, UNSCHEDULABLE)


def test_ephemeral_storage_and_the_schedulers_message_are_mirrored_and_follow_the_cluster(lab):
    load_storage_cluster(lab.emu)
    lab.start().synced()
    assert_storage_mirrored()
    # The scheduler places the pod: its PodScheduled condition turns True, the message goes.
    def place(pod):
        pod["spec"]["nodeName"] = "a100-1"
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]

    lab.emu.update_pod("runai-rnd-a", "stuck", place)
    lab.until(lambda: Pod.objects.get(name="stuck").scheduling_message == "")
    # The kubelet reserves more for the system: allocatable storage follows.
    lab.emu.update_node("a100-1", lambda n: n["status"]["allocatable"].update({"ephemeral-storage": "900Gi"}))
    lab.until(lambda: Node.objects.get(name="a100-1").storage_allocatable_bytes == 900 * 2**30)


# ---------------------------------------------------------------------------------- the sync's own metrics

def scrape(url: str) -> dict[tuple[str, str, str], float]:
    """The sync's /metrics over HTTP, parsed by prometheus-client: {(sample, cluster, kind): value}."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    return {(sample.name, sample.labels.get("cluster", ""), sample.labels.get("kind", "")): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_a_running_sync_reports_its_lag_restarts_rows_and_relists_on_its_metrics_port(lab):
    import time

    from common import metrics

    server = metrics.start_sync_server(0, addr="127.0.0.1")
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        # Counters only grow and other tests sync a cluster named `lab` too: compare with before.
        before = scrape(url)

        def grew(after, name, kind):
            return after.get((name, "lab", kind), 0.0) - before.get((name, "lab", kind), 0.0)

        load_small_cluster(lab.emu)
        lab.start().synced()
        after = scrape(url)
        assert grew(after, "console_sync_relists_total", "nodes") == 1
        assert grew(after, "console_sync_relists_total", "pods") == 1
        assert grew(after, "console_sync_rows_written_total", "nodes") == 4
        assert grew(after, "console_sync_rows_written_total", "pods") == 8

        # A change in the cluster: the database trails the watch stream by a measured, small time.
        lab.emu.add_pod(workload("new-1", "rnd-a", "a100-2"))
        lab.until(lambda: Pod.objects.filter(name="new-1").exists())
        after = scrape(url)
        assert grew(after, "console_sync_rows_written_total", "pods") == 9
        assert 0 < after[("console_sync_lag_seconds", "lab", "pods")] < 5
        assert 0 <= time.time() - after[("console_sync_last_event_timestamp_seconds", "lab", "pods")] < 5

        # The emulator drops every watch: each is resumed, counted as a restart, without a relist.
        lab.emu.drop_watches()
        lab.emu.add_pod(workload("after-drop", "rnd-a", "a100-2"))
        lab.until(lambda: Pod.objects.filter(name="after-drop").exists())
        lab.until(lambda: grew(scrape(url), "console_sync_watch_restarts_total", "nodes") >= 1)
        after = scrape(url)
        assert grew(after, "console_sync_watch_restarts_total", "pods") >= 1
        assert grew(after, "console_sync_relists_total", "pods") == 1

        # History compacted: the resumed watches meet 410 Gone, restart and relist.
        restarts = grew(after, "console_sync_watch_restarts_total", "pods")
        lab.emu.compact()
        lab.emu.drop_watches()
        lab.until(lambda: grew(scrape(url), "console_sync_relists_total", "pods") == 2
                  and grew(scrape(url), "console_sync_relists_total", "nodes") == 2)
        after = scrape(url)
        assert grew(after, "console_sync_watch_restarts_total", "pods") >= restarts + 2  # ended, then 410
        assert grew(after, "console_sync_rows_written_total", "pods") == 10  # the relist rewrote nothing
    finally:
        server.shutdown()
