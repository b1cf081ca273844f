"""The console shows what the scheduler decided (issue 21, points 3 and 7), with KAI Scheduler: the console's
own enforcer writes the Queues, researchers submit through the API, the emulator's controllers (Job
controller, KAI, kubelets) tick on a manual clock, and the real sync mirrors the Jobs, KAI's PodGroups and its
eviction Events over HTTP. Then the table, its CSV, the API and the workload's page say, for every waiting
workload, KAI's reason (over a limit, non-preemptible beyond the deserved quota, no room, a missing queue)
with the console's own answer beside it, who preempted a reclaimed workload, and the queue position."""
from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.urls import reverse

from kubesim import KubeEmulator, ManualClock
from nodepools.sync import ClusterSync, SyncOptions, api_client_for
from tests.pages import after_load, csv_of
from workloads.models import PodGroup, SchedulerEvent, Workload

pytestmark = pytest.mark.django_db(transaction=True)

AT = r"(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d"  # a moment: its time of day, with its date unless today
FAST = dict(backoff_base=0.05, backoff_max=0.3, read_timeout=5, unreachable_after=0.4, batch_delay=0.02,
            tick=0.05, lock_poll=0.3, watch_timeout_min=30, watch_timeout_max=40, hint_interval=0.05)


class KaiLab:
    """The test organisation (tests/conftest.py `Org`) in the emulator, with KAI enforcement written by the
    console: a100 (8 GPUs on two nodes) shared by rnd (deserved 4: rnd-a 2, rnd-b 2) and ops (ops-a 4); in the
    default pool (8 GPUs) rnd-a may use 2 at most."""

    def __init__(self, org, users, sim: KubeEmulator, api) -> None:
        self.org, self.users, self.sim, self.api = org, users, sim, api
        self.sync: ClusterSync | None = None

    def quota(self, owner, pool, **values) -> None:
        from projects.services import quota_update

        row = self.org.quota(owner, pool)
        result = quota_update(actor=None, quota=row, expected_version=row.version, **values)
        assert not getattr(result, "errors", None), result

    def enforce(self) -> None:
        """What the sync's leader does every 5 seconds: the queues, shards and pool labels, once."""
        from enforcers.services import enforcement_round

        with api_client_for(self.org.cluster) as api_client:
            result = enforcement_round(self.org.cluster, api_client)
        assert result is not None and not result.refused, result

    def submit(self, user: str, project, name: str, *, gpus: int, pools=("a100",), priority_class="train",
               pods: int = 1) -> None:
        body = {"project": project.pk, "pools": list(pools), "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "command": "python train.py", "gpus": gpus, "cpu": "1", "memory": "1Gi",
                "priority_class": priority_class, "pods": pods, "name": name}
        response = self.api(self.users[user]).post("/api/v1/workloads/", body, format="json")
        assert response.status_code == 201, response.content
        self.sim.clock.advance(1)  # one second apart: KAI orders a queue's jobs by age

    def settle(self, ticks: int = 15) -> None:
        """The controllers, one second apart: long enough for the Job controller to replace a pod a scheduler
        evicted (10 s after it failed)."""
        for _ in range(ticks):
            self.sim.clock.advance(1)
            self.sim.tick()

    def rows(self, user: str) -> dict[str, dict]:
        answer = self.api(self.users[user]).get("/api/v1/workloads/", {"page_size": 100})
        assert answer.status_code == 200, answer.content
        return {row["name"]: row for row in answer.json()["results"]}


