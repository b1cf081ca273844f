"""The demo tells the story (issue 21, point 5): `make run`'s cluster (nodepools.demo_cluster) in the emulator
on a manual clock, the demo organisation with KAI enforcement (`manage.py demo --kubeconfig`), and the demo's
driver (`workloads.demo.DemoStory`, what `run_demo` runs in a thread) submitting through the console's own
submission service as the demo's researchers. Within ten minutes a newcomer sees workloads Running in their
pools, Pending with the scheduler's reasons, Succeeded, and an over-quota workload reclaimed when the in-quota
work of its pool's owners arrives; switching the cluster to Kueue keeps the story going."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command

from kubesim import KubeEmulator, ManualClock
from nodepools.demo_cluster import demo_karpenter_nodepools, demo_objects
from nodepools.models import Cluster
from nodepools.sync import api_client_for
from tests.workloads.mirroring import mirror

pytestmark = pytest.mark.django_db(transaction=True)


class Demo:
    def __init__(self, emu: KubeEmulator, cluster: Cluster) -> None:
        from workloads.demo import DemoStory

        self.emu, self.cluster = emu, cluster
        self.story = DemoStory(cluster=cluster)
        self.elapsed = 0

    def enforce(self) -> None:
        """What the sync's leader does every 5 seconds (queues, pool labels), from what the sync mirrored."""
        from enforcers.services import enforcement_round

        mirror(self.cluster, self.emu)
        with api_client_for(self.cluster) as api_client:
            result = enforcement_round(self.cluster, api_client)
        assert result is not None and not result.refused, result
        mirror(self.cluster, self.emu)

    def run_until(self, seconds: int, every: int = 5) -> None:
        """The story's thread every `every` seconds, the emulator's controllers in between."""
        with api_client_for(self.cluster) as api_client:
            while self.elapsed < seconds:
                self.story.step(self.emu.clock.now(), api_client)
                assert not self.story.log, self.story.log
                for _ in range(every):
                    self.emu.clock.advance(1)
                    self.emu.tick()
                self.elapsed += every
        mirror(self.cluster, self.emu)

    def rows(self) -> dict[str, dict]:
        from rest_framework.test import APIClient
        from django.contrib.auth import get_user_model

        api = APIClient()
        api.force_login(get_user_model().objects.get(username="admin"))
        answer = api.get("/api/v1/workloads/", {"page_size": 200})
        assert answer.status_code == 200, answer.content
        return {row["name"]: row for row in answer.json()["results"]}


@pytest.fixture
def demo(tmp_path, emulators):
    from workloads.demo import demo_submissions

    emu = emulators(clock=ManualClock(), controllers=True, bookmark_interval=0.2)
    nodes, pods = demo_objects()
    emu.load(nodes, pods, objects={"nodepools.karpenter.sh": demo_karpenter_nodepools()})
    kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig")
    call_command("demo", kubeconfig=str(kubeconfig), stdout=open("/dev/null", "w"))
    cluster = Cluster.objects.get(name="demo")
    for namespace in {p["metadata"]["namespace"] for p in pods} | {f"runai-{p.name}" for p in cluster.projects.all()}:
        emu.add_namespace(namespace)
    lab = Demo(emu, cluster)
    lab.enforce()
    with api_client_for(cluster) as api_client:  # what run_demo submits first (three long-running workloads)
        demo_submissions(cluster=cluster, api_client=api_client)
    return lab


