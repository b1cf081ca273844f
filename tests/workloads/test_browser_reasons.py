"""The Workloads pages' answers as a person reads them in Chromium at 1440 x 900 (fixtures of
tests/test_browser.py; the cluster is the emulator over HTTP, mirrored by the real sync):

- point 2: an 8-GPU workload in a pool of 4-GPU nodes reads, in its row's one line, that it never fits (not the
  scheduler's words about nodes); "What would make room?" for 1 x 8 says first that nothing can, and lists nobody;
- point 4: a bare pod the console did not submit is a row of Workloads, marked so; on the enforcement page (under
  Capacity in the top bar) the difference of KAI's count and the console's is said in words, and the queues with
  nothing in them open behind a link."""
from __future__ import annotations

from decimal import Decimal

import pytest

from tests import test_browser
from tests.test_browser import _hints_reach_the_in_process_server, chromium, live_asgi, log_in, page  # noqa: F401
from tests.workloads.test_submit_emulator import submit, syncing  # noqa: F401  (fixture)

pytestmark = test_browser.pytestmark

NEVER = "Never fits: no node of a100 has 8 GPUs (the largest Ready node has 4)"


@pytest.fixture
def waiting(lab, sim, syncing, users, api):
    """search-8gpu (1 pod of 8 GPUs, pool a100 of 4-GPU nodes) submitted through the console, its pod unplaced
    with kube-scheduler's words; rnd-b borrows a100-1 with preemptible work; a bare 1-GPU notebook of rnd-a
    kube-scheduler placed."""
    from kubesim import make_pod
    from nodepools.models import Pod
    from workloads import render
    from workloads.models import Workload

    answer = submit(api, users["researcher"], lab.rnd_a, name="search-8gpu", gpus=8, pools=["a100"])
    assert answer.status_code == 201, answer.content
    sim.add_pod(make_pod("search-8gpu-x1", "runai-rnd-a", node=None, phase="Pending", priority=50,
                         scheduling_message="0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                         labels={render.JOB_NAME_LABEL: "search-8gpu", "job-name": "search-8gpu"},
                         containers=[{"name": "main", "requests": {"nvidia.com/gpu": "8"}}]))
    sim.add_pod(make_pod("borrowed", "runai-rnd-b", node="a100-1", priority=50,
                         containers=[{"name": "main", "requests": {"nvidia.com/gpu": "4"}}]))
    sim.add_pod(make_pod("notebook-x", "runai-rnd-a", node="a100-2", priority=50,
                         containers=[{"name": "main", "requests": {"nvidia.com/gpu": "1"}}]))
    assert syncing.run_until(lambda: Workload.objects.filter(name="search-8gpu").exists()
                             and Workload.objects.filter(name="notebook-x", kind="Pod").exists()
                             and Pod.objects.filter(name="search-8gpu-x1").exists())
    return lab


def test_a_workload_that_never_fits_says_so_in_its_line_and_nothing_makes_room(page, users, waiting):
    from playwright.sync_api import expect

    page.set_viewport_size({"width": 1440, "height": 900})
    log_in(page, "researcher", "pw-researcher")
    page.goto("/workloads/")
    row = page.locator("#workloads-table tr[data-workload='search-8gpu']")
    expect(row).to_be_visible()
    # The console's answer comes after the page; then the line is the hardest fact.
    line = row.locator(".reason-story summary .line")
    expect(line).to_contain_text(NEVER, timeout=20000)
    row.locator(".reason-story summary").click()
    story = row.locator(".reason-story .story")
    expect(story).to_be_visible()
    expect(story).to_contain_text("kube-scheduler: 0/4 nodes are available")  # the scheduler's words after it
    # The pool page: what would make room for 1 x 8? Nothing can, said first; nobody listed.
    page.goto(f"/pools/{waiting.a100.pk}/")
    page.fill("#fit-pods", "1")
    page.fill("#fit-gpus", "8")
    page.locator("#make-room-form").get_by_role("button", name="Show").click()
    box = page.locator("#make-room")
    expect(box).to_contain_text("Nothing can make room: no node of a100 has 8 GPUs (the largest has 4).")
    expect(page.locator("#make-room-victims")).to_have_count(0)


def test_a_bare_pod_is_listed_and_the_enforcement_page_says_why_counts_differ(page, users, waiting):
    from playwright.sync_api import expect

    from enforcers import services
    from enforcers.models import SchedulerQueue

    # KAI enforces; its queue status (as the sync mirrors it) counts none of the bare notebook's GPU.
    services.enforcement_set(actor=None, cluster=waiting.cluster, enforcer="kai")
    SchedulerQueue.objects.create(cluster=waiting.cluster, kind="Queue", name="rnd-a.a100", pool=waiting.a100,
                                  owner="project.rnd-a", gpu_allocated=Decimal(0), gpu_requested=Decimal(8))
    for owner in ("project.ops-a", "project.rnd-b"):
        SchedulerQueue.objects.create(cluster=waiting.cluster, kind="Queue", name=f"{owner[8:]}.default",
                                      pool=waiting.default, owner=owner, gpu_allocated=Decimal(0))
    page.set_viewport_size({"width": 1440, "height": 900})
    log_in(page, "sysadmin", "pw-sysadmin")
    # Workloads: the bare pod is there, marked, with no Stop.
    page.goto("/workloads/")
    row = page.locator("#workloads-table tr[data-workload='notebook-x']")
    expect(row).to_contain_text("bare pod · not submitted by the console")
    expect(row.get_by_role("link", name="Stop")).to_have_count(0)
    # Enforcement, from the top bar's Capacity menu (marked current there).
    page.locator("nav.mainnav summary", has_text="Capacity").click()
    page.locator("nav.mainnav").get_by_role("link", name="Enforcement").click()
    expect(page.locator("h1")).to_contain_text("Enforcement of lab")
    expect(page.locator("nav.mainnav details.menu.current summary")).to_have_text("Capacity")
    why = page.locator("tr.differs-why[data-queue='rnd-a.a100']")
    expect(why).to_contain_text("Why they differ: 1 GPU held by pods that KAI did not schedule "
                                "(scheduler: default-scheduler): the console counts them, KAI does not.")
    table = page.locator("#queue-status")
    expect(table).not_to_contain_text("Queue ops-a.default")
    toggle = page.locator("#empty-queues-toggle")
    expect(toggle).to_have_text("Show the 2 queues with nothing in them (hidden)")
    toggle.click()
    expect(table).to_contain_text("Queue ops-a.default")
    expect(table).to_contain_text("Queue rnd-b.default")
    expect(page.locator("#empty-queues-toggle")).to_have_text("Hide the 2 queues with nothing in them")
