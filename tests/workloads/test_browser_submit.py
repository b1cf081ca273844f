"""Submitting a workload in a real browser (Chromium through Playwright, against Daphne; fixtures of
tests/test_browser.py): a researcher fills the form, previews the Job, submits it, and sees it appear
in the workloads table once the sync mirrors it from the emulator."""
from __future__ import annotations

import re
import threading

from tests import test_browser
from tests.test_browser import _hints_reach_the_in_process_server, chromium, live_asgi, log_in, page, shoot  # noqa: F401

pytestmark = test_browser.pytestmark


def test_a_researcher_previews_then_submits_a_workload_and_sees_it_listed(page, org, users, tmp_path, emulators):
    from playwright.sync_api import expect

    from nodepools import services as pool_services
    from nodepools.sync import ClusterSync, SyncOptions
    from workloads.models import Workload

    emu = emulators()
    sync = None
    try:
        path = emu.write_kubeconfig(tmp_path / "kubeconfig")
        pool_services.cluster_update(actor=None, cluster=org.cluster, kubeconfig_path=str(path), kube_context="emulator")
        emu.load(org.nodes, org.pods)
        emu.add_namespace("runai-rnd-a")
        org.cluster.refresh_from_db()
        sync = ClusterSync(org.cluster, SyncOptions(backoff_base=0.05, backoff_max=0.3, batch_delay=0.02, tick=0.05,
                                                    hint_interval=0.05, unreachable_after=2))
        sync.start()
        assert sync.run_until(lambda: org.cluster.nodes.count() == 4)

        log_in(page, "researcher", "pw-researcher")
        page.goto("/workloads/")
        expect(page.locator("h1")).to_have_text("Workloads")
        page.get_by_role("link", name="Submit a workload").click()
        expect(page.locator("h1")).to_have_text("Submit a workload")
        page.get_by_label("Project").select_option(label="rnd-a")
        # The pools in order, chosen among those open to rnd-a.
        for place, pool in (("Node pool 1", "a100"), ("Node pool 2", "default")):
            page.get_by_label(place).select_option(pool)
            page.wait_for_function("() => !document.querySelector('.htmx-request')")  # the choices follow
        page.get_by_label("Image").fill("nvcr.io/nvidia/pytorch:24.05-py3")
        page.get_by_label("Command").fill("python train.py --epochs 3")
        page.get_by_label("GPUs").fill("2")
        page.get_by_label("Priority class").select_option("train")
        page.get_by_label("Name", exact=True).fill("browser-train")
        # No Submit before a preview.
        expect(page.get_by_role("button", name="Submit")).to_have_count(0)
        page.get_by_role("button", name="Preview").click()
        expect(page.locator("#preview-title")).to_have_text("Preview: Job browser-train in runai-rnd-a")
        yaml_text = page.locator("#job-yaml")
        expect(yaml_text).to_contain_text("priorityClassName: train")
        expect(yaml_text).to_contain_text("nvidia.com/gpu: '2'")
        expect(yaml_text).to_contain_text("console.gpu-capacity.io/pools: a100,default")
        expect(yaml_text).to_contain_text("type: DisruptionTarget")
        expect(page.locator("#scheduling-notes")).to_contain_text("it is not counted as a failure of the workload")
        assert emu.list("jobs.batch") == []  # a preview creates nothing
        shoot(page, "workload-submit-preview")

        page.get_by_role("button", name="Submit").click()
        expect(page.locator("h1")).to_have_text("Workloads")
        expect(page.locator("ul.messages li").first).to_contain_text(
            "Workload browser-train submitted to runai-rnd-a")
        assert [j["metadata"]["name"] for j in emu.list("jobs.batch", "runai-rnd-a")] == ["browser-train"]
        # The sync mirrors the Job; the live table shows the new row without a reload.
        assert sync.run_until(lambda: Workload.objects.filter(name="browser-train").exists())
        row = page.locator("#workloads-table tr[data-workload='browser-train']")
        expect(row).to_be_visible(timeout=15000)  # the hint, then the table's refetch, on a busy machine
        expect(row).to_contain_text("rnd-a")
        expect(row).to_contain_text("a100 → default")
        expect(row).to_contain_text("Pending")
        # Its start estimate comes after the table (it simulates the pools' queues): "estimating…" first,
        # then the estimate or why there is none, without a reload.
        estimate = row.locator("[id^='start-estimate-']")
        expect(estimate).not_to_contain_text("estimating", timeout=15000)
        expect(estimate).to_contain_text(re.compile(r"\w"))
        # So does the console's answer to "Why is it waiting?" (it reads the cluster's fair shares): "reading…"
        # first, then the answer in the same cell, under the scheduler's words.
        reason = row.locator("[id^='pending-reason-']")
        expect(reason).not_to_contain_text("reading…", timeout=15000)
        expect(reason.locator(".why")).to_contain_text(re.compile(r"\w"))
        shoot(page, "workload-list-submitted")
    finally:
        if sync is not None:
            sync.stop()


