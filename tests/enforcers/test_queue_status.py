"""The enforcement page's queue status as a person reads it: every "differs" says why in words, the queues
with nothing in them wait behind a link (with their count), and the top bar marks the menu the page is in."""
from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.urls import reverse

from enforcers import services
from enforcers.models import SchedulerQueue


def _queue(org, name, owner, pool, **figures):
    """A queue as the sync mirrors KAI's Queue status (what the scheduler reports)."""
    return SchedulerQueue.objects.create(cluster=org.cluster, kind="Queue", name=name, pool=pool, owner=owner,
                                         **figures)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#x27;", "'")


@pytest.fixture
def reported(org):
    """rnd-a runs 4 GPUs KAI placed and a 3-GPU notebook kube-scheduler placed; KAI reports its 4. The other
    queues hold nothing."""
    from kubesim import make_pod

    services.enforcement_set(actor=None, cluster=org.cluster, enforcer="kai")
    train = make_pod("train", "runai-rnd-a", node="a100-1", priority=50, priority_class="train",
                     labels={"kai.scheduler/queue": "rnd-a.a100"},
                     containers=[{"name": "main", "requests": {"nvidia.com/gpu": "4"}}])
    train["spec"]["schedulerName"] = "kai-scheduler"
    notebook = make_pod("notebook", "runai-rnd-a", node="a100-2", priority=50,
                        containers=[{"name": "main", "requests": {"nvidia.com/gpu": "3"}}])
    org.pods += [train, notebook]
    org.load()
    _queue(org, "rnd-a.a100", "project.rnd-a", org.a100, gpu_allocated=Decimal(4), gpu_requested=Decimal(4),
           gpu_allocated_non_preemptible=Decimal(0))
    _queue(org, "department.rnd.a100", "department.rnd", org.a100, gpu_allocated=Decimal(4))
    for owner, pool in (("project.rnd-b", org.a100), ("project.ops-a", org.a100), ("project.rnd-a", org.default),
                        ("project.rnd-b", org.default), ("department.ops", org.a100)):
        _queue(org, f"{owner.split('.')[1]}.{pool.name}", owner, pool, gpu_allocated=Decimal(0),
               gpu_requested=Decimal(0))
    return org


@pytest.mark.django_db
def test_every_difference_says_why_and_empty_queues_wait_behind_a_link(client, reported, users):
    client.force_login(users["sysadmin"])
    url = reverse("cluster-enforcement", args=[reported.cluster.pk])
    page = _text(client.get(url).content.decode())
    why = ("Why they differ: 3 GPUs held by pods that KAI did not schedule (scheduler: default-scheduler): the "
           "console counts them, KAI does not.")
    assert page.count(why) == 2, page  # the project's queue and its department's
    assert "the scheduler's and the console's allocations differ in 2, each said why below" in page
    # The five empty queues are hidden, the link says how many.
    assert "Queue rnd-b.a100" not in page and "Queue ops-a.a100" not in page
    assert "Show the 5 queues with nothing in them (hidden)" in page
    shown = _text(client.get(url, {"empty": "shown"}).content.decode())
    assert "Queue rnd-b.a100" in shown and "Queue ops.a100" in shown
    assert "Hide the 5 queues with nothing in them" in shown


@pytest.mark.django_db
def test_a_researcher_reads_only_the_explanations_of_the_queues_it_may_see(client, reported, users):
    client.force_login(users["researcher"])  # researcher of rnd-a
    page = _text(client.get(reverse("cluster-enforcement", args=[reported.cluster.pk])).content.decode())
    assert "Queue rnd-a.a100" in page
    assert "3 GPUs held by pods that KAI did not schedule (scheduler: default-scheduler)" in page
    assert "ops-a" not in page


@pytest.mark.django_db
def test_the_top_bar_marks_capacity_not_overview_on_the_enforcement_page(client, reported, users):
    client.force_login(users["sysadmin"])
    html = client.get(reverse("cluster-enforcement", args=[reported.cluster.pk])).content.decode()
    nav = html[html.index('<nav class="mainnav"'):html.index("</nav>")]
    assert '<details class="menu current"><summary>Capacity</summary>' in nav
    assert 'aria-current="page">Overview' not in nav
    assert f'href="/clusters/{reported.cluster.pk}/enforcement/">Enforcement</a>' in nav