def test_within_minutes_the_demo_shows_running_pending_succeeded_and_a_reclaimed_workload(demo):
    demo.run_until(240)
    rows = demo.rows()
    # Submitted through the console, as the demo's researchers.
    assert rows["scoring-a"]["submitted_by"] == "batch-scoring-researcher"
    assert rows["vision-8gpu"]["submitted_by"] == "researcher"
    # Running in their pools.
    assert (rows["scoring-a"]["phase"], rows["scoring-a"]["placed_pool"]) == ("Running", "a100-40gb")
    assert (rows["vision-serve"]["phase"], rows["vision-serve"]["placed_pool"]) == ("Running", "a100-40gb")
    assert (rows["nlp-eval"]["phase"], rows["nlp-eval"]["placed_pool"]) == ("Running", "default")
    # Succeeded: short jobs ran their time.
    assert rows["speech-prep"]["phase"] == "Succeeded"
    # Pending with the scheduler's reasons, and the console's answer beside them.
    assert rows["vision-8gpu"]["phase"] == "Pending"
    assert rows["vision-8gpu"]["scheduler_reason"]["category"] == "capacity"
    assert rows["vision-8gpu"]["why_waiting"]["code"] == "no_node_fits"
    # One answer, the hardest fact first: no node of a100-40gb has 8 GPUs (it never fits), then KAI's quota
    # words, whose figures the console does not contradict (KAI's queue holds none of search-1's 4 GPUs:
    # kube-scheduler placed that pod).
    search = rows["search-8gpu"]
    assert search["scheduler_reason"]["reason"] == "NonPreemptibleOverQuota"
    assert "0 GPUs are already allocated for non-preemptible pods" in search["scheduler_reason"]["message"]
    assert search["why_waiting"]["code"] == "no_node_fits"
    assert search["pending_reason"].startswith(
        "Never fits: no node of a100-40gb has 8 GPUs (the largest Ready node has 4); this asks 8 on one node. "
        "KAI Scheduler: NonPreemptibleOverQuota: Non-preemptible workload is over quota."), search["pending_reason"]
    assert "4 non-preemptible" not in search["pending_reason"]
    # batch-scoring borrowed ML-Ops' idle A100s; serve-vision's in-quota inference took some back.
    reclaimed = [r for n, r in rows.items() if n.startswith("scoring-") and r["by_console"] and r["preempted_by"]]
    assert reclaimed, {n: (r["phase"], r["preempted_by"]) for n, r in rows.items() if n.startswith("scoring-")}
    by_vision = [r for r in reclaimed if r["preempted_by"]["by"] == "runai-serve-vision/vision-serve"]
    assert by_vision, [(r["name"], r["phase"], r["preempted_by"]["by"]) for r in reclaimed]
    assert by_vision[0]["preempted_by"]["action"] == "reclaim" and by_vision[0]["phase"] == "Pending"
    last = rows["scoring-f"]["queue_position"]  # the newest waits behind the reclaimed ones, in KAI's order
    assert rows["scoring-f"]["phase"] == "Pending" and last["position"] == last["of"] >= 2

    # The usage the charts and the idle GPUs read follows: the mirrored pods of the story hold GPUs.
    from nodepools.models import Pod

    held = sum((p.gpus for p in Pod.objects.filter(cluster=demo.cluster, namespace="runai-batch-scoring",
                                                   phase="Running", labels__has_key="batch.kubernetes.io/job-name")),
               Decimal(0))
    running = [n for n, r in rows.items() if n.startswith("scoring-") and r["by_console"] and r["phase"] == "Running"]
    assert held == 2 * len(running) >= 6

    # Every GPU user is a workload: the demo's bare pods (kube-scheduler placed them) are rows too, marked so,
    # and team-vision's workloads add up to its allocated GPUs.
    pending = rows["vision-train-pending"]
    assert (pending["kind"], pending["by_console"], pending["scheduler_name"]) == (
        "Pod", False, "default-scheduler")
    assert rows["search-1"]["kind"] == "Pod" and rows["scoring-a"]["by_console"] is True
    from projects.models import Project
    from projects.selectors import project_summary
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.get(username="admin")
    vision = Project.objects.get(cluster=demo.cluster, name="team-vision")
    allocated = sum((Decimal(line.allocated or 0) for _, line in project_summary(user=admin, project=vision)),
                    Decimal(0))
    in_rows = sum((Decimal(r["gpus_held"]) for r in rows.values()
                   if r["project"] == "team-vision" and r["phase"] == "Running"), Decimal(0))
    assert allocated == in_rows and allocated > 20, (allocated, in_rows)
    # The enforcement page says why KAI's count and the console's differ: pods KAI did not schedule.
    from enforcers.selectors import queue_status_rows

    demo.emu.report_queue_status()  # KAI's queue controller sums its PodGroups; the sync's leader reads it back
    demo.enforce()

    why = {r.queue.name: r.explanation for r in queue_status_rows(user=admin, cluster=demo.cluster) if r.differs}
    assert why and all("(scheduler: default-scheduler)" in text or "count" in text for text in why.values()), why
    assert any("held by pods that KAI did not schedule (scheduler: default-scheduler)" in t for t in why.values())

    # Later the reclaimed job runs again and the first ones are done.
    demo.run_until(600)
    rows = demo.rows()
    assert rows[by_vision[0]["name"]]["phase"] in ("Running", "Succeeded")
    if rows[by_vision[0]["name"]]["phase"] == "Running":  # it says so, and since when
        assert "; running again since " in rows[by_vision[0]["name"]]["preempted_by"]["text"]
    assert rows["scoring-a"]["phase"] == "Succeeded" and rows["robotics-sim"]["phase"] == "Succeeded"
    # The story goes on in its next cycle.
    demo.run_until(615)
    assert "scoring-a-2" in demo.rows()


