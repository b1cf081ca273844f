"""The bulk path of the writer (PostgreSQL: COPY into a staging table, one upsert, links in SQL) and the
resource registrations the informers are generic over."""
from __future__ import annotations

from decimal import Decimal

import pytest

from nodepools.models import Node, NodeStatus, Pod
from nodepools.sync.resources import NODES, PODS, REGISTRY, Resource
from tests.nodepools.test_sync import Lab, load_small_cluster


def test_nodes_and_pods_are_registrations_with_their_api_paths_and_keys():
    assert REGISTRY[NODES].path == "/api/v1/nodes" and not REGISTRY[NODES].namespaced
    assert REGISTRY[PODS].path == "/api/v1/pods" and REGISTRY[PODS].namespaced
    assert REGISTRY[PODS].key({"metadata": {"namespace": "a", "name": "b"}}) == ("a", "b")
    queues = Resource(name="clusterqueues", kind="ClusterQueue", group="kueue.x-k8s.io", version="v1beta1",
                      plural="clusterqueues", namespaced=False, model=None, fields=(), values=lambda obj: ([], None))
    assert queues.path == "/apis/kueue.x-k8s.io/v1beta1/clusterqueues"
    assert queues.key({"metadata": {"name": "cq"}}) == "cq"
    with pytest.raises(TypeError):
        queues.key({"metadata": {"name": ""}})


@pytest.mark.postgres
def test_bulk_upsert_through_copy_gives_the_same_mirror_and_rewrites_nothing_on_relist(db, sim, tmp_path):
    lab = Lab(sim, tmp_path, copy_min_rows=1)  # every batch through COPY
    try:
        load_small_cluster(lab.emu)
        lab.start().synced()
        assert dict(Node.objects.values_list("name", "pool__name")) == {
            "a100-1": "a100", "a100-2": "a100", "v100-1": "default", "cpu-1": "default"}
        assert set(Node.objects.values_list("status", flat=True)) == {NodeStatus.READY}
        train = Pod.objects.get(name="train-1")
        assert (train.node.name, train.project, train.gpus) == ("a100-1", lab.rnd_a, Decimal(2))
        assert Pod.objects.filter(node__isnull=True).count() == 0
        before = dict(Pod.objects.values_list("name", "updated"))
        written = (lab.sync.mirror.stats["pods"], lab.sync.mirror.stats["nodes"])
        first_sync = lab.state().last_full_sync
        lab.emu.compact()
        lab.emu.drop_watches()
        lab.until(lambda: lab.state().last_full_sync != first_sync and lab.sync.mirror.stats["unchanged"] >= 12)
        assert dict(Pod.objects.values_list("name", "updated")) == before
        assert (lab.sync.mirror.stats["pods"], lab.sync.mirror.stats["nodes"]) == written
        # Deleted while the watch was away: the sweep deletes the rows set-wise.
        lab.emu.set_offline(True)
        lab.emu.delete_pod("runai-rnd-a", "train-1")
        lab.emu.compact()
        lab.emu.set_offline(False)
        lab.until(lambda: not Pod.objects.filter(name="train-1").exists())
        assert Pod.objects.count() == 7
    finally:
        lab.stop()


@pytest.mark.postgres
def test_bulk_copy_carries_ephemeral_storage_and_the_schedulers_message(db, sim, tmp_path):
    from tests.nodepools.test_sync import assert_storage_mirrored, load_storage_cluster

    lab = Lab(sim, tmp_path, copy_min_rows=1)  # every batch through COPY
    try:
        load_storage_cluster(lab.emu)
        lab.start().synced()
        assert_storage_mirrored()
    finally:
        lab.stop()
