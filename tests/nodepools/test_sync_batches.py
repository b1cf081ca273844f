"""How the writer cuts what the informers send into transactions: a full list of many pages in a few big
ones (PostgreSQL: through COPY), a watch event on its own at once."""
from __future__ import annotations

import time

import pytest
from django.db import connection

from nodepools.models import Node, Pod
from nodepools.sync.resources import NODES, PODS
from tests.nodepools.test_sync import Lab, gpu_node, operands, workload

NODE_COUNT, WORKLOADS = 30, 600


def load_many_pages(emu):
    nodes = [gpu_node(f"a100-{i}", labels={"gpu-type": "A100"}) for i in range(NODE_COUNT)]
    pods = [p for i in range(NODE_COUNT) for p in operands(f"a100-{i}")]
    pods += [workload(f"train-{i}", "rnd-a", f"a100-{i % NODE_COUNT}", gpus=1) for i in range(WORKLOADS)]
    emu.load(nodes=nodes, pods=pods)
    return len(pods)


def test_a_full_list_of_many_pages_is_written_in_a_few_transactions_and_a_watch_event_at_once(db, sim, tmp_path):
    # Pages of 20 objects: 2 of nodes and 33 of pods. A watch event would wait 5 s if it were gathered as
    # the list's pages are.
    lab = Lab(sim, tmp_path, page_limit=20, copy_min_rows=100, list_batch_delay=5.0, list_batch_seconds=30.0)
    try:
        pods = load_many_pages(lab.emu)
        lab.start().synced()
        assert Node.objects.count() == NODE_COUNT and Pod.objects.count() == pods
        assert Pod.objects.filter(node__isnull=True).count() == 0
        # Every list (nodes, pods and the kinds the apps register) in one transaction, not one per page.
        assert lab.sync.batches == 1
        if connection.vendor == "postgresql":
            assert lab.sync.mirror.writers[PODS].copies == 1 and lab.sync.mirror.writers[NODES].copies == 0
        assert lab.sync.mirror.stats["lifetimes_written"] == 1  # every pod's lifetime once, at the list's end

        lab.emu.update_pod("runai-rnd-a", "train-7",
                           lambda p: p["metadata"].setdefault("labels", {}).__setitem__("stage", "two"))
        changed = time.monotonic()
        lab.until(lambda: Pod.objects.get(name="train-7").labels.get("stage") == "two", timeout=10)
        assert time.monotonic() - changed < 2.5  # batch_delay (20 ms here), not the list's 5 s
    finally:
        lab.stop()


@pytest.mark.postgres
def test_a_full_list_larger_than_a_transaction_goes_through_copy_in_each(db, sim, tmp_path):
    lab = Lab(sim, tmp_path, page_limit=20, copy_min_rows=100, list_batch_max=300, list_batch_delay=5.0,
              list_batch_seconds=30.0)
    try:
        pods = load_many_pages(lab.emu)
        lab.start().synced()
        assert Pod.objects.count() == pods and Pod.objects.filter(node__isnull=True).count() == 0
        writer = lab.sync.mirror.writers[PODS]
        # About 660 pods at most 300 objects a transaction: 3 or 4 transactions, each of pods through COPY
        # but a last one of fewer than copy_min_rows.
        assert 3 <= lab.sync.batches <= 5
        assert writer.copies >= 2
    finally:
        lab.stop()
