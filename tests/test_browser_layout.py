"""Page widths and the top bar in a real browser (Chromium through Playwright, against Daphne; fixtures of
tests/test_browser.py), as a person meets them (issue 24): at 1280 px no page is wider than the window —
long cells wrap, wide tables scroll inside their own box — and the top bar is one line; at 800 px the top
bar wraps but every entry stays reachable. Pages are reached by clicking through the top bar's menus, on
the demo organisation, as its system administrator."""
from __future__ import annotations

import io

import pytest

from tests.provisioning.karpenter_objects import GPU_TAINT, gpu_pod, karpenter_emulator, nodepool, req
from tests.test_browser import (  # noqa: F401  (fixtures shared with the other browser tests)
    ARTIFACTS, _hints_reach_the_in_process_server, chromium, live_asgi, log_in, menu_link, page, pytestmark, shoot,
)

# What decides the verdicts: the page as wide as the window at most, and the top bar's entries on one row.
WIDTH = "() => ({scroll: document.documentElement.scrollWidth, window: window.innerWidth})"
TOPBAR = """() => {
  const bar = document.querySelector("header.topbar");
  const items = [...bar.querySelectorAll(":scope > *, :scope > nav > *")]
    .filter((e) => e.offsetParent !== null && e.getBoundingClientRect().width > 0 && e.tagName !== "NAV");
  const boxes = items.map((e) => e.getBoundingClientRect());
  return {height: bar.getBoundingClientRect().height,
          tops: boxes.map((b) => Math.round(b.top + b.height / 2)),
          right: Math.max(...boxes.map((b) => b.right)), left: Math.min(...boxes.map((b) => b.left)),
          names: items.map((e) => e.textContent.replace(/\\s+/g, " ").trim().slice(0, 24))};
}"""
# The top level of the bar (links and menus), and every link inside its menus.
ENTRIES = "header.topbar nav.mainnav > a, header.topbar details.menu > summary"


def settle(page) -> None:
    page.wait_for_load_state()
    page.wait_for_function("() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')")
    page.wait_for_timeout(80)


def check_page(page, name: str, failures: list[str]) -> None:
    """At the window's width: the page no wider, the top bar one line (one row of entries, one line high)."""
    settle(page)
    width = page.evaluate(WIDTH)
    if width["scroll"] > width["window"]:
        failures.append(f"{name} ({page.url}): {width['scroll']} px wide in a {width['window']} px window")
    bar = page.evaluate(TOPBAR)
    if max(bar["tops"]) - min(bar["tops"]) > 6 or bar["height"] > 56 or bar["right"] > width["window"]:
        failures.append(f"{name}: the top bar is not one line: {bar}")


@pytest.fixture
def demo(db):
    from django.core.management import call_command

    from usage.services import usage_snapshot_take

    call_command("demo", stdout=io.StringIO())
    usage_snapshot_take()


def test_no_page_is_wider_than_the_window_at_1280_px_and_the_top_bar_is_one_line(page, demo):
    from playwright.sync_api import expect

    from nodepools.models import Node, NodePool

    log_in(page, "admin", "gpu-demo")
    expect(page.locator("h1")).to_have_text("Cluster demo")
    failures: list[str] = []
    check_page(page, "overview", failures)
    # Every page of the top bar, reached through its menus as a person does.
    for menu, link, heading in [
        ("Capacity", "Node pools", "Node pools"), ("Capacity", "Nodes", "Nodes"), ("Capacity", "Platforms", "Platforms"),
        ("Capacity", "Quota", "Quota of cluster demo"), ("Organisation", "Departments", "Departments"),
        ("Organisation", "Projects", "Projects"), ("Usage", "Usage history", "Usage history"),
        ("Usage", "Idle GPUs", "Idle GPUs"), ("admin", "API tokens", "API tokens"),
    ]:
        menu_link(page, menu, link).click()
        expect(page.locator("h1")).to_contain_text(heading)
        check_page(page, link, failures)
    for link, heading in [("Workloads", "Workloads"), ("Audit", "Audit trail"), ("Overview", "Cluster demo")]:
        page.locator("header.topbar nav.mainnav > a", has_text=link).click()
        expect(page.locator("h1")).to_have_text(heading)
        check_page(page, link, failures)
    # The detail pages, reached by their links.
    page.get_by_role("link", name="Enforcement").first.click()
    expect(page.locator("h1")).to_have_text("Enforcement of demo")
    check_page(page, "enforcement", failures)
    for url, heading in [
        (f"/pools/{NodePool.objects.get(name='a100-80gb').pk}/", "Node pool a100-80gb"),
        (f"/nodes/{Node.objects.order_by('name').first().pk}/", "Node "),
        ("/projects/", "Project Vision team-vision"), ("/departments/", "Department R&D rnd"),
        ("/platforms/", "Platform "), ("/workloads/", "Submit a workload"),
    ]:
        page.goto(url)
        settle(page)
        if url == "/projects/":
            page.locator("#projects-table").get_by_role("link", name="Vision team-vision", exact=True).click()
        elif url == "/departments/":
            page.locator("#departments-table").get_by_role("link", name="R&D rnd", exact=True).click()
        elif url == "/platforms/":
            page.locator("#platforms-table tbody td:first-child a").first.click()
        elif url == "/workloads/":
            page.get_by_role("link", name="Submit a workload").click()
        expect(page.locator("h1")).to_contain_text(heading)
        check_page(page, heading.strip(), failures)
        if url.startswith("/projects/") or url.startswith("/departments/"):
            # Their GPU utilization and its chart come after the page: measured with them.
            page.wait_for_timeout(300)
            check_page(page, heading + " (with its utilization section)", failures)
    assert not failures, "\n".join(failures)
    shoot(page, "layout-submit-1280")