def _lab(org, users, api, tmp_path, emulators, enforcer: str):
    from enforcers.services import enforcement_set
    from nodepools import services as pool_services

    sim = emulators(clock=ManualClock(), controllers=True)
    lab = KaiLab(org, users, sim, api)
    try:
        path = sim.write_kubeconfig(tmp_path / "kubeconfig")
        pool_services.cluster_update(actor=None, cluster=org.cluster, kubeconfig_path=str(path),
                                     kube_context="emulator")
        org.cluster.refresh_from_db()
        sim.load(org.nodes, org.pods)
        for namespace in ("runai-rnd-a", "runai-rnd-b", "runai-ops-a"):
            sim.add_namespace(namespace)
        lab.quota(org.rnd, org.a100, gpu_deserved=Decimal(4))
        lab.quota(org.rnd_a, org.a100, gpu_deserved=Decimal(2))
        lab.quota(org.rnd_b, org.a100, gpu_deserved=Decimal(2))
        lab.quota(org.ops, org.a100, gpu_deserved=Decimal(4))
        lab.quota(org.ops_a, org.a100, gpu_deserved=Decimal(4))
        lab.quota(org.rnd_a, org.default, gpu_limit=Decimal(2))
        enforcement_set(actor=None, cluster=org.cluster, enforcer=enforcer)
        lab.enforce()
        lab.sync = ClusterSync(org.cluster, SyncOptions(**FAST), run_tasks=False)
        lab.sync.start()
        yield lab
    finally:
        if lab.sync is not None:
            lab.sync.stop()


@pytest.fixture
def kai_lab(org, users, api, tmp_path, emulators):
    yield from _lab(org, users, api, tmp_path, emulators, "kai")


@pytest.fixture
def kueue_lab(org, users, api, tmp_path, emulators):
    yield from _lab(org, users, api, tmp_path, emulators, "kueue")


def mirrored(lab: KaiLab, condition) -> None:
    assert lab.sync.run_until(condition, 20), "the sync did not bring the cluster's state"