def test_choosing_pools_and_platform_and_a_field_error_before_preview(page, hetero, users):
    """The pools are an ordered choice of those open to the project (its priority list first), the platform
    a choice of the first pool's platforms that follows the pools, and each field is checked as it is
    filled: the error appears before Preview, and goes when the value is fixed."""
    from playwright.sync_api import expect

    from projects import services as project_services
    from workloads.submission import pool_access_set

    org = hetero.org
    # rnd-a's priority list: hetero, then a100; a pool only for ops is not offered to rnd-a.
    project_services.project_priority_set(actor=None, project=org.rnd_a, pools=[hetero.pool, org.a100])
    from nodepools import services as pool_services

    closed = pool_services.pool_create(actor=None, cluster=org.cluster, name="ops-only", label_key="pool",
                                       label_value="ops-only")
    pool_access_set(actor=None, pool=closed, open_to_cluster=False, maintenance=False, departments=[org.ops])

    log_in(page, "researcher", "pw-researcher")
    page.goto("/workloads/")
    page.get_by_role("link", name="Submit a workload").click()
    expect(page.locator("h1")).to_have_text("Submit a workload")
    page.wait_for_load_state()  # the page's scripts (htmx) are running
    page.get_by_label("Project").select_option(label="rnd-a")
    page.wait_for_function("() => !document.querySelector('.htmx-request')")
    first = page.get_by_label("Node pool 1")

    def choose(select, value):
        """Choose, then see the page follow (a person watches the pools and platforms update)."""
        select.select_option(value)
        page.wait_for_function("() => !document.querySelector('.htmx-request')")

    # Offered in order: the priority list (then default), then the other pools open to rnd-a; never ops-only.
    expect(first.locator("option")).to_have_text(["— (none)", "hetero", "a100", "default"])
    expect(first).to_have_value("hetero")
    expect(page.get_by_label("Node pool 2")).to_have_value("a100")
    expect(page.get_by_label("Node pool 3")).to_have_value("default")
    platform = page.get_by_label("Platform")
    expect(platform.locator("option")).to_have_text(
        ["l40s-platform: the default platform of hetero", "a100-platform", "l40s-platform"])
    # The platforms follow the first pool: a100 has none. a100 is now twice in the list: said at once.
    choose(first, "a100")
    expect(platform.locator("option")).to_have_text(["none: a100 has no platforms (any of its nodes)"])
    expect(page.locator("#field-pools .error")).to_have_text("Node pools: A pool appears twice in the list.")
    choose(page.get_by_label("Node pool 2"), "hetero")
    expect(page.locator("#field-pools .error")).to_have_count(0)
    # Back to hetero first (then a100, then default): its platforms again.
    choose(first, "hetero")
    choose(page.get_by_label("Node pool 2"), "a100")
    expect(page.locator("#field-pools .error")).to_have_count(0)
    expect(platform.locator("option")).to_have_count(3)
    choose(platform, "a100-platform")
    page.get_by_label("Image").fill("nvcr.io/nvidia/pytorch:24.05-py3")
    # 4 GPUs on one node of the A100 platform: no node has 4 free (2 each). Said on leaving the field.
    page.get_by_label("GPUs").fill("4")
    page.get_by_label("Storage").click()
    gpus_error = page.locator("#field-gpus .error")
    expect(gpus_error).to_contain_text("GPUs: 4 GPUs requested: no node of pool ")
    expect(gpus_error).to_contain_text("GPU 4 exceeds node capacity")
    expect(page.locator("#preview-title")).to_have_count(0)  # nothing previewed yet
    shoot(page, "workload-submit-field-error")
    # A memory that is no quantity: the same words as Preview's.
    page.get_by_label("Memory").fill("lots")
    page.get_by_label("Name", exact=True).click()
    expect(page.locator("#field-memory .error")).to_have_text(
        "Memory: 'lots' is not a Kubernetes quantity (e.g. 500m, 2, 1Gi, 512Mi).")
    page.get_by_label("Memory").fill("8Gi")
    page.get_by_label("GPUs").fill("2")
    page.get_by_label("Name", exact=True).click()
    expect(page.locator("#field-gpus .error")).to_have_count(0)
    expect(page.locator("#field-memory .error")).to_have_count(0)
    page.get_by_label("Name", exact=True).fill("a100-check")
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("#preview-title")).to_have_text("Preview: Job a100-check in runai-rnd-a")
    expect(page.locator(".preview p.hint")).to_contain_text("Pools in order: hetero → a100 → default; platform a100-platform.")
    # The choices stay as chosen after Preview.
    expect(page.get_by_label("Node pool 1")).to_have_value("hetero")
    expect(page.get_by_label("Platform")).to_have_value("a100-platform")


