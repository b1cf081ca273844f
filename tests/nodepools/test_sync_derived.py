"""Derived node state (pool membership, status, not-ready reasons) computed set-wise in SQL on the bulk
path (PostgreSQL) equals the Python rules of nodepools/sync/derived.py, over a varied fleet driven
through the sync against the emulator.

Modes: `sql` derives every batch in SQL (copy_min_rows=1); `mixed` derives full lists in SQL and single
watch events in Python (the dirty set), as production does; `python` never derives in SQL (any database),
which checks the expectations themselves.
"""
from __future__ import annotations

import pytest

from kubesim import make_node, make_pod
from nodepools import services
from nodepools.models import ConnectionState, Node, NodeStatus
from nodepools.sync.derived import derive_from_database
from tests.nodepools.test_sync import OPERANDS, Lab, gpu_node, operands, workload

TOOLKIT, DCGM = "Missing NVIDIA container toolkit", "Missing NVIDIA DCGM exporter"
MODES = {"sql": 1, "mixed": 12, "python": 10**9}


def selecting(pod, selector):
    pod["spec"]["nodeSelector"] = selector
    return pod


def load_fleet(emu):
    """Pools of the lab: default, a100 (gpu-type=A100); the test adds fast (fast=yes) and spot
    (capacity=spot) before the first sync."""
    nodes = [
        gpu_node("a100-1", labels={"gpu-type": "A100", "fast": "yes"}),  # a conflict: a100 wins, fast listed
        gpu_node("a100-2", labels={"gpu-type": "A100"}, conditions={"DiskPressure": True}),
        make_node("fast-1", labels={"fast": "yes"}, unschedulable=True),  # CPU node, cordoned
        gpu_node("v100-1"),  # default pool, only the DCGM exporter runs: toolkit missing
        gpu_node("v100-2", conditions={"MemoryPressure": True}),  # DCGM exporter not ready
        gpu_node("g-3", labels={"nvidia.com/gpu.deploy.dcgm-exporter": "false"}),  # DCGM off on purpose
        gpu_node("g-4", conditions={"Ready": False, "PIDPressure": True, "NetworkUnavailable": True}),
        gpu_node("g-5", ready="Unknown"),
        gpu_node("migrated"),  # in default, still runs a pod selecting gpu-type=A100
        make_node("spot-1", labels={"capacity": "spot"}),
        make_node("cpu-1"),
    ]
    pods = (operands("a100-1") + operands("a100-2") + operands("v100-1", apps=OPERANDS[1:])
            + operands("v100-2", apps=OPERANDS[:1]) + operands("v100-2", apps=OPERANDS[1:], ready=False)
            + operands("g-3", apps=OPERANDS[:1]) + operands("g-4", apps=OPERANDS[1:]) + operands("g-5") + operands("migrated"))
    pods += [
        # a100-1 is in a100; a pod there selecting fast (the other pool it matches) is left behind too
        selecting(workload("on-conflict", "rnd-a", "a100-1"), {"fast": "yes"}),
        selecting(workload("serve", "rnd-a", "migrated", priority=125), {"gpu-type": "A100"}),
        selecting(workload("done", "rnd-a", "cpu-1", gpus=0, phase="Succeeded"), {"gpu-type": "A100"}),  # finished
        selecting(workload("waiting", "rnd-a", None, phase="Pending"), {"gpu-type": "A100"}),  # not bound
        selecting(workload("zonal", "rnd-a", "cpu-1", gpus=0), {"topology.kubernetes.io/zone": "a"}),  # no pool
        selecting(workload("on-spot", "rnd-a", "spot-1", gpus=0), {"capacity": "spot"}),  # in its pool
        make_pod(f"{OPERANDS[0]}-old", "gpu-operator", node="g-4", labels={"app": OPERANDS[0]}, phase="Failed"),
    ]
    emu.load(nodes=nodes, pods=pods)


def stored(lab) -> dict[str, tuple]:
    return {name: (pool, conflicts, status, reasons) for name, pool, conflicts, status, reasons in
            Node.objects.filter(cluster=lab.cluster).values_list("name", "pool_id", "pool_conflicts", "status",
                                                                 "status_reasons")}


def assert_same_as_python(lab):
    """What the database holds = the Python rules over the stored rows = the mirror's Python rules."""
    rows = stored(lab)
    assert rows == derive_from_database(lab.cluster.pk)
    mirror = lab.sync.mirror
    assert rows == {name: mirror.derived.derive(name, facts) for name, facts in mirror.derived.nodes.items()}
    # The mirror's memory of what is stored matches the database (later events compare against it).
    assert rows == {name: facts.derived() for name, facts in mirror.derived.nodes.items()}
    return rows