def test_each_waiting_workload_says_kais_reason_the_consoles_answer_and_who_preempted_it(kai_lab, client):
    lab, org = kai_lab, kai_lab.org
    # rnd-b borrows the whole a100 pool (ops asks nothing yet): four jobs of 2 GPUs run.
    for i in range(1, 5):
        lab.submit("sysadmin", org.rnd_b, f"b-{i}", gpus=2)
    lab.settle()
    assert len([p for p in lab.sim.list("pods", "runai-rnd-b") if p["spec"].get("nodeName")]) == 4
    # ops-a's in-quota work arrives: KAI reclaims from rnd-b (the newest jobs first), ops-1 runs.
    lab.submit("sysadmin", org.ops_a, "ops-1", gpus=4)
    lab.settle()
    # rnd-a: a non-preemptible job beyond its deserved quota (2), and a job past its limit in the default pool.
    lab.submit("researcher", org.rnd_a, "a-infer", gpus=4, priority_class="inference")
    lab.submit("researcher", org.rnd_a, "a-big", gpus=4, pools=("default",))
    lab.settle()
    mirrored(lab, lambda: SchedulerEvent.objects.filter(reason="Evict").count() == 2
             and PodGroup.objects.filter(job_name="a-big", reason="OverLimit").exists()
             and PodGroup.objects.filter(job_name="a-infer", reason="NonPreemptibleOverQuota").exists()
             and Workload.objects.filter(name="ops-1").exists())
    from nodepools.models import Pod

    mirrored(lab, lambda: Pod.objects.filter(namespace="runai-ops-a", phase="Running").count() == 1)

    rows = lab.rows("sysadmin")
    assert rows["ops-1"]["phase"] == "Running" and rows["ops-1"]["pending_reason"] == ""
    assert {n: rows[n]["phase"] for n in ("b-1", "b-2", "b-3", "b-4")} == {
        "b-1": "Running", "b-2": "Running", "b-3": "Pending", "b-4": "Pending"}

    # A reclaimed workload says so, by whom, and how; it waits for room, as the console reads it too.
    b4 = rows["b-4"]
    assert b4["preempted_by"]["by"] == "runai-ops-a/ops-1" and b4["preempted_by"]["action"] == "reclaim"
    assert b4["preempted_by"]["scheduler"] == "kai-scheduler" and b4["preempted_by"]["still_waiting"] is True
    assert b4["preempted_by"]["by_id"] == rows["ops-1"]["id"] and b4["preempted_by"]["by_project"] == "ops-a"
    assert "was preempted by workload runai-ops-a/" in b4["preempted_by"]["message"]
    assert re.fullmatch(rf"Preempted by runai-ops-a/ops-1 at {AT} \(KAI Scheduler: reclaimed by a queue "
                        r"below its fair share\); waiting to run again", b4["preempted_by"]["text"]), b4["preempted_by"]
    assert b4["preempted_by"]["running_again_since"] is None
    assert b4["scheduler_reason"]["scheduler"] == "kai-scheduler"
    assert b4["scheduler_reason"]["category"] == "capacity" and b4["waiting_category"] == "capacity"
    assert b4["scheduler_reason"]["source"].startswith("PodGroup pg-b-4-")
    assert b4["why_waiting"]["code"] == "pool_full" and "project rnd-b (+2)" in b4["why_waiting"]["explanation"]
    assert b4["pending_reason"] == (f"{b4['scheduler_reason']['message']} Why is it waiting? "
                                    f"{b4['why_waiting']['explanation']}")
    # The queue position: KAI takes a queue's jobs by priority, then age (the console's reading of its order).
    assert (rows["b-3"]["queue_position"]["position"], rows["b-4"]["queue_position"]["position"]) == (1, 2)
    assert rows["b-4"]["queue_position"]["queue"] == "rnd-b.a100" and rows["b-4"]["queue_position"]["of"] == 2
    assert rows["b-4"]["queue_position"]["source"] == "console" and rows["b-4"]["queue_position"]["pool"] == "a100"
    assert rows["b-4"]["queue_position"]["text"].startswith("2 of 2 in queue rnd-b.a100")
    assert rows["b-1"]["queue_position"] is None and rows["b-1"]["preempted_by"] is None

    # Non-preemptible work beyond the deserved quota; over the limit: KAI's reason and the console's agree.
    infer = rows["a-infer"]
    assert (infer["scheduler_reason"]["reason"], infer["scheduler_reason"]["category"]) == (
        "NonPreemptibleOverQuota", "non_preemptible_quota")
    assert infer["why_waiting"]["code"] == "non_preemptible_over_quota"
    big = rows["a-big"]
    assert (big["scheduler_reason"]["reason"], big["scheduler_reason"]["category"]) == ("OverLimit", "limit")
    assert big["why_waiting"]["code"] == "over_limit" and big["waiting_category"] == "limit"
    assert big["pending_reason"].startswith("OverLimit: ")

    # The department administrator of rnd sees the reclaimed workload, not ops' workload: only its project.
    b4 = lab.rows("rnd_admin")["b-4"]
    assert b4["preempted_by"]["by"] is None and b4["preempted_by"]["by_project"] == "ops-a"
    assert re.match(rf"Preempted by a workload of project ops-a at {AT} \(KAI Scheduler", b4["preempted_by"]["text"])

    # The table, its CSV and the workload's page say the same.
    client.force_login(lab.users["sysadmin"])
    url = reverse("workload-list")
    choose_columns(lab.users["sysadmin"], "name", "phase", "pending_reason", "scheduler_reason", "waiting_category",
                   "queue_position", "preempted_by")
    # "Why is it waiting?" and KAI's queue turn fill their cells after the page (they read the fair shares).
    page = after_load(client, url)
    row_html = page.split('data-workload="b-4"', 1)[1].split("</tr>", 1)[0]
    assert "Preempted by runai-ops-a/ops-1" in row_html and "2 of 2 in queue rnd-b.a100" in row_html
    assert '<span class="why">Why is it waiting? The pool is full' in row_html
    assert f'href="{reverse("workload-detail", args=[rows["ops-1"]["id"]])}"' in row_html
    table = csv_of(client.get(url, {"format": "csv"}))
    header, by_name = table[0], {r[0]: r for r in table[1:]}
    assert header == ["Workload", "Phase", "Pending reason", "Scheduler's reason", "Waits for", "Queue position",
                      "Preempted by"]
    assert by_name["b-4"][2] == rows["b-4"]["pending_reason"]
    assert by_name["b-4"][3].startswith("KAI Scheduler: ") and by_name["b-4"][4] == "no room on the pool's nodes"
    assert by_name["b-4"][5].startswith("2 of 2 in queue rnd-b.a100") and by_name["b-4"][6].startswith(
        "Preempted by runai-ops-a/ops-1")
    assert by_name["a-big"][4] == "over a limit" and by_name["ops-1"][2:] == ["", "", "", "", ""]
    detail = client.get(reverse("workload-detail", args=[rows["b-4"]["id"]])).content.decode()
    assert "<h1>Workload b-4</h1>" in detail and "Preempted by runai-ops-a/ops-1" in detail
    assert re.search(r'<dd id="workload-queue-position">2 of 2 in queue rnd-b\.a100', detail)
    assert 'id="kai-evictions"' in detail and "reclaim" in detail and 'id="kai-podgroups"' in detail