def test_a_researcher_previews_a_workload_that_will_wait_and_reads_why_and_until_when(page, org, users):
    """Issue 23: the preview's dry run. a100's two 4-GPU nodes run rnd-b's in-quota training (two jobs, started
    10 minutes ago; its finished training ran 30, 40 and 60 minutes); rnd-a has no quota there. A researcher of
    rnd-a previews a 4-GPU workload and reads that it waits for capacity, why, and until when."""
    import datetime as dt
    from decimal import Decimal

    from django.utils import timezone
    from playwright.sync_api import expect

    from enforcers.services import enforcement_set
    from projects.services import quota_update
    from tests.workloads.test_start_estimates import history, job, run_pod
    from workloads.models import Workload
    from workloads.sync import jobs_mirror

    enforcement_set(actor=None, cluster=org.cluster, enforcer="kai")
    for owner, deserved in ((org.rnd, 8), (org.rnd_b, 8)):
        row = org.quota(owner, org.a100)
        quota_update(actor=None, quota=row, expected_version=row.version, gpu_deserved=Decimal(deserved))
    history(org, org.rnd_b, "train", [30, 40, 60])
    ago = timezone.now() - dt.timedelta(minutes=10)
    jobs_mirror(cluster=org.cluster, jobs=[job("b-train-1", org.rnd_b, gpus=4, started=ago),
                                           job("b-train-2", org.rnd_b, gpus=4, started=ago)])
    run_pod(org, "b-train-1-x", org.rnd_b, "a100-1", gpus=4, job_name="b-train-1", started=ago)
    run_pod(org, "b-train-2-x", org.rnd_b, "a100-2", gpus=4, job_name="b-train-2", started=ago)

    log_in(page, "researcher", "pw-researcher")
    page.goto("/workloads/submit/")
    expect(page.locator("h1")).to_have_text("Submit a workload")
    page.get_by_label("Project").select_option(label="rnd-a")
    page.get_by_label("Node pool 1").select_option("a100")
    page.wait_for_function("() => !document.querySelector('.htmx-request')")
    page.get_by_label("Image").fill("nvcr.io/nvidia/pytorch:24.05-py3")
    page.get_by_label("GPUs").fill("4")
    page.get_by_label("Priority class").select_option("train")
    page.get_by_label("Name", exact=True).fill("wait-for-it")
    page.get_by_role("button", name="Preview").click()

    expect(page.locator("#verdict-title")).to_contain_text("Will it start?")
    expect(page.locator("#verdict-code")).to_have_text("Waits for capacity")
    # Why: the pool's free GPUs and what they hold (none of its nodes has 4 free).
    expect(page.locator("#verdict-headline")).to_contain_text(
        "0 GPUs are free on 2 Ready nodes; the most free on one node is 0, so 0 pods of 4 GPUs fit now.")
    # Until when: rnd-b's jobs end at their usual length (40 to 60 minutes, 10 of them done); rnd-a has no quota
    # there, so the owners' in-quota work (rnd-b's: up to 60 minutes) may come first.
    expect(page.locator("#verdict-estimate")).to_have_text(
        "Until when: in 30–110 min: 8 GPUs free when rnd-b's two train jobs end at their usual length; over its "
        "project's deserved quota, so in-quota work of the pool's owners may come first (up to 60 min more).")
    expect(page.locator("#verdict")).to_contain_text("KAI Scheduler's rules")
    assert not Workload.objects.filter(name="wait-for-it").exists()  # a preview creates nothing
    shoot(page, "workload-submit-verdict-waits")


