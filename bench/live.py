"""Benchmark of live updates: from a change in the cluster to the changed row on an open page.

    .venv/bin/python bench/live.py [--nodes 5000] [--pods 50000] [--cordons 10] [--port 18400]

On PostgreSQL + Redis (bench/stack.py: the emulator in a process of its own holding a generated fleet, a
real `sync_clusters` process with its production intervals, Daphne), a system administrator's nodes page
(`/nodes/?sort=name`) is open in Chromium. Each round cordons one node of that page through the emulator
(the official kubernetes client, `PATCH spec.unschedulable`) and times, in the page, when its status
cell changes; the node is uncordoned after each round (timed too). Where the time goes, per round:

  write   the change's row committed by the sync (the row's `updated`, stamped by the sync's writer)
  hint    the "changed" hint arriving on the page's websocket
  fetch   the page's refetch leaving the browser
  shown   the changed status cell on the page

Target: median <= 300 ms (issue 24). Figures are medians over the rounds, the load average beside each;
the machine may be shared.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stack import Stack, load_avg, log  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
TARGET_MS = 300

# Records, in the page's clock (Date.now(), the same wall clock as Python's time.time()), the websocket's
# hints, the refetches leaving and the moment the watched cell's text changes.
PROBE = """
(() => {
  window.benchProbe = {hints: [], fetches: [], changes: []};
  const Native = window.WebSocket;
  window.WebSocket = function (url, protocols) {
    const socket = protocols === undefined ? new Native(url) : new Native(url, protocols);
    socket.addEventListener("message", (e) => {
      try { const d = JSON.parse(e.data); if (d.type === "changed") window.benchProbe.hints.push(Date.now()); } catch (x) {}
    });
    return socket;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
  document.addEventListener("htmx:beforeRequest", () => window.benchProbe.fetches.push(Date.now()));
  window.benchWatch = (selector, before) => {
    const probe = window.benchProbe;
    const check = () => {
      const cell = document.querySelector(selector);
      if (cell && cell.textContent.trim() !== before) { probe.changes.push(Date.now()); observer.disconnect(); }
    };
    const observer = new MutationObserver(check);
    observer.observe(document.body, {subtree: true, childList: true, characterData: true});
  };
})();
"""


def percentile(values, q):
    values = sorted(values)
    return values[max(0, min(len(values) - 1, int(round(q * len(values))) - 1))]


def run_rounds(stack: Stack, page, names: list[str], rounds: int) -> list[dict]:
    from nodepools.models import Node

    api = stack.kube_api()
    results = []
    for i in range(rounds):
        name = names[i % len(names)]
        for cordon in (True, False):
            selector = f"#nodes-table tr[data-node='{name}'] td:nth-child(2)"
            before = page.locator(selector).inner_text().strip()
            page.evaluate("([s, b]) => { window.benchProbe.hints = []; window.benchProbe.fetches = [];"
                          " window.benchProbe.changes = []; window.benchWatch(s, b); }", [selector, before])
            time.sleep(0.3)
            started = time.time()
            api.patch_node(name, {"spec": {"unschedulable": cordon}})
            page.wait_for_function("() => window.benchProbe.changes.length > 0", timeout=15000)
            probe = page.evaluate("window.benchProbe")
            node = Node.objects.get(cluster=stack.cluster, name=name)
            assert node.unschedulable == cordon, (name, cordon)
            shown = probe["changes"][0] / 1000
            hint = next((h / 1000 for h in probe["hints"] if h / 1000 >= started), None)
            fetch = next((f / 1000 for f in probe["fetches"] if f / 1000 >= started), None)
            row = {"cordon": cordon, "node": name, "total": shown - started,
                   "write": node.updated.timestamp() - started,
                   "hint": hint - started if hint else None, "fetch": fetch - started if fetch else None,
                   "load": load_avg()}
            results.append(row)
            log(f"{'cordon  ' if cordon else 'uncordon'} {name}: shown {row['total'] * 1000:6.0f} ms "
                f"(written {row['write'] * 1000:4.0f}, hint {_ms(row['hint'])}, fetch {_ms(row['fetch'])}); {row['load']}")
            time.sleep(0.5)
    return results


def _ms(value) -> str:
    return "   —" if value is None else f"{value * 1000:4.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--cordons", type=int, default=10, help="rounds (a cordon and an uncordon each)")
    parser.add_argument("--port", type=int, default=18400)
    parser.add_argument("--no-reference", action="store_true",
                        help="leave out the machine reference (bench/reference.py) measured at the start and end")
    args = parser.parse_args()

    import os

    from bench.reference import Reference

    ref = Reference.off() if args.no_reference else Reference.start()  # before the stack starts, after it stops

    from playwright.sync_api import sync_playwright

    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "1"  # this process reads the database beside Playwright's loop

    stack = Stack(nodes=args.nodes, pods=args.pods, daphnes=1, port=args.port)
    try:
        stack.start()
        cookie = stack.session_cookie()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(base_url=stack.urls[0], viewport={"width": 1440, "height": 1000})
            context.add_cookies([{"name": "sessionid", "value": cookie, "url": stack.urls[0]}])
            context.add_init_script(PROBE)
            page = context.new_page()
            page.goto(f"/nodes/?cluster={stack.cluster.pk}&sort=name")
            page.wait_for_selector("#live-status[data-state='on']", timeout=30000)
            names = page.eval_on_selector_all("#nodes-table tr[data-node]", "rows => rows.map(r => r.dataset.node)")
            assert names, "the nodes page shows no node"
            time.sleep(1.0)
            results = run_rounds(stack, page, names[1:], args.cordons)
            browser.close()
    finally:
        stack.stop()
    ref.finish()

    def figures(rows, key):
        values = [r[key] * 1000 for r in rows if r[key] is not None]
        return (statistics.median(values), min(values), max(values)) if values else (float("nan"),) * 3

    print(f"\nlive updates, {args.nodes:,} nodes / {args.pods:,} pods, PostgreSQL + Redis, one Daphne, "
          f"{len(results)} changes ({args.cordons} cordons + {args.cordons} uncordons); {load_avg()}")
    for label, key in (("row written by the sync", "write"), ("hint on the page's websocket", "hint"),
                       ("refetch leaves the browser", "fetch"), ("status cell changed", "total")):
        med, lo, hi = figures(results, key)
        print(f"  {label:32s} median {med:6.0f} ms  ({lo:.0f}-{hi:.0f})   {ref.ms(med, digits=0)}")
    med = statistics.median(r["total"] * 1000 for r in results)
    cordons = statistics.median(r["total"] * 1000 for r in results if r["cordon"])
    print(f"  cordons alone: median {cordons:.0f} ms; p95 of all {percentile([r['total'] * 1000 for r in results], 0.95):.0f} ms")
    verdict = "MET" if med <= TARGET_MS else "NOT MET"
    print(f"  target median <= {TARGET_MS} ms: {ref.ms(med, digits=0)} {verdict}; {load_avg()}")
    return 0 if med <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