def test_the_top_bar_at_800_px_wraps_and_every_entry_stays_reachable(page, demo):
    from playwright.sync_api import expect

    log_in(page, "admin", "gpu-demo")
    page.set_viewport_size({"width": 800, "height": 900})
    page.goto("/")
    settle(page)
    width = page.evaluate(WIDTH)
    assert width["scroll"] <= width["window"] == 800, width
    entries = page.locator(ENTRIES)
    names = [entries.nth(i).inner_text().strip() for i in range(entries.count())]
    assert names == ["Overview", "Capacity", "Organisation", "Workloads", "Usage", "Audit", "admin"], names
    switcher = page.locator("header.topbar").get_by_label("Cluster")
    expect(switcher).to_be_visible()
    assert switcher.bounding_box()["x"] + switcher.bounding_box()["width"] <= 800
    for i in range(entries.count()):
        box = entries.nth(i).bounding_box()
        assert entries.nth(i).is_visible() and box["x"] >= 0 and box["x"] + box["width"] <= 800, (names[i], box)
    # Every menu opens inside the window, every link in it visible, and one of them followed.
    menus = {"Capacity": ["Node pools", "Nodes", "Platforms", "Quota"], "Organisation": ["Departments", "Projects"],
             "Usage": ["Usage history", "Idle GPUs"], "admin": ["API tokens", "Admin"]}
    for menu, links in menus.items():
        page.locator("header.topbar details.menu > summary", has_text=menu).click()
        for link in links:
            target = page.locator("header.topbar").get_by_role("link", name=link, exact=True)
            expect(target).to_be_visible()
            box = target.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 800, (menu, link, box)
        if menu == "admin":
            expect(page.locator("header.topbar").get_by_role("button", name="Log out")).to_be_visible()
        # Escape closes it (and a click elsewhere would too).
        page.keyboard.press("Escape")
        expect(page.locator("header.topbar").get_by_role("link", name=links[0], exact=True)).to_be_hidden()
    shoot_800 = page.viewport_size
    menu_link(page, "Organisation", "Projects").click()
    expect(page.locator("h1")).to_have_text("Projects")
    assert page.viewport_size == shoot_800
    settle(page)  # measured once loaded, as every other page here: its style sheets applied
    width = page.evaluate(WIDTH)
    assert width["scroll"] <= width["window"], width
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "layout-topbar-800.png"))


@pytest.fixture
def karpenter_lab(org, tmp_path, emulators):
    """The org's cluster in the emulator with Karpenter NodePools that cannot help rnd-a's pending 8-GPU pod
    (long reasons), mirrored by the real sync; h100-prod's limits and status as the cluster writes them."""
    with karpenter_emulator(emulators, org, tmp_path, nodepools=[
        nodepool("h100-prod", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "h100"),
                                            req("karpenter.sh/capacity-type", "In", "on-demand", "reserved"),
                                            req("topology.kubernetes.io/zone", "In", "us-east-1a", "us-east-1b")],
                 taints=[GPU_TAINT, {"key": "workload-type", "value": "inference", "effect": "NoSchedule"}],
                 limits={"cpu": "960", "memory": "8Ti", "nvidia.com/gpu": "16"}, weight=100,
                 resources={"cpu": "192", "memory": "2147483648Ki", "nvidia.com/gpu": "16", "nodes": "2"}, nodes=2),
        nodepool("t4-spot", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "t4"),
                                          req("karpenter.k8s.aws/instance-gpu-count", "In", "1", "4")],
                 taints=[GPU_TAINT], limits={"nvidia.com/gpu": "8"}, weight=10),
    ], pods=[gpu_pod("train-8-gpus-for-the-long-reasons", "runai-rnd-a", gpus=8)]) as (_, _, pool):
        yield org, pool


def test_long_karpenter_reasons_wrap_on_the_project_and_department_pages(page, users, karpenter_lab):
    """The "Why is it waiting?" table with Karpenter's reasons made these pages 2,400 px wide."""
    from playwright.sync_api import expect

    org, _ = karpenter_lab
    log_in(page, "sysadmin", "pw-sysadmin")
    failures: list[str] = []
    for url, heading in [(f"/projects/{org.rnd_a.pk}/", "Project rnd-a"), (f"/departments/{org.rnd.pk}/", "Department rnd")]:
        page.goto(url)
        expect(page.locator("h1")).to_have_text(heading)
        row = page.locator("#waiting tbody tr").first
        karpenter = row.locator("td.karpenter")
        expect(karpenter).to_contain_text("h100-prod: ")
        expect(karpenter).to_contain_text("t4-spot: ")
        check_page(page, heading, failures)
        # The reason wraps inside the window: several lines, its right edge within the page.
        box = karpenter.bounding_box()
        line = float(karpenter.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)"))
        assert box["x"] + box["width"] <= 1280 and box["height"] > 2 * line, (heading, box, line)
    assert not failures, "\n".join(failures)
    shoot(page, "layout-waiting-karpenter")