def test_a_missing_queue_is_kais_reason_and_the_console_says_where_it_differs(kai_lab):
    lab, org = kai_lab, kai_lab.org
    # Someone deletes rnd-a's queue in a100 (the enforcer would put it back within seconds; not here).
    lab.sim.delete("queues.scheduling.run.ai", "rnd-a.a100")
    lab.submit("researcher", org.rnd_a, "a-1", gpus=1)
    lab.settle()
    mirrored(lab, lambda: PodGroup.objects.filter(job_name="a-1", reason="QueueDoesNotExist").exists())
    row = lab.rows("researcher")["a-1"]
    assert row["scheduler_reason"]["category"] == "queue"
    assert row["scheduler_reason"]["message"].startswith("QueueDoesNotExist: Queue 'rnd-a.a100' does not exist")
    # The console's own reading of quotas and nodes finds room: the table says both.
    assert row["why_waiting"]["code"] == "schedulable"
    choose_columns(lab.users["researcher"], "name", "waiting_category")
    rows = csv_of(_client_for(lab).get(reverse("workload-list"), {"format": "csv"}))
    assert rows[1] == ["a-1", "its queue is missing or stopped (the console reads: fits, waits for the "
                              "scheduler's next round)"]


def choose_columns(user, *columns: str) -> None:
    from ui import services
    from workloads.tables import WorkloadTable

    services.table_preference_set(user=user, table="workloads", columns=list(columns),
                                  allowed=WorkloadTable.column_names())


def _client_for(lab: KaiLab):
    from django.test import Client

    client = Client()
    client.force_login(lab.users["researcher"])
    return client


def test_with_kueue_a_reclaimed_workload_says_by_whom_and_waiting_ones_their_position_and_reason(kueue_lab):
    from workloads.models import KueueWorkload

    lab, org = kueue_lab, kueue_lab.org
    lab.quota(org.rnd_b, org.a100, gpu_limit=Decimal(4))
    lab.enforce()
    # rnd-b borrows rnd-a's unused nominal quota in the cohort of rnd (a100: nominal 2 each, rnd-b up to 4).
    lab.submit("sysadmin", org.rnd_b, "b-1", gpus=2)
    lab.submit("sysadmin", org.rnd_b, "b-2", gpus=2)
    lab.settle()
    # Beyond rnd-b's maximum (nominal 2 + borrowing limit 2): a limit; one more in line behind it. (A request
    # within the maximum but beyond what is left of it, Kueue words as the cohort's lack of quota: "insufficient
    # unused quota"; the console says over its limit. docs/development/tests.md: a documented difference.)
    lab.submit("sysadmin", org.rnd_b, "b-big", gpus=3, pods=2)
    lab.submit("sysadmin", org.rnd_b, "b-3", gpus=2)
    lab.settle()
    # rnd-a's in-quota work arrives: Kueue reclaims what rnd-b borrowed.
    lab.submit("researcher", org.rnd_a, "a-1", gpus=2)
    lab.settle(6)
    mirrored(lab, lambda: KueueWorkload.objects.filter(job_name="b-2", evicted_message__contains="Preempted").exists()
             or KueueWorkload.objects.filter(job_name="b-1", evicted_message__contains="Preempted").exists())
    mirrored(lab, lambda: KueueWorkload.objects.filter(job_name="a-1", admitted=True).exists()
             and KueueWorkload.objects.filter(job_name="b-big").exclude(pending_message="").exists())

    rows = lab.rows("sysadmin")
    evicted = [rows[n] for n in ("b-1", "b-2") if rows[n]["preempted_by"]]
    assert len(evicted) == 1, {n: rows[n]["preempted_by"] for n in ("b-1", "b-2")}
    victim = evicted[0]
    assert victim["preempted_by"]["scheduler"] == "kueue" and victim["preempted_by"]["by"] == "runai-rnd-a/a-1"
    assert victim["preempted_by"]["action"] == "InCohortReclamation"
    assert re.match(rf"Preempted by runai-rnd-a/a-1 at {AT} \(Kueue: reclaimed by its cohort\); waiting to run again",
                    victim["preempted_by"]["text"]), victim["preempted_by"]
    assert victim["phase"] == "Suspended" and victim["scheduler_reason"]["scheduler"] == "kueue"
    # Over its maximum: Kueue's reason and the console's (rnd-b's limit in a100) agree on the category.
    big = rows["b-big"]
    assert big["phase"] == "Suspended" and big["scheduler_reason"]["category"] == "limit", big["scheduler_reason"]
    assert "maximum capacity" in big["scheduler_reason"]["message"] and big["why_waiting"]["code"] == "over_limit"
    # The visibility API's positions, for the waiting ones of rnd-b's queue.
    positions = {n: rows[n]["queue_position"] for n in ("b-big", "b-3", victim["name"])}
    assert all(p is not None and p["source"] == "kueue" for p in positions.values()), positions
    assert sorted(p["position"] for p in positions.values()) == [1, 2, 3]
    assert positions["b-3"]["text"].endswith("in LocalQueue rnd-b")


