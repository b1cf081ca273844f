"""Following links as a person does reaches the whole page: every link in every table and detail page.

A click on a link that leaves a table must show the page of its URL (its heading, one top bar, its
buttons), exactly as a plain load of that URL does; only sort, filter and page links swap the table,
and they too must leave the page as a plain load of the new URL shows it. Runs on the demo
organisation, as the system administrator (who sees every link); one browser page for all of it.
"""
from __future__ import annotations

import io
import re
from urllib.parse import parse_qsl, urljoin, urlsplit

import pytest

from tests.test_browser import (CHROMIUM, REQUIRE, _hints_reach_the_in_process_server, chromium,  # noqa: F401
                                live_asgi, log_in, shoot)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not __import__("os").path.exists(CHROMIUM) and not REQUIRE,
                       reason=f"needs Chromium at {CHROMIUM} (apt-get install -y chromium)"),
]

# What a person sees of a page: its heading, how many top bars, its section headings and buttons. As a
# function of a document: the page in the browser, or the HTML of a plain GET of a URL, parsed.
SEEN_OF = """(document) => {
  const text = (e) => e.textContent.replace(/\\s+/g, " ").trim();
  const main = document.querySelector("main");
  return {
    h1: [...document.querySelectorAll("h1")].map(text),
    topbars: document.querySelectorAll("header.topbar").length,
    h2: main ? [...main.querySelectorAll("h2")].map(text) : [],
    buttons: main ? [...main.querySelectorAll("a.button, button")].map(text) : [],
    filters: document.querySelectorAll("form.filters").length,
  };
}"""
SEEN = f"() => ({SEEN_OF})(document)"
# A plain load of a URL (no htmx headers), as the server answers it: status and what it shows.
PLAIN = f"""async (url) => {{
  const response = await fetch(url, {{credentials: "same-origin"}});
  const doc = new DOMParser().parseFromString(await response.text(), "text/html");
  return [response.status, ({SEEN_OF})(doc)];
}}"""

# Every link a person can click in the page's tables and body (downloads and in-place editors aside).
LINKS = """() => [...document.querySelectorAll("main a[href]")]
  .filter((a) => a.offsetParent !== null && !a.hasAttribute("download") && !a.classList.contains("cell-edit")
                 && !a.getAttribute("href").startsWith("#"))
  .map((a) => a.getAttribute("href"))"""

PER_KIND = 1  # links sharing a path pattern and query keys are one kind (a row's link, a sort link): one of each


def link_kind(start: str, href: str) -> tuple:
    parts = urlsplit(href)
    path = re.sub(r"/\d+/", "/N/", parts.path or urlsplit(start).path)
    return path, tuple(sorted({k for k, _ in parse_qsl(parts.query, keep_blank_values=True)}))


def settle(page) -> None:
    page.wait_for_load_state()
    page.wait_for_function("() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')")
    page.wait_for_timeout(60)


def test_every_link_in_tables_and_detail_pages_reaches_the_whole_page(chromium, live_asgi, db):
    from django.core.management import call_command

    from nodepools.models import Cluster, Node, NodePool, NodeStatus
    from projects.models import Department, Project
    from usage.services import usage_snapshot_take

    call_command("demo", stdout=io.StringIO())
    usage_snapshot_take()
    cluster = Cluster.objects.get(name="demo")
    pool = NodePool.objects.get(cluster=cluster, name="a100-80gb")
    node = Node.objects.filter(cluster=cluster, status=NodeStatus.NOT_READY).order_by("name").first() \
        or Node.objects.order_by("name").first()
    department = Department.objects.get(name="rnd")
    project = Project.objects.get(name="team-vision")
    starts = {
        "overview": "/",
        "nodes": "/nodes/?sort=name&per_page=25",
        "pools": "/pools/",
        "pool": f"/pools/{pool.pk}/",
        "node": f"/nodes/{node.pk}/",
        "departments": "/departments/",
        "department": f"/departments/{department.pk}/",
        "projects": "/projects/",
        "project": f"/projects/{project.pk}/",
        "quota grid": f"/clusters/{cluster.pk}/quota/",
        "audit": "/audit/",
        "usage": "/usage/",
    }

    context = chromium.new_context(viewport={"width": 1280, "height": 900}, base_url=live_asgi.url)
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(page, "admin", "gpu-demo")

    plain: dict[str, dict] = {}

    def plain_load(url: str) -> dict:
        if url not in plain:
            status, seen = page.evaluate(PLAIN, url)
            assert status == 200, f"{url}: {status}"
            plain[url] = seen
        return plain[url]

    failures: list[str] = []
    followed = 0
    for name, start in starts.items():
        page.goto(start)
        settle(page)
        plain_load(start)
        hrefs = page.evaluate(LINKS)
        assert hrefs, f"no links on the {name} page ({start})"
        sampled: dict[tuple, list[str]] = {}
        for href in dict.fromkeys(hrefs):
            kind = link_kind(start, href)
            if len(sampled.setdefault(kind, [])) < PER_KIND:
                sampled[kind].append(href)
        for kind, group in sampled.items():
            for href in group:
                page.goto(start)
                settle(page)
                before = page.url
                target = urljoin(before, href)
                page.locator(f'main a[href="{href}"]').first.click()
                if target != before:  # (a link to the page itself, e.g. "Clear" of no filter, keeps the URL)
                    page.wait_for_url(target)
                settle(page)
                reached_url = page.url
                seen = page.evaluate(SEEN)
                followed += 1
                expected = plain_load(reached_url.removeprefix(live_asgi.url))
                if seen != expected or seen["topbars"] != 1:
                    failures.append(f"{name} ({start}) → {href} reached {reached_url.removeprefix(live_asgi.url)}:\n"
                                    f"    after the click: {seen}\n    plain load:      {expected}")
    # Back and forward through a sort (an htmx swap) and a followed link: whole pages all the way.
    page.goto("/nodes/")
    settle(page)
    page.locator("#nodes-table thead a", has_text="Node pool").click()
    page.wait_for_url("**/nodes/?sort=pool")
    settle(page)
    page.locator("#nodes-table tbody td:first-child a").first.click()
    settle(page)
    for step in (page.go_back, page.go_back, page.go_forward):
        step()
        settle(page)
        seen = page.evaluate(SEEN)
        expected = plain_load(page.url.removeprefix(live_asgi.url))
        if seen != expected or seen["topbars"] != 1:
            failures.append(f"{step.__name__} to {page.url}:\n    seen: {seen}\n    plain load: {expected}")
    # The nodes list with a node's reasons opened from the keyboard, and that node's page reached by its
    # link, for a person to look at.
    many = max(Node.objects.filter(cluster=cluster), key=lambda n: len(n.status_reasons or []))
    page.goto("/nodes/")
    settle(page)
    row = page.locator(f"#nodes-table tr[data-node='{many.name}']")
    if len(many.status_reasons) > 1:
        row.locator("summary").focus()
        page.keyboard.press("Enter")
        assert row.locator("li").all_inner_texts() == many.status_reasons
    shoot(page, "navigation-nodes-list")
    row.locator("td:first-child a").click()
    page.wait_for_url(f"**/nodes/{many.pk}/")
    settle(page)
    assert page.locator("h1").inner_text() == f"Node {many.name}"
    assert page.locator("#node-reasons li").all_inner_texts() == many.status_reasons
    shoot(page, "navigation-node-from-list")
    context.close()
    assert errors == [], f"JavaScript errors: {errors}"
    assert followed >= 45, f"only {followed} links followed"
    assert not failures, f"{len(failures)} of {followed} links did not reach the whole page:\n" + "\n".join(failures)