@pytest.fixture(params=list(MODES))
def mode(request, db):
    from django.db import connection

    if request.param != "python" and connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: run with DATABASE_URL=postgres://postgres@127.0.0.1:5432/console")
    return request.param


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["sql", "mixed"], indirect=True)
def test_sql_derivation_equals_python_over_a_varied_fleet(sim, tmp_path, mode):
    run_fleet_scenario(sim, tmp_path, mode)


@pytest.mark.parametrize("mode", ["python"], indirect=True)
def test_python_derivation_over_the_same_fleet(sim, tmp_path, mode):
    run_fleet_scenario(sim, tmp_path, mode)


def run_fleet_scenario(sim, tmp_path, mode):
    lab = Lab(sim, tmp_path, copy_min_rows=MODES[mode])
    try:
        fast = services.pool_create(actor=None, cluster=lab.cluster, name="fast", label_key="fast", label_value="yes")
        spot = services.pool_create(actor=None, cluster=lab.cluster, name="spot", label_key="capacity",
                                    label_value="spot")
        default = lab.cluster.default_pool
        load_fleet(lab.emu)
        lab.start().synced()
        rows = assert_same_as_python(lab)
        ready, not_ready = str(NodeStatus.READY), str(NodeStatus.NOT_READY)
        assert rows == {
            "a100-1": (lab.a100.pk, ["a100", "fast"], not_ready, ["Undrained migrated node"]),
            "a100-2": (lab.a100.pk, [], not_ready, ["Disk pressure"]),
            "fast-1": (fast.pk, [], not_ready, ["Scheduling disabled"]),
            "v100-1": (default.pk, [], not_ready, [TOOLKIT]),
            "v100-2": (default.pk, [], not_ready, ["Memory pressure", DCGM]),
            "g-3": (default.pk, [], ready, []),
            "g-4": (default.pk, [], not_ready, ["Kubelet not ready", "Network unavailable", "PID pressure", TOOLKIT]),
            "g-5": (default.pk, [], not_ready, ["Node unreachable"]),
            "migrated": (default.pk, [], not_ready, ["Undrained migrated node"]),
            "spot-1": (spot.pk, [], ready, []),
            "cpu-1": (default.pk, [], ready, []),
        }
        stats = lab.sync.mirror.stats
        if mode == "python":
            assert stats["derived_in_sql"] == 0
        else:
            assert stats["derived_in_sql"] >= 1  # the full list was derived in SQL

        # Watch events: a DCGM exporter turns ready, a node is uncordoned, another cordoned, the
        # migrated node's pod ends, a node joins the A100 pool.
        lab.emu.set_pod_phase("gpu-operator", f"{OPERANDS[1]}-v100-2", "Running", ready=True)
        lab.emu.cordon("fast-1", False)
        lab.emu.cordon("cpu-1")
        lab.emu.set_pod_phase("runai-rnd-a", "serve", "Succeeded")
        lab.emu.set_node_labels("v100-1", {"gpu-type": "A100"})
        lab.until(lambda: stored(lab)["v100-1"][0] == lab.a100.pk and stored(lab)["fast-1"][2] == ready
                  and stored(lab)["cpu-1"][3] == ["Scheduling disabled"] and stored(lab)["migrated"][2] == ready
                  and stored(lab)["v100-2"][3] == ["Memory pressure"])
        assert_same_as_python(lab)
        if mode == "mixed":
            assert stats["derived_in_python"] >= 1  # small batches took the Python path

        # A pool's label changes (spot now selects capacity=preemptible): spot-1 falls to default and its
        # pod still selecting capacity=spot no longer names a pool; then the pod selects the new label.
        services.pool_update(actor=None, pool=spot, label_value="preemptible")
        lab.emu.set_node_labels("cpu-1", {"touched": "1"})  # any event: the mirror notices the pools
        lab.until(lambda: stored(lab)["spot-1"][0] == default.pk)
        assert stored(lab)["spot-1"][2:] == (ready, [])
        lab.emu.update_pod("runai-rnd-a", "on-spot", lambda p: p["spec"].update(nodeSelector={"capacity": "preemptible"}))
        lab.until(lambda: stored(lab)["spot-1"][3] == ["Undrained migrated node"])
        assert_same_as_python(lab)

        # A pool is deleted: a100-1 is no longer a conflict, fast-1 goes to default.
        services.pool_delete(actor=None, pool=fast)
        lab.emu.set_node_labels("cpu-1", {"touched": "2"})
        lab.until(lambda: stored(lab)["fast-1"][0] == default.pk and stored(lab)["a100-1"][1] == [])
        rows = assert_same_as_python(lab)
        assert rows["a100-1"] == (lab.a100.pk, [], ready, [])  # the pod selecting fast=yes names no pool now

        # Unreachable: every node Unknown, reasons kept; then back.
        lab.emu.set_offline(True)
        lab.until(lambda: lab.state().connection_state == ConnectionState.UNREACHABLE
                  and set(Node.objects.values_list("status", flat=True)) == {NodeStatus.UNKNOWN})
        rows = assert_same_as_python(lab)
        assert rows["g-4"][3] == ["Kubelet not ready", "Network unavailable", "PID pressure", TOOLKIT]
        lab.emu.set_offline(False)
        lab.until(lambda: lab.state().connection_state == ConnectionState.CONNECTED
                  and lab.node("g-3").status == NodeStatus.READY)
        assert_same_as_python(lab)

        # A relist after 410 with changes made while the watch was away: operand pods gone, a node
        # relabelled into two pools, a condition cleared; nothing else is rewritten.
        before = dict(Node.objects.values_list("name", "updated"))
        sync_at = lab.state().last_full_sync
        lab.emu.set_offline(True, mode="reset")
        lab.emu.delete_pod("gpu-operator", f"{OPERANDS[0]}-a100-2")
        lab.emu.set_node_labels("g-3", {"gpu-type": "A100", "capacity": "preemptible"})
        lab.emu.set_node_condition("a100-2", "DiskPressure", False)
        lab.emu.compact()
        lab.emu.set_offline(False)
        lab.until(lambda: lab.state().last_full_sync != sync_at and stored(lab)["g-3"][0] == lab.a100.pk
                  and stored(lab)["a100-2"][3] == [TOOLKIT])
        rows = assert_same_as_python(lab)
        assert rows["g-3"] == (lab.a100.pk, ["a100", "spot"], ready, [])
        rewritten = {name for name, updated in Node.objects.values_list("name", "updated") if before[name] != updated}
        assert rewritten == {"a100-2", "g-3"}
    finally:
        lab.stop()


