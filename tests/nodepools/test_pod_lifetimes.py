"""Pods' lifetimes (PodLifetime), kept by the live sync from the list and the watch against the Kubernetes
API emulator over HTTP: what the GPU-hours ledger integrates. A pod that finished or was deleted keeps
its lifetime, to the second."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from nodepools.models import Cluster, Pod, PodLifetime
from tests.nodepools.test_sync import Lab, gpu_node, operands, workload

UTC = dt.timezone.utc


def rfc(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def bound_at(pod: dict, moment: dt.datetime) -> dict:
    for condition in pod["status"]["conditions"]:
        if condition["type"] == "PodScheduled":
            condition["lastTransitionTime"] = rfc(moment)
    return pod


@pytest.fixture
def lab(db, sim, tmp_path):
    lab = Lab(sim, tmp_path, pods_current_every=0.2)
    lab.emu.load(nodes=[gpu_node("a100-1", labels={"gpu-type": "A100"}), gpu_node("v100-1", gpu_product="Tesla-V100-SXM2-16GB")],
                 pods=operands("a100-1") + operands("v100-1"))
    yield lab
    lab.stop()


def lifetime(name) -> PodLifetime | None:
    return PodLifetime.objects.filter(name=name).first()


def test_a_pod_that_ran_seven_minutes_keeps_its_seven_minutes_after_it_finished_and_was_deleted(lab):
    started = dt.datetime.now(UTC).replace(microsecond=0) - dt.timedelta(minutes=30)
    lab.emu.add_pod(bound_at(workload("train-1", "rnd-a", "a100-1", gpus=2), started))
    lab.start().synced()
    life = lifetime("train-1")
    assert (life.started, life.ended, life.gpus, life.gpu_model) == (started, None, Decimal(2), "NVIDIA-A100-SXM4-40GB")
    assert life.pool_id == lab.a100.pk

    finished = started + dt.timedelta(minutes=7)

    def finish(pod):
        pod["status"]["phase"] = "Succeeded"
        for container in pod["status"]["containerStatuses"]:
            container["state"] = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": rfc(started),
                                                 "finishedAt": rfc(finished)}}

    lab.emu.update_pod("runai-rnd-a", "train-1", finish)
    lab.until(lambda: lifetime("train-1").ended is not None)
    life = lifetime("train-1")
    assert (life.ended - life.started, life.end_reason) == (dt.timedelta(minutes=7), "finished")
    lab.emu.delete_pod("runai-rnd-a", "train-1")
    lab.until(lambda: not Pod.objects.filter(name="train-1").exists())
    life = lifetime("train-1")
    assert life.ended - life.started == dt.timedelta(minutes=7)  # the deletion does not move its end


def test_a_deleted_running_pod_ends_when_the_deletion_is_seen(lab):
    started = dt.datetime.now(UTC).replace(microsecond=0) - dt.timedelta(minutes=5)
    lab.emu.add_pod(bound_at(workload("serve-1", "rnd-a", "v100-1", gpus=1, priority=125), started))
    lab.start().synced()
    before = dt.datetime.now(UTC).replace(microsecond=0)
    lab.emu.delete_pod("runai-rnd-a", "serve-1")
    lab.until(lambda: lifetime("serve-1").ended is not None)
    life = lifetime("serve-1")
    after = dt.datetime.now(UTC)
    assert life.end_reason == "deleted" and before <= life.ended <= after
    assert life.changed >= life.recorded  # the ledger learns which closed hours it may have changed


def test_pods_current_at_follows_a_healthy_watch_and_a_pod_gone_while_the_sync_was_down_ends_then(lab):
    lab.emu.add_pod(workload("train-2", "rnd-a", "a100-1", gpus=1))
    lab.start().synced()
    lab.until(lambda: Cluster.objects.get(pk=lab.cluster.pk).pods_current_at is not None)
    # The sync stops (down); meanwhile the pod is deleted and the cluster's history forgets it.
    lab.stop()
    last_seen = Cluster.objects.get(pk=lab.cluster.pk).pods_current_at
    lab.emu.delete_pod("runai-rnd-a", "train-2")
    lab.emu.compact()
    lab.start()
    lab.until(lambda: lifetime("train-2").ended is not None)
    life = lifetime("train-2")
    # Nobody can tell when exactly it went: the last moment the mirror was known complete.
    assert (life.ended, life.end_reason) == (last_seen.replace(microsecond=0), "gone")
    lab.until(lambda: Cluster.objects.get(pk=lab.cluster.pk).pods_current_at > last_seen)


def test_an_unbound_pod_has_no_lifetime_until_it_is_bound(lab):
    lab.emu.add_pod(workload("waits", "rnd-a", None, gpus=1, phase="Pending"))
    lab.start().synced()
    assert lifetime("waits") is None
    lab.emu.update_pod("runai-rnd-a", "waits", lambda p: p["spec"].update(nodeName="a100-1"))
    lab.until(lambda: lifetime("waits") is not None)
    assert lifetime("waits").pool_id == lab.a100.pk
