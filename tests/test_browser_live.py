"""The clusters' state on open pages, in a real browser: when the cluster becomes unreachable (or its
sync stops reporting), the top-bar badge and the banner above the table appear within seconds without a
reload, and clear when it recovers, with a later "last full sync".

Same setting as tests/test_browser.py (Daphne in a thread of this process, the Kubernetes API emulator
and the sync in threads too), and its fixtures: one Daphne per test session, shared with that module
(Twisted's reactor runs once per process).
"""
from __future__ import annotations

import os
import re
import time

import pytest

from tests import test_browser as browser
from tests.test_browser import CHROMIUM, REQUIRE, chromium, log_in, page, shoot  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.path.exists(CHROMIUM) and not REQUIRE,
                       reason=f"needs Chromium at {CHROMIUM} (apt-get install -y chromium)"),
]


class _Shared:
    server = None
    users = 0


def _share_one_server():
    """Both modules' session fixtures get the same Daphne: the second `start` borrows the first's, and
    only the last `stop` stops it."""
    cls = browser.LiveASGIServer
    if getattr(cls, "_shared", False):
        return
    start, stop = cls.start, cls.stop

    def shared_start(self):
        if _Shared.server is None:
            _Shared.server = start(self)
        _Shared.users += 1
        return _Shared.server

    def shared_stop(self):
        _Shared.users -= 1
        if _Shared.users == 0:
            stop(_Shared.server)
            _Shared.server = None

    cls.start, cls.stop, cls._shared = shared_start, shared_stop, True


_share_one_server()
_hints_reach_the_in_process_server = browser._hints_reach_the_in_process_server


@pytest.fixture(scope="session")
def live_asgi(django_db_setup):
    server = browser.LiveASGIServer().start()
    yield server
    server.stop()


class Syncing:
    """The cluster's sync, stepped by the test. `run_until` rides out "table is locked": the test
    database is SQLite in memory with a shared cache, where a read by the web server's thread makes a
    concurrent write fail at once (a file database in WAL mode, as `make run` uses, or PostgreSQL just
    wait); the sync then starts again, as `sync_clusters` restarts a cluster's sync after any failure."""

    def __init__(self, cluster, *, unreachable_after: float = 2):
        self.cluster = cluster
        self.unreachable_after = unreachable_after
        self.sync = None
        self.start()

    def start(self):
        from nodepools.models import Cluster
        from nodepools.sync import ClusterSync, SyncOptions

        self.sync = ClusterSync(Cluster.objects.get(pk=self.cluster.pk),
                                SyncOptions(backoff_base=0.05, backoff_max=0.3, batch_delay=0.02, tick=0.05,
                                            hint_interval=0.05, unreachable_after=self.unreachable_after))
        self.sync.start()

    def stop(self):
        if self.sync is not None:
            self.sync.stop()
            self.sync = None

    def run_until(self, condition, timeout=20.0) -> bool:
        from django.db import OperationalError

        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.sync.run_until(condition, timeout=max(0.1, deadline - time.monotonic()))
            except OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                self.stop()
                self.start()