def test_switching_the_demo_cluster_to_kueue_keeps_the_story_going(demo):
    from enforcers.services import enforcement_set

    demo.run_until(120)
    # The enforcement page's choice: Kueue from now on (the sync's leader brings the cluster in step).
    enforcement_set(actor=None, cluster=demo.cluster, enforcer="kueue")
    demo.enforce()
    demo.run_until(460)
    rows = demo.rows()
    # Submitted before the switch: KAI's; after it: queued by Kueue (a LocalQueue each), admitted and run.
    assert rows["scoring-a"]["scheduler_name"] == "kai-scheduler"
    for name in ("chat-probe", "nlp-finetune", "speech-train"):
        row = rows[name]
        assert row["scheduler_name"] == "" and row["queue"], row
        assert row["phase"] in ("Running", "Succeeded"), (name, row["phase"], row["pending_reason"])
    from workloads.models import KueueWorkload

    assert KueueWorkload.objects.filter(job_name="nlp-finetune", admitted=True).exists()
    # The next cycle under Kueue leaves out the story's GPU fraction (KAI's sharing) instead of a refusal:
    # run_until asserts the story logged nothing.
    demo.run_until(660)
    rows = demo.rows()
    # (the demo cluster's bare pod vision-frac-2, a fraction KAI placed before, is a row of its own: not the story's)
    assert "scoring-a-2" in rows and rows.get("vision-frac-2", {}).get("kind") != "Job"


def test_within_two_minutes_the_demo_runs_slices_fractions_and_replicas_of_shared_gpus(demo):
    """Issue 30, point 8: a 1g.10gb notebook and a 3g.40gb service on MIG slices, two gpu-fraction 0.5 pods
    that KAI puts on one A10G beside its reservation pod, a build on replicas of the time-sliced L4s."""
    from kube import gpu as kube_gpu
    from nodepools.models import Pod

    demo.run_until(120)
    rows = demo.rows()
    for name, pool in (("robotics-notebook", "a100-mig"), ("chat-mig-serve", "a100-mig"), ("vision-frac", "a10g"),
                       ("speech-replicas", "l4-shared")):
        assert (rows[name]["phase"], rows[name]["placed_pool"]) == ("Running", pool), (name, rows[name])
    pods = {p.name: p for p in Pod.objects.filter(cluster=demo.cluster, phase="Running",
                                                  labels__has_key="batch.kubernetes.io/job-name")}
    notebook = next(p for n, p in pods.items() if n.startswith("robotics-notebook"))
    # One slice of 7 of an A100: 1/7 of a GPU-equivalent (stored to three decimals).
    assert (notebook.gpu_unit, notebook.gpu_units, notebook.gpus) == ("1g.10gb", 1, Decimal("0.143"))
    serve = next(p for n, p in pods.items() if n.startswith("chat-mig-serve"))
    assert serve.gpu_unit == "3g.40gb" and serve.gpu_units == 1
    fractions = [p for n, p in pods.items() if n.startswith("vision-frac")]
    assert len(fractions) == 2 and {p.gpus for p in fractions} == {Decimal("0.5")}
    assert {p.gpu_unit for p in fractions} == {kube_gpu.UNIT_FRACTION}
    # KAI put both halves on one GPU, held whole by one reservation pod of their group, on their node.
    groups = {p.labels.get(kube_gpu.GPU_GROUP_LABEL) for p in fractions}
    assert len(groups) == 1 and None not in groups
    group = groups.pop()
    held = [p for p in Pod.objects.filter(cluster=demo.cluster, namespace=kube_gpu.RESERVATION_NAMESPACE,
                                          phase="Running") if p.labels.get(kube_gpu.GPU_GROUP_LABEL) == group]
    assert [(p.node.name, p.gpus) for p in held] == [(fractions[0].node.name, Decimal(0))]
    replicas = next(p for n, p in pods.items() if n.startswith("speech-replicas"))
    assert (replicas.gpu_unit, replicas.gpu_units, replicas.gpus) == ("replica:4", 2, Decimal("0.5"))