@pytest.mark.postgres
def test_a_relist_derives_in_sql_and_rewrites_no_node_whose_state_did_not_change(sim, tmp_path, db):
    lab = Lab(sim, tmp_path, copy_min_rows=1)
    try:
        load_fleet(lab.emu)
        lab.start().synced()
        before = dict(Node.objects.values_list("name", "updated"))
        derived_before, written = lab.sync.mirror.stats["derived_in_sql"], lab.sync.mirror.stats["nodes"]
        sync_at = lab.state().last_full_sync
        lab.emu.set_offline(True, mode="reset")
        lab.emu.update_pod("runai-rnd-a", "serve", lambda p: p["metadata"].setdefault("labels", {}).update(touched="yes"))
        lab.emu.compact()
        lab.emu.set_offline(False)
        # The relist ends and the changed pod's node is derived in SQL: wait for both (on a loaded CI
        # machine the new full sync's time was once read before the derivation's count moved).
        lab.until(lambda: lab.state().last_full_sync != sync_at
                  and lab.sync.mirror.stats["derived_in_sql"] > derived_before)
        assert dict(Node.objects.values_list("name", "updated")) == before  # ... and no node rewritten
        assert lab.sync.mirror.stats["nodes"] == written
        assert_same_as_python(lab)
    finally:
        lab.stop()


@pytest.mark.postgres
def test_a_full_list_in_many_batches_is_derived_in_sql_once_it_is_complete(sim, tmp_path, db):
    # Pages of 4 objects, each its own batch: no node is judged on part of its pods (its operand pods
    # may come on a later page), and the set-wise derivation runs at the list's end, not per batch.
    lab = Lab(sim, tmp_path, copy_min_rows=1, page_limit=4, queue_pages=1, batch_delay=0, list_batch_delay=0)
    try:
        load_fleet(lab.emu)
        lab.start().synced()
        assert lab.sync.batches >= 3
        # Once at the end (twice if the nodes' list ended before the first page of pods came).
        assert lab.sync.mirror.stats["derived_in_sql"] in (1, 2)
        rows = assert_same_as_python(lab)
        assert rows["a100-2"][3] == ["Disk pressure"] and rows["g-3"][2] == str(NodeStatus.READY)
    finally:
        lab.stop()
