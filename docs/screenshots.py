"""Remake the documentation's screenshots from the demo: `python docs/screenshots.py` (or `make screenshots`).

Starts the demo as `make run` does (`manage.py run_demo`: the Kubernetes API emulator with the demo cluster,
the sync, the usage snapshots, the web server and the demo's story) on a database and a run directory of its
own in a temporary directory, on a free port (`--port`, default 8123), so that it clashes with no running
`make run`. Once the story has had time to submit its workloads (`--settle`, seconds), Debian's Chromium
(through Playwright) signs in as each demo login, opens the pages the docs show, and writes one PNG per page
into docs/img/ (1280 px wide, reduced to a palette of 256 colours, so that each stays small). Then it stops
the demo. Run it again after a change of the pages; commit the PNGs it writes.
"""
from __future__ import annotations

import argparse
import io
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "gpu-demo"
WIDTH, HEIGHT = 1280, 800

# (file name, login, path or a callable of the ids giving it, what to wait for, full page)
SHOTS = [
    ("overview.png", "admin", "/", "table", False),
    ("pools.png", "admin", "/pools/?sort=name", "table", False),
    ("nodes.png", "admin", "/nodes/?sort=-allocated_gpus", "table", False),
    ("pool.png", "admin", lambda ids: f"/pools/{ids['pool']['a100-40gb']}/", "table", False),
    ("pool-karpenter.png", "admin", lambda ids: f"/pools/{ids['pool']['h100-prod']}/", "table", False),
    ("quota.png", "admin", lambda ids: f"/clusters/{ids['cluster']}/quota/", "table", False),
    ("enforcement.png", "admin", lambda ids: f"/clusters/{ids['cluster']}/enforcement/", "main", False),
    ("workloads.png", "admin", "/workloads/", "table", False),
    ("idle-gpus.png", "admin", "/usage/idle-gpus/", "main", False),
    ("usage.png", "admin", "/usage/", "main", False),
    ("audit.png", "admin", "/audit/", "table", False),
    ("statement.png", "rnd-manager", lambda ids: f"/departments/{ids['department']['rnd']}/statement/", "table", False),
    ("department.png", "rnd-manager", "/", "main", False),
    ("department-admin.png", "rnd-admin", lambda ids: f"/clusters/{ids['cluster']}/quota/", "table", False),
    ("project.png", "researcher", "/", "main", False),
    ("submit.png", "researcher", "/workloads/submit/", "form", False),
]


# The columns a shot shows, chosen in the page's column chooser as a person would (saved for that login).
COLUMNS = {
    "workloads.png": ["name", "project", "phase", "gpus", "priority_class", "pending_reason", "queue_position",
                      "preempted_by"],
}


def choose_columns(page, names: list[str]) -> None:
    page.click("details.columns-chooser > summary")
    for box in page.locator("details.columns-chooser input[name=columns]").all():
        box.set_checked(box.get_attribute("value") in names)
    page.click("details.columns-chooser button.primary")
    page.wait_for_load_state()


def free_port(preferred: int) -> int:
    import socket

    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]


def ids_of(db: Path) -> dict:
    with sqlite3.connect(db, timeout=20) as con:
        cluster = con.execute("SELECT id FROM nodepools_cluster WHERE name = 'demo'").fetchone()[0]
        pools = dict(con.execute("SELECT name, id FROM nodepools_nodepool WHERE cluster_id = ?", (cluster,)))
        departments = dict(con.execute("SELECT name, id FROM projects_department"))
    return {"cluster": cluster, "pool": pools, "department": departments}


def optimized(png: bytes) -> bytes:
    """The screenshot as a 256-colour palette PNG (a page is mostly flat colours: a few times smaller)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    if image.width > WIDTH:
        image = image.resize((WIDTH, round(image.height * WIDTH / image.width)))
    out = io.BytesIO()
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        out, format="PNG", optimize=True)
    return out.getvalue()


def shoot(base: str, ids: dict, only: set[str]) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        contexts = {}
        for name, login, path, ready, full in SHOTS:
            if only and name not in only:
                continue
            if login not in contexts:
                context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}, base_url=base)
                page = context.new_page()
                page.set_default_timeout(30_000)
                page.goto("/login/")
                page.fill("#id_username", login)
                page.fill("#id_password", PASSWORD)
                page.click("form button[type=submit]")
                page.wait_for_load_state()
                contexts[login] = page
            page = contexts[login]
            page.goto(path(ids) if callable(path) else path)
            page.wait_for_selector(ready)
            if name in COLUMNS:
                choose_columns(page, COLUMNS[name])
                page.wait_for_selector(ready)
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(1500)  # the sections fetched after the page, the charts drawn
            (IMG / name).write_bytes(optimized(page.screenshot(full_page=full)))
            print(f"  {name:<24} {(IMG / name).stat().st_size // 1024:>4} KiB  {login} {page.url}")
        browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8123")))
    parser.add_argument("--settle", type=float, default=150,
                        help="seconds the demo's story runs before the pictures are taken (default 150)")
    parser.add_argument("only", nargs="*", help="only these files (e.g. overview.png)")
    args = parser.parse_args()
    if not os.path.exists(CHROMIUM):
        sys.exit(f"needs Debian's Chromium at {CHROMIUM} (apt-get install chromium)")
    IMG.mkdir(parents=True, exist_ok=True)
    port = free_port(args.port)
    with tempfile.TemporaryDirectory(prefix="console-screenshots-") as tmp:
        db = Path(tmp) / "db.sqlite3"
        env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "CONSOLE_RUN_DIR": str(Path(tmp) / "run")}
        python = sys.executable
        subprocess.run([python, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
        log = open(Path(tmp) / "demo.log", "w+")
        demo = subprocess.Popen([python, "manage.py", "run_demo", "--port", str(port)], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while "Serving on" not in Path(log.name).read_text():
                if demo.poll() is not None or time.monotonic() > deadline:
                    sys.exit("the demo did not start:\n" + Path(log.name).read_text())
                time.sleep(1)
            print(f"demo serving on port {port}; letting its story run {args.settle:.0f} s")
            time.sleep(args.settle)
            shoot(f"http://127.0.0.1:{port}", ids_of(db), set(args.only))
        finally:
            os.killpg(demo.pid, signal.SIGINT)
            try:
                demo.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(demo.pid, signal.SIGKILL)
                demo.wait()
    total = sum(p.stat().st_size for p in IMG.glob("*.png"))
    print(f"docs/img: {total / 1024 / 1024:.1f} MiB in {len(list(IMG.glob('*.png')))} pictures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