def test_a_reclaimed_workload_that_runs_again_says_since_when_and_its_old_condition_is_not_current(kai_lab, client):
    """rnd-b's borrowed jobs are reclaimed by ops-a's; once ops-a's job is stopped, KAI places them again: the
    row says who preempted it, when, and since when it runs again; its PodGroup's last scheduling condition
    (from while it waited) reads as past, not as why it waits."""
    lab, org = kai_lab, kai_lab.org
    for i in range(1, 5):
        lab.submit("sysadmin", org.rnd_b, f"b-{i}", gpus=2)
    lab.settle()
    lab.submit("sysadmin", org.ops_a, "ops-1", gpus=4)
    lab.settle()
    mirrored(lab, lambda: SchedulerEvent.objects.filter(reason="Evict").count() == 2
             and Workload.objects.filter(name="ops-1").exists())
    rows = lab.rows("sysadmin")
    reclaimed = sorted(n for n in ("b-1", "b-2", "b-3", "b-4") if rows[n]["preempted_by"])
    assert len(reclaimed) == 2 and all(rows[n]["phase"] == "Pending" for n in reclaimed), reclaimed
    name = reclaimed[-1]
    # ops-1 stops: its GPUs go back, KAI places the reclaimed jobs again.
    answer = lab.api(lab.users["sysadmin"]).delete(f"/api/v1/workloads/{rows['ops-1']['id']}/")
    assert answer.status_code in (200, 202, 204), answer.content
    lab.settle(20)
    from nodepools.models import Pod

    mirrored(lab, lambda: Pod.objects.filter(namespace="runai-rnd-b", phase="Running",
                                             job_name__in=reclaimed).count() == 2)
    row = lab.rows("sysadmin")[name]
    assert row["phase"] == "Running" and row["pending_reason"] == ""
    again = row["preempted_by"]
    assert again["still_waiting"] is False and again["running_again_since"] is not None
    assert again["running_again_since"] > again["at"]
    assert re.fullmatch(rf"Preempted by runai-ops-a/ops-1 at {AT} \(KAI Scheduler: reclaimed by a queue "
                        rf"below its fair share\); running again since {AT}", again["text"]), again["text"]
    # Its page: the same sentence, and the PodGroup's condition from while it waited is said to be past.
    client.force_login(lab.users["sysadmin"])
    detail = client.get(reverse("workload-detail", args=[row["id"]])).content.decode()
    assert again["text"] in detail.replace("&#x27;", "'")
    timeline = [entry["what"] for entry in lab.api(lab.users["sysadmin"]).get(
        f"/api/v1/workloads/{row['id']}/").json()["timeline"]]
    assert timeline[-2:] == ["Preempted by runai-ops-a/ops-1", "Ran again"], timeline
    group = PodGroup.objects.filter(job_name=name).order_by("-created_in_cluster").first()
    assert group is not None and group.waiting is False
    cells = detail.split(f'data-podgroup="{group.name}"', 1)[1].split("</tr>", 1)[0]
    if group.reason or group.message:  # KAI keeps the condition of its last failed attempt
        assert "Not current — it was placed since. Before" in cells, cells
    assert f"{group.reason}: {group.reason}:" not in cells