def test_a_researcher_submits_watches_it_run_without_a_reload_and_stops_it(page, org, users, tmp_path, emulators):
    """The loop closed in the browser: the emulator's controllers run in their own thread (Job controller,
    KAI Scheduler on the console's own queues, kubelets), the sync mirrors, the live table follows."""
    from playwright.sync_api import expect

    from enforcers.services import enforcement_round, enforcement_set
    from nodepools import services as pool_services
    from nodepools.sync import ClusterSync, SyncOptions, api_client_for
    from workloads.models import Workload

    emu = emulators(controllers=True, controller_interval=0.2)
    sync = background = None
    stop = threading.Event()
    try:
        path = emu.write_kubeconfig(tmp_path / "kubeconfig")
        pool_services.cluster_update(actor=None, cluster=org.cluster, kubeconfig_path=str(path), kube_context="emulator")
        emu.load(org.nodes, org.pods)
        emu.add_namespace("runai-rnd-a")
        org.cluster.refresh_from_db()
        sync = ClusterSync(org.cluster, SyncOptions(backoff_base=0.05, backoff_max=0.3, batch_delay=0.02, tick=0.05,
                                                    hint_interval=0.05, unreachable_after=2), run_tasks=False)
        sync.start()
        assert sync.run_until(lambda: org.cluster.nodes.count() == 4)
        enforcement_set(actor=None, cluster=org.cluster, enforcer="kai")

        def enforce():  # the queues and pool labels, as the sync's leader writes them (in a thread of its own,
            # as the leader's: the browser's event loop runs in this one)
            with api_client_for(org.cluster) as api_client:
                result["round"] = enforcement_round(org.cluster, api_client)

        result: dict = {}
        worker = threading.Thread(target=enforce)
        worker.start()
        worker.join(30)
        assert result["round"] is not None and not result["round"].refused

        # From here the sync runs on its own, as `sync_clusters` does: the page follows it live.
        background = threading.Thread(target=sync.run, args=(stop,), name="sync", daemon=True)
        background.start()

        log_in(page, "researcher", "pw-researcher")
        page.goto("/workloads/submit/")
        expect(page.locator("h1")).to_have_text("Submit a workload")
        page.wait_for_load_state()
        page.get_by_label("Project").select_option(label="rnd-a")
        page.wait_for_function("() => !document.querySelector('.htmx-request')")
        # KAI tries the first pool only: a100 alone.
        page.get_by_label("Node pool 1").select_option("a100")
        page.wait_for_function("() => !document.querySelector('.htmx-request')")
        page.get_by_label("Node pool 2").select_option("")
        page.wait_for_function("() => !document.querySelector('.htmx-request')")
        page.get_by_label("Image").fill("nvcr.io/nvidia/pytorch:24.05-py3")
        page.get_by_label("Command").fill("python train.py")
        page.get_by_label("GPUs").fill("2")
        page.get_by_label("Priority class").select_option("train")
        page.get_by_label("Name", exact=True).fill("browser-run")
        page.get_by_role("button", name="Preview").click()
        expect(page.locator("#job-yaml")).to_contain_text("schedulerName: kai-scheduler")
        page.get_by_role("button", name="Submit").click()
        expect(page.locator("h1")).to_have_text("Workloads")
        # No reload from here on: the live table follows the Job from the cluster, KAI places its pod, it runs.
        page.evaluate("window.__sameDocument = true")
        row = page.locator("#workloads-table tr[data-workload='browser-run']")
        expect(row).to_be_visible(timeout=20000)
        expect(row).to_contain_text("Running", timeout=30000)
        expect(row).to_contain_text("a100")
        assert page.evaluate("window.__sameDocument") is True
        shoot(page, "workload-running-live")

        # The researcher stops it (Stop asks first, in the page): the Job goes with its pods, and the row stays,
        # Stopped.
        row.get_by_role("link", name="Stop browser-run").click()
        page.locator("#stop-confirm dialog").get_by_role("button", name="Stop browser-run").click()
        row = page.locator("#workloads-table tr[data-workload='browser-run']")
        expect(row).to_contain_text("Stopped", timeout=20000)
        assert emu.get("jobs.batch", "browser-run", "runai-rnd-a") is None
        assert Workload.objects.get(name="browser-run").phase == "Stopped"
    finally:
        stop.set()
        if background is not None:
            background.join(10)
        if sync is not None:
            sync.stop()