@pytest.fixture
def live_cluster(users, tmp_path, emulators):
    """An emulated cluster with two GPU nodes, synced (fast retries, unreachable after 2 s), that the
    user `cluster-viewer` may view."""
    from nodepools import services
    from kubesim import make_node, make_pod
    from nodepools.models import Cluster, Node, NodeStatus
    from projects import services as org_services
    from access.rules import Role

    emu = emulators()
    sync = None
    try:
        nodes = [make_node(f"g-{i}", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB") for i in (1, 2)]
        pods = [make_pod(f"{app}-{n}", "gpu-operator", node=n, labels={"app": app}, ready=True)
                for n in ("g-1", "g-2") for app in ("nvidia-container-toolkit-daemonset", "nvidia-dcgm-exporter")]
        emu.load(nodes=nodes, pods=pods)
        cluster = services.cluster_create(actor=None, name="live",
                                          kubeconfig_path=str(emu.write_kubeconfig(tmp_path / "kubeconfig")),
                                          kube_context="emulator")
        org_services.role_assign(actor=None, role=Role.VIEWER, user=users["cluster_viewer"], cluster=cluster)
        sync = Syncing(cluster)
        assert sync.run_until(lambda: Node.objects.filter(cluster=cluster, status=NodeStatus.READY).count() == 2)
        assert sync.run_until(lambda: Cluster.objects.get(pk=cluster.pk).last_full_sync is not None)
        yield cluster, emu, sync
    finally:
        if sync is not None:
            sync.stop()


def test_an_unreachable_cluster_shows_on_the_open_page_and_clears_when_it_recovers(page, live_cluster):
    from playwright.sync_api import expect

    from nodepools.models import Cluster, ConnectionState

    cluster, emu, sync = live_cluster
    log_in(page, "cluster-viewer", "pw-cluster-viewer")
    page.goto(f"/nodes/?cluster={cluster.pk}&sort=name")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "on")
    badge = page.locator(f"#cluster-badges .cluster-badge[data-cluster='{cluster.pk}']")
    banner = page.locator(f"#cluster-banners .cluster-banner[data-cluster='{cluster.pk}']")
    last_sync = badge  # the badge carries the last full sync (in its tooltip and data-last-full-sync)
    expect(badge).to_have_text("live: connected")
    expect(banner).to_have_count(0)
    synced_before = last_sync.get_attribute("data-last-full-sync")
    assert synced_before
    page.evaluate("window.pageMark = 'not reloaded'")

    # The API stops answering: within seconds, without a reload, the page says so.
    emu.set_offline(True, mode="reset")
    assert sync.run_until(lambda: Cluster.objects.get(pk=cluster.pk).connection_state == ConnectionState.UNREACHABLE,
                          timeout=15)
    went_down = time.monotonic()
    expect(badge).to_have_text("live: unreachable", timeout=5000)
    expect(badge).to_have_attribute("data-stale", "true")
    expect(banner).to_be_visible(timeout=5000)
    assert time.monotonic() - went_down < 5
    expect(banner).to_contain_text("Cluster live is unreachable: the figures shown are stale since")
    stale_since = Cluster.objects.get(pk=cluster.pk).stale_since()
    assert banner.locator("time").get_attribute("datetime") == stale_since.isoformat()
    # The header's age of the figures counts from when they stopped being current.
    age = page.locator("header.topbar #data-age")
    expect(age).to_have_class(re.compile(r"\bdata-age-stale\b"))
    assert age.get_attribute("data-updated-at") == stale_since.isoformat()
    # The banner is above the nodes table; the nodes turn Unknown.
    assert page.evaluate("""() => {
        const b = document.querySelector('#cluster-banners'), t = document.querySelector('#nodes-table');
        return !!(b.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING); }""")
    expect(page.locator("#nodes-table tr[data-node='g-1'] td:nth-child(2)")).to_have_text("Unknown", timeout=5000)
    shoot(page, "cluster-unreachable")

    # It comes back after a long outage (its history is gone, so the sync lists everything again): the
    # banner clears and the last full sync advances.
    emu.compact()
    emu.set_offline(False)
    assert sync.run_until(lambda: (c := Cluster.objects.get(pk=cluster.pk)).connection_state == ConnectionState.CONNECTED
                          and c.last_full_sync.isoformat() > synced_before, timeout=20), \
        (Cluster.objects.filter(pk=cluster.pk).values().first(), synced_before)
    expect(banner).to_have_count(0, timeout=5000)
    expect(badge).to_have_text("live: connected")
    expect(age).not_to_have_class(re.compile(r"\bdata-age-stale\b"))
    expect(age).to_have_text(re.compile(r"^updated [0-4] s ago$"))
    expect(last_sync).not_to_have_attribute("data-last-full-sync", synced_before, timeout=5000)
    assert last_sync.get_attribute("data-last-full-sync") > synced_before
    assert page.evaluate("window.pageMark") == "not reloaded"


def test_a_sync_leader_that_stopped_reporting_makes_the_open_page_say_the_figures_are_stale(page, live_cluster):
    # A hung leader sends no hint at all: the page learns it from the heartbeat's age alone.
    from django.utils import timezone

    from playwright.sync_api import expect

    from nodepools.models import Cluster

    cluster, emu, sync = live_cluster
    sync.stop()
    Cluster.objects.filter(pk=cluster.pk).update(leader_heartbeat=timezone.now())
    log_in(page, "cluster-viewer", "pw-cluster-viewer")
    page.goto(f"/pools/{cluster.default_pool.pk}/")
    banner = page.locator(f"#cluster-banners .cluster-banner[data-cluster='{cluster.pk}']")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "on")
    expect(banner).to_have_count(0)

    hung = timezone.now() - timezone.timedelta(seconds=40)
    Cluster.objects.filter(pk=cluster.pk).update(leader_heartbeat=hung)
    expect(banner).to_contain_text("Cluster live is not being synced", timeout=5000)
    expect(banner).to_contain_text("has not reported for over 30 seconds")
    expect(page.locator(f".cluster-badge[data-cluster='{cluster.pk}']")).to_have_text("live: stale")

    Cluster.objects.filter(pk=cluster.pk).update(leader_heartbeat=timezone.now())
    expect(banner).to_have_count(0, timeout=5000)


def test_a_node_added_while_the_page_was_connecting_shows_without_a_reload(page, live_cluster):
    # The hint for a change made between the page's rendering and its websocket joining is gone; the
    # page learns of it from the marks in the websocket's hello, and refetches its table.
    import re

    from playwright.sync_api import expect
    from prometheus_client import REGISTRY

    from kubesim import make_node
    from nodepools.models import Node

    def node_hints_sent() -> float:  # counted once the hint is published (nodepools.hints.publish_async)
        return REGISTRY.get_sample_value("console_hints_sent_total", {"kind": "nodes"}) or 0.0

    cluster, emu, sync = live_cluster
    held = []
    page.route_web_socket(re.compile(r".*/ws/live/.*"), lambda ws: held.append(ws))  # connects when the test says
    log_in(page, "cluster-viewer", "pw-cluster-viewer")
    page.goto(f"/nodes/?cluster={cluster.pk}&sort=name")
    expect(page.locator("#nodes-table tr[data-node]")).to_have_count(2)
    page.evaluate("window.pageMark = 'not reloaded'")

    sent = node_hints_sent()
    emu.add_node(make_node("g-3", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB"))
    assert sync.run_until(lambda: Node.objects.filter(cluster=cluster, name="g-3").exists())
    deadline = time.monotonic() + 10
    while node_hints_sent() == sent:  # until the hint has gone out, to nobody: the page's websocket is held
        assert time.monotonic() < deadline, "the sync sent no hint of g-3"
        time.sleep(0.02)
    expect(page.locator("#nodes-table tr[data-node='g-3']")).to_have_count(0)

    assert held, "the page opened no websocket"
    held[-1].connect_to_server()
    expect(page.locator("#nodes-table tr[data-node='g-3']")).to_be_visible(timeout=5000)
    expect(page.locator("#nodes-table tr[data-node]")).to_have_count(3)
    assert page.evaluate("window.pageMark") == "not reloaded"
